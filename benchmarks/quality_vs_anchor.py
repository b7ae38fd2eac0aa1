"""Train a kformer recipe and its anchor example on the same files, then print both test scores.

    python -m benchmarks.quality_vs_anchor --task imdb --data-dir DATA
    python -m benchmarks.quality_vs_anchor --task translation --data-dir DATA --epochs 3 --split-by source
    python -m benchmarks.quality_vs_anchor --task mnist --data-dir DATA --epochs 60 --anchor-epochs 1
    python -m benchmarks.quality_vs_anchor --task cifar10 --data-dir DATA --epochs 10
    python -m benchmarks.quality_vs_anchor --task bert --data-dir DATA --max-examples 8000 --epochs 1
    python -m benchmarks.quality_vs_anchor --task speech --data-dir DATA --anchor-epochs 3

The anchors (`benchmarks/anchors/`) are the Keras / keras-hub examples at
their published sizes: "Text classification with Transformer" (imdb), the
keras-hub "English-to-Spanish translation" (translation), "Image
classification with Vision Transformer" (mnist, cifar10), "End-to-end
Masked Language Modeling with BERT" (bert) and, made small for a CPU,
"Automatic Speech Recognition using CTC" (speech: FSDD digit strings, the
recipe's own utterances; the recipe runs without its held-out-speaker model). Both sides read the same files,
use the same train / validation / test split and the same seed, and train
for `--epochs` (`--anchor-epochs` where equal epochs would not fit). The
recipe runs as its own process (its command is printed; `--no-export`), the
anchor in this one; wall time, `fit` time and epochs are printed for both.
Both run with the same malloc setting (`--malloc`: the recipes' default,
`kformer.runtime.keep_freed_memory`, set in this process too, or glibc's
defaults on both sides), and on JAX with the recipes' random bits
(`kformer.runtime.faster_jax_random`). Writes `<output-dir>/quality_vs_anchor_<task>.json`, and
appends one row per model and test score to benchmarks/results/quality_vs_anchor.csv (`--results`),
each with the command, commit, date, machine and backend.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from benchmarks import encoder_throughput, provenance

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RECIPES = {"imdb": "train_imdb", "translation": "train_translator", "mnist": "train_vit",
           "cifar10": "train_vit", "bert": "pretrain_mini_bert", "speech": "train_speech"}
DEFAULT_EPOCHS = {"imdb": 2, "translation": 3, "mnist": 8, "cifar10": 10, "bert": 1, "speech": 14}
RECIPE_FLAGS = {"mnist": ["--dataset", "mnist"], "cifar10": ["--dataset", "cifar10"],
                "bert": ["--compare-scratch"], "speech": ["--ood-speaker", "none"]}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, choices=sorted(RECIPES))
    p.add_argument("--data-dir", default=None, help="full data sets (default: the bundled sample)")
    p.add_argument("--epochs", type=int, default=None, help="both sides (default: %s)" % DEFAULT_EPOCHS)
    p.add_argument("--anchor-epochs", type=int, default=None, help="the anchor's, if not --epochs")
    p.add_argument("--max-examples", type=int, default=None, help="at most this many examples per split")
    p.add_argument("--finetune-epochs", type=int, default=2, help="bert only: fine-tuning epochs, both sides")
    p.add_argument("--split-by", choices=("pair", "source"), default="pair", help="translation only")
    p.add_argument("--recipe-args", default="", help='more recipe flags, e.g. "--patience 60"')
    p.add_argument("--only", choices=("recipe", "anchor"), default=None, help="run one side")
    p.add_argument("--malloc", choices=("keep", "default"), default="keep",
                   help="both sides: glibc's malloc keeps freed memory (as the recipes run by default) or "
                        "glibc's defaults (the recipe with --no-keep-freed-memory)")
    p.add_argument("--output-dir", default="benchmark_runs")
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("quality_vs_anchor.csv"),
                   help="the CSV the score rows are appended to")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--verbose", type=int, choices=(0, 1, 2), default=2)
    args = p.parse_args(argv)
    for flag in ("epochs", "anchor_epochs", "max_examples", "finetune_epochs"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
    if args.data_dir is not None and not pathlib.Path(args.data_dir).is_dir():
        p.error(f"--data-dir {args.data_dir!r} is not a folder")
    if args.split_by == "source" and args.task != "translation":
        p.error("--split-by source is for --task translation")
    args.epochs = args.epochs or DEFAULT_EPOCHS[args.task]
    args.anchor_epochs = args.anchor_epochs or args.epochs
    return args


def run_recipe(args, out_dir):
    """Run the kformer recipe in a fresh process -> {"command", "seconds", "metrics": {folder: metrics}}."""
    command = [sys.executable, "-m", f"recipes.{RECIPES[args.task]}", "--epochs", str(args.epochs),
               "--seed", str(args.seed), "--output-dir", str(out_dir), "--no-export", "--no-plots",
               "--verbose", str(args.verbose), *RECIPE_FLAGS.get(args.task, [])]
    command += ["--data-dir", args.data_dir] if args.data_dir else []
    command += ["--max-examples", str(args.max_examples)] if args.max_examples else []
    command += ["--split-by", args.split_by] if args.task == "translation" else []
    command += ["--finetune-epochs", str(args.finetune_epochs)] if args.task == "bert" else []
    command += [] if args.malloc == "keep" else ["--no-keep-freed-memory"]
    command += args.recipe_args.split()
    print("recipe:", " ".join(command[1:]), flush=True)
    start = time.time()
    subprocess.run(command, check=True)
    seconds = time.time() - start
    found = sorted(out_dir.glob("*/[0-9]*/metrics.json"))
    if not found:
        raise SystemExit(f"the recipe wrote no metrics.json under {out_dir}")
    metrics = {path.parent.parent.name: json.loads(path.read_text()) for path in found}
    return {"command": " ".join(["python", *command[1:]]), "seconds": round(seconds, 1), "metrics": metrics}


def run_anchor(args):
    """Load the task's splits as the recipe does and train its anchor(s) -> {name: result}."""
    from kformer.data import images, imdb, translation

    if args.task in ("imdb", "bert"):
        train = imdb.load_split("train", args.data_dir, args.max_examples)
        test = imdb.load_split("test", args.data_dir, args.max_examples)
        train, validation = imdb.train_validation_split(*train, seed=args.seed)
        splits = {"train": train, "validation": validation, "test": test}
        if args.task == "imdb":
            from benchmarks.anchors import imdb as anchor

            return {f"keras example ({end} {anchor.SEQUENCE_LENGTH} words)":
                    anchor.run(splits, epochs=args.anchor_epochs, truncation=end, seed=args.seed,
                               verbose=args.verbose) for end in ("tail", "head")}
        from benchmarks.anchors import mlm_bert as anchor

        unlabeled = imdb.load_split("unsup", args.data_dir, args.max_examples)[0]
        return {"keras MLM-BERT example": anchor.run(
            splits, unlabeled, epochs=args.anchor_epochs, finetune_epochs=args.finetune_epochs, seed=args.seed,
            verbose=args.verbose)}
    if args.task == "translation":
        from benchmarks.anchors import translation as anchor

        splits = [translation.load_split(split, "spa-eng", args.data_dir, args.max_examples, args.split_by)
                  for split in ("train", "validation", "test")]
        return {"keras-hub example (greedy)": anchor.run(*splits, epochs=args.anchor_epochs, seed=args.seed,
                                                          verbose=args.verbose)}
    if args.task == "speech":
        from benchmarks.anchors import speech as anchor
        from recipes import train_speech

        recipe_args = train_speech.parse_args(["--seed", str(args.seed), "--ood-speaker", "none", "--no-export",
                                               "--no-keep-freed-memory",  # set by --malloc already
                                               *(["--data-dir", args.data_dir] if args.data_dir else []),
                                               *(["--max-examples", str(args.max_examples)]
                                                 if args.max_examples else []), *args.recipe_args.split()])
        _, (train, validation, test) = train_speech.splits(recipe_args)
        return {"keras ASR CTC example (small)": anchor.run(train, validation, test, epochs=args.anchor_epochs,
                                                           seed=args.seed, verbose=args.verbose)}
    from benchmarks.anchors import vit as anchor

    x, y = images.load_split("train", args.task, args.data_dir, args.max_examples)
    test = images.load_split("test", args.task, args.data_dir, args.max_examples)
    cut = len(y) - max(1, len(y) // 10)  # the recipe's validation split
    return {"keras ViT example": anchor.run((x[:cut], y[:cut]), (x[cut:], y[cut:]), test, args.task,
                                            epochs=args.anchor_epochs, seed=args.seed, verbose=args.verbose,
                                            jit_compile=anchor.jit_compile("auto"))}  # compiled on JAX


SCORES = ("test_accuracy", "scratch_test_accuracy", "test_top1", "test_bleu", "test_chrf",
          "masked_token_accuracy", "test_digit_error_rate", "test_utterance_accuracy")


HEADER = ["task", "model", "epochs", "fit_s", "wall_s", "metric", "value", "data", "max_examples", "seed", "malloc"]


def csv_rows(report):
    """The report's test scores -> one row of `HEADER` per model and score."""
    recipe = report.get("recipe", {})
    sides = [(f"kformer {name}", metrics.get("epochs", report["epochs"]), metrics.get("train_seconds", ""),
              recipe["seconds"], metrics) for name, metrics in recipe.get("metrics", {}).items()]
    sides += [(name, result["epochs"], result["fit_seconds"], result["seconds"], result)
              for name, result in report.get("anchor", {}).items()]
    return [(report["task"], model, epochs, fit_s, wall_s, key, round(value, 4),
             report["data_dir"] or "bundled sample", report["max_examples"] or "", report["seed"], report["malloc"])
            for model, epochs, fit_s, wall_s, scores in sides for key, value in scores.items()
            if key in SCORES and isinstance(value, (int, float))]


def summary(result):
    """The scores of one side's metrics (dict) as 'name value, ...'."""
    return ", ".join(f"{k} {v:.4f}" if v < 1 else f"{k} {v:.2f}" for k, v in result.items()
                     if k in SCORES and isinstance(v, (int, float)))


def main(argv=None):
    args = parse_args(argv)
    encoder_throughput.set_process(args.malloc)  # the anchor trains here: the recipe's malloc and JAX random bits
    out_dir = pathlib.Path(args.output_dir)
    run_dir = out_dir / f"{args.task}-{time.strftime('%Y%m%d-%H%M%S')}"
    report = {"task": args.task, "data_dir": args.data_dir, "epochs": args.epochs,
              "anchor_epochs": args.anchor_epochs, "max_examples": args.max_examples, "seed": args.seed,
              "malloc": args.malloc}
    if args.only != "anchor":
        report["recipe"] = run_recipe(args, run_dir)
    if args.only != "recipe":
        import keras

        report["backend"] = keras.backend.backend()
        start = time.time()
        report["anchor"] = run_anchor(args)
        report["anchor_seconds"] = round(time.time() - start, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"quality_vs_anchor_{args.task}.json"
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")

    print(f"\n{args.task}: same files ({args.data_dir or 'bundled sample'}), seed {args.seed}")
    print(f"{'model':42s} {'epochs':>6s} {'fit s':>8s} {'wall s':>8s}  test scores")
    for name, metrics in report.get("recipe", {}).get("metrics", {}).items():
        print(f"{'kformer ' + name:42s} {metrics.get('epochs', args.epochs):>6} "
              f"{metrics.get('train_seconds', float('nan')):>8} {report['recipe']['seconds']:>8}  {summary(metrics)}")
    for name, result in report.get("anchor", {}).items():
        print(f"{name:42s} {result['epochs']:>6} {result['fit_seconds']:>8} {result['seconds']:>8}  "
              f"{summary(result)}")
    print(f"written: {path}")
    rows = csv_rows(report)
    provenance.write_csv(args.results, HEADER, rows, backend=report.get("backend"), append=True)
    print(f"appended {len(rows)} rows to {args.results}")
    return report


if __name__ == "__main__":
    main()
