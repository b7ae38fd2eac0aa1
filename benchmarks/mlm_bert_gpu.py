"""The keras-io MLM-BERT example (the mini-BERT recipe's anchor) on a machine without TensorFlow (a GPU machine).

`quality_vs_anchor --task bert` needs TensorFlow for the example's
`TextVectorization`, which a GPU machine may lack, and the example is too
slow for this CPU on the full data. `prepare` runs the example's
vectorization here on the recipe's splits (the same reviews, validation split
and pretraining texts as `benchmarks/mini_bert_gpu.py prepare`) and saves the
arrays; `train` needs only keras and numpy: it runs
`benchmarks.anchors.mlm_bert.train` (the example's masking, model, Adam and
frozen-then-unfrozen fine-tuning) and writes `metrics.json` and the logs.

    python -m benchmarks.mlm_bert_gpu prepare ARRAYS --data-dir DATA          # here, with TensorFlow
    KERAS_BACKEND=jax python -m benchmarks.mlm_bert_gpu train ARRAYS --out RESULTS --epochs 5 \\
        --finetune-epochs 10                                                   # the example's 5 + 5 + 5
    python -m benchmarks.mlm_bert_gpu plot RESULTS --kformer docs/results/mini_bert_gpu/seed1337 --out curves.png

`--pretrain-seconds S` stops pretraining after the epoch that passes S
seconds: the anchor at kformer's pretraining time on the same machine kind.
`train` also appends its scores, one row, to benchmarks/results/mlm_bert_gpu.csv
(`--results`) with the command, commit, date, machine and backend.
"""

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

from benchmarks import provenance

ARRAYS = "arrays.npz"
HEADER = ["device", "epochs", "requested_epochs", "finetune_epochs", "pretraining_steps", "pretrain_seconds",
          "finetune_seconds", "masked_token_accuracy", "test_accuracy", "parameters", "seed", "out"]


def prepare(argv):
    p = argparse.ArgumentParser(prog="mlm_bert_gpu prepare", description="the example's vectorization -> arrays")
    p.add_argument("arrays", type=pathlib.Path, help="folder to write arrays.npz")
    p.add_argument("--data-dir", default=None, help="full data sets (default: the bundled sample)")
    p.add_argument("--max-examples", type=int, default=None, help="at most this many reviews per split")
    p.add_argument("--seed", type=int, default=1337, help="the recipe's validation split")
    args = p.parse_args(argv)
    if args.data_dir is not None and not pathlib.Path(args.data_dir).is_dir():
        p.error(f"--data-dir {args.data_dir!r} is not a folder")
    if args.max_examples is not None and args.max_examples < 1:
        p.error(f"--max-examples must be a positive integer. Received: {args.max_examples}")
    from benchmarks.anchors import mlm_bert
    from kformer.data import imdb

    train = imdb.load_split("train", args.data_dir, args.max_examples)
    train, validation = imdb.train_validation_split(*train, seed=args.seed)  # the recipe's split
    splits = {"train": train, "validation": validation,
              "test": imdb.load_split("test", args.data_dir, args.max_examples)}
    unlabeled = imdb.load_split("unsup", args.data_dir, args.max_examples)[0]
    start = time.time()
    arrays = mlm_bert.vectorize(splits, unlabeled)
    args.arrays.mkdir(parents=True, exist_ok=True)
    with open(args.arrays / f".tmp-{ARRAYS}", "wb") as f:  # atomic: a killed run leaves no half file
        np.savez_compressed(f, **arrays)
    os.replace(args.arrays / f".tmp-{ARRAYS}", args.arrays / ARRAYS)
    print(json.dumps({k: list(v.shape) for k, v in arrays.items()}), f"{time.time() - start:.0f} s")


