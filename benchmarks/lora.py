"""LoRA against full fine-tuning from the same checkpoint: the recipe's own mini-BERT on IMDB.

    python -m recipes.pretrain_mini_bert --no-export --finetune-epochs 1     # saved_models/bert_tiny_mlm/1
    python benchmarks/lora.py saved_models/bert_tiny_mlm/1 --backends tensorflow,jax,torch

The pretrained `BertPretrainer` (`model.keras` of the recipe's `_mlm` version folder) is written as a
Hugging Face checkpoint (`save_pretrained`). Then, on each backend and each in its own process,
`recipes.train_imdb --from-pretrained` fine-tunes it on the IMDB training split twice: every weight
(`--full-learning-rate`), and LoRA adapters on query and value (`--lora-rank`, `--lora-learning-rate`),
both for `--epochs` epochs with early stopping on validation accuracy. Per run: the test accuracy, the
weights trained and their share of the model's, the mean time of a training step (`train_seconds` of
the run over its steps, the first epoch's compile included), and the process's peak resident memory
(`ru_maxrss` of the child). Appends one row per run to benchmarks/results/lora.csv (`--results`).
"""

import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LORA_TARGETS = ("query", "key", "value", "attention_output", "mlp_in", "mlp_out")  # the recipes' `--lora-targets all`
HEADER = ["method", "test_accuracy", "test_examples", "trained_weights", "trained_percent", "step_ms",
          "peak_rss_mb", "epochs_run", "learning_rate"]


def checkpoint(version_folder, folder):
    """The recipe's pretrained masked-LM model as a Hugging Face BERT folder, and the classifier's weight count.

    The recipe learns its vocabulary with kformer's own normalizer, which transformers' `BertTokenizer`
    cannot reproduce (`save_pretrained` refuses it): the folder gets the same vocabulary with BERT's
    uncased normalization and its five special tokens, so both fine-tunes read text the same way,
    slightly differently from pretraining.
    """
    from kformer import models
    from kformer.data.preprocessors import BertPreprocessor
    from kformer.data.wordpiece import BERT_SPECIAL_TOKENS, WordPieceTokenizer

    pretrainer = models.load(version_folder)
    tokenizer, preprocessor = pretrainer.preprocessor.tokenizer, pretrainer.preprocessor
    if tokenizer.normalizer == "kformer":
        uncased = WordPieceTokenizer(tokenizer.vocabulary, special_tokens=BERT_SPECIAL_TOKENS,
                                     normalizer="bert_uncased")
        pretrainer.preprocessor = BertPreprocessor(uncased, preprocessor.sequence_length, mask_positions=True)
    pretrainer.save_pretrained(folder)
    task = models.from_pretrained(folder, task="text_classification", num_classes=2)
    total = sum(math.prod(w.shape) for w in task.weights)
    return folder, total


def lora_weights(folder, rank, targets):
    from kformer import models

    task = models.from_pretrained(folder, task="text_classification", num_classes=2)
    task.enable_lora(rank, target_names=targets)
    return sum(math.prod(w.shape) for w in task.trainable_weights)


def run(backend, folder, extra, output):
    """`train_imdb --from-pretrained` in a child process -> (metrics.json, peak RSS in MB)."""
    command = [sys.executable, "-m", "recipes.train_imdb", f"--from-pretrained={folder}", f"--output-dir={output}",
               "--no-export", "--no-plots", "--verbose=2", *extra]
    print(f"KERAS_BACKEND={backend} {' '.join(command[1:])}", flush=True)
    child = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "KERAS_BACKEND": backend})
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the run failed: {' '.join(command)}")
    run_dir = max((output / f"{folder.name}_imdb").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    log = (run_dir / "training_log.csv")
    metrics["epochs_run"] = max(0, len(log.read_text().splitlines()) - 1) if log.is_file() else metrics["epochs"]
    return metrics, usage.ru_maxrss / 1024


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pretrained", help="pretrain_mini_bert's masked-LM version folder (bert_tiny_mlm/<n>)")
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--lora-targets", default="query,value", help="the recipe's --lora-targets")
    parser.add_argument("--methods", default="full,lora", help="which runs: full, lora or both")
    parser.add_argument("--full-learning-rate", type=float, default=5e-4,
                        help="pretrain_mini_bert's own fine-tuning rate")
    parser.add_argument("--lora-learning-rate", type=float, default=5e-3,
                        help="picked on the validation split from 2e-3, 5e-3 and 1e-2 (TensorFlow)")
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--results", type=pathlib.Path, default=provenance.results_file("lora.csv"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kformer-lora-bench-") as tmp:
        tmp = pathlib.Path(tmp)
        folder, total = checkpoint(args.pretrained, tmp / "mini-bert")
        targets = LORA_TARGETS if args.lora_targets == "all" else tuple(args.lora_targets.split(","))
        trained = {"full": total, "lora": lora_weights(folder, args.lora_rank, targets)}
        shared = [f"--epochs={args.epochs}", f"--batch-size={args.batch_size}",
                  *([f"--max-examples={args.max_examples}"] if args.max_examples else []),
                  *([f"--data-dir={args.data_dir}"] if args.data_dir else [])]
        runs = {"full": ("full", [], args.full_learning_rate),
                "lora": (f"lora (rank {args.lora_rank}, {args.lora_targets})",
                         [f"--lora-rank={args.lora_rank}", f"--lora-targets={args.lora_targets}"],
                         args.lora_learning_rate)}
        for backend in args.backends.split(","):
            rows = []
            for method in args.methods.split(","):
                label, extra, rate = runs[method]
                metrics, rss = run(backend, folder, [*shared, *extra, f"--learning-rate={rate}"],
                                   tmp / f"{backend}-{method}")
                steps = metrics["epochs_run"] * math.ceil(metrics["train_examples"] / args.batch_size)
                weights = trained[method]
                rows.append([label, round(metrics["test_accuracy"], 4), metrics["test_examples"], weights,
                             round(100 * weights / total, 2), round(1000 * metrics["train_seconds"] / steps, 1),
                             round(rss), metrics["epochs_run"], rate])
                print(dict(zip(HEADER, rows[-1])), flush=True)
            provenance.write_csv(args.results, HEADER, rows, backend=backend, append=True)


if __name__ == "__main__":
    main()