def train(argv):
    p = argparse.ArgumentParser(prog="mlm_bert_gpu train", description="pretrain, fine-tune, test: the example")
    p.add_argument("arrays", type=pathlib.Path, help="the folder `prepare` wrote")
    p.add_argument("--out", type=pathlib.Path, required=True, help="folder for metrics.json and the logs")
    p.add_argument("--epochs", type=int, default=5, help="pretraining epochs (the example: 5)")
    p.add_argument("--pretrain-seconds", type=float, default=None,
                   help="stop pretraining after the epoch that passes this many seconds")
    p.add_argument("--finetune-epochs", type=int, default=10, help="half frozen, half not (the example: 5 + 5)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--verbose", type=int, default=2)
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("mlm_bert_gpu.csv"),
                   help="the CSV the run's row is appended to")
    args = p.parse_args(argv)
    for name in ("epochs", "finetune_epochs"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1. Received: {getattr(args, name)}")
    if args.pretrain_seconds is not None and args.pretrain_seconds <= 0:
        p.error(f"--pretrain-seconds must be > 0. Received: {args.pretrain_seconds}")
    if not (args.arrays / ARRAYS).is_file():
        p.error(f"{args.arrays / ARRAYS} not found: run `prepare {args.arrays}` first")
    if (args.out / "metrics.json").exists():
        p.error(f"--out {args.out} already holds a run's metrics.json: pass a new folder (results are never "
                "overwritten)")
    import keras

    from benchmarks.anchors import mlm_bert
    from benchmarks.mini_bert_gpu import device_name, save

    with np.load(args.arrays / ARRAYS) as saved:
        arrays = {k: saved[k] for k in saved.files}
    args.out.mkdir(parents=True, exist_ok=True)
    result = mlm_bert.train(arrays, epochs=args.epochs, finetune_epochs=args.finetune_epochs,
                            pretrain_seconds=args.pretrain_seconds, seed=args.seed, verbose=args.verbose,
                            log_dir=args.out)
    flags = {**vars(args), "arrays": str(args.arrays), "out": str(args.out), "results": str(args.results),
             "requested_epochs": args.epochs}
    # the result's "epochs" (those run) and "finetune_epochs" (how they were split) replace the flags'
    metrics = {"backend": keras.backend.backend(), "device": device_name(), **flags, **result}
    save(args.out, metrics)
    provenance.write_csv(args.results, HEADER, [[metrics[k] for k in HEADER]],
                         backend=metrics["backend"], append=True)
    print(f"appended a row to {args.results}")


def plot(argv):
    """Held-out masked-token accuracy against pretraining seconds; validation accuracy per fine-tuning epoch."""
    p = argparse.ArgumentParser(prog="mlm_bert_gpu plot", description=plot.__doc__)
    p.add_argument("results", type=pathlib.Path, nargs="+", help="folders `train` wrote (named for the legend)")
    p.add_argument("--kformer", type=pathlib.Path, nargs="*", default=[],
                   help="folders `benchmarks/mini_bert_gpu.py train` wrote")
    p.add_argument("--out", type=pathlib.Path, required=True, help="the PNG to write")
    args = p.parse_args(argv)
    from benchmarks.mini_bert_gpu import column, save_figure, two_panels

    fig, left, right = two_panels()
    runs = [(folder, "keras-io example", "val_sparse_categorical_accuracy") for folder in args.results]
    runs += [(folder, "kformer mini-BERT", "val_mlm_logits_sparse_categorical_accuracy") for folder in args.kformer]
    for index, (folder, label, key) in enumerate(runs):
        metrics, color = json.loads((folder / "metrics.json").read_text()), f"C{index}"
        accuracy = column(folder / "pretrain_log.csv", key)
        seconds = np.linspace(0, metrics["pretrain_seconds"], len(accuracy) + 1)[1:]  # epochs: equal time each
        name = f"{label} ({folder.name})"
        left.plot(seconds, accuracy, color=color, marker="o", markersize=3, label=name)
        curve = column(folder / "finetune_log.csv", "val_accuracy")
        right.plot(range(1, len(curve) + 1), curve, color=color, marker="o", markersize=3,
                   label=f"{name}: test {100 * metrics['test_accuracy']:.2f} %")
    frozen = int(json.loads((args.results[0] / "metrics.json").read_text())["finetune_epochs"].split()[0])
    right.axvline(frozen + 0.5, color="grey", linestyle=":", label="the example unfreezes its backbone")
    left.set(title="pretraining (each side's own vocabulary and masking:\ncompare curves within a side, "
                   "not across)", xlabel="pretraining seconds (epochs spread evenly)",
             ylabel="held-out masked-token accuracy")
    right.set(title="IMDB sentiment fine-tuning (test: the last epoch for the example,\n"
                    "the best validation epoch for kformer)", xlabel="epoch", ylabel="validation accuracy")
    save_figure(fig, left, right, args.out)


if __name__ == "__main__":
    commands = {"prepare": prepare, "train": train, "plot": plot}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python -m benchmarks.mlm_bert_gpu {{prepare,train,plot}} ...  (got {sys.argv[1:]})")
    commands[sys.argv[1]](sys.argv[2:])
