"""mini-BERT's pretrained-vs-scratch comparison on a machine without TensorFlow (a GPU machine).

`recipes.pretrain_mini_bert` tokenizes and packs with TensorFlow, which a GPU
machine may lack. `prepare` runs the recipe's data steps through
`kformer.data` (the same reviews, vocabulary, next-sentence pairs and
validation split; it imports no recipe, and caches nothing) and saves
their arrays; `train` needs only keras and numpy: it pretrains on the pairs
with the recipe's masking (`kformer.data.mlm.mask_tokens`, new masks every
batch), fine-tunes on the labeled reviews, trains a from-scratch twin with as
many optimizer steps in all (the recipe's rule) and one with the fine-tuning
schedule, fine-tunes again from the backbone as it was after the epochs in
`--finetune-at` (mid-schedule snapshots, not shorter runs), and writes
`metrics.json` and the training logs. It pretrains on the next-sentence
pairs (the recipe's default); the recipe's `--pretraining-text packed` is
not offered here.

    python -m benchmarks.mini_bert_gpu prepare ARRAYS -- --data-dir DATA        # here, with TensorFlow
    KERAS_BACKEND=jax python -m benchmarks.mini_bert_gpu train ARRAYS --out RESULTS \\
        --pretrain-epochs 30 --batch-size 256 --objective mlm --pretrain-dropout 0   # 5 min on one H200
    python -m benchmarks.mini_bert_gpu plot RESULTS [RESULTS ...] --out curves.png

Flags after `--` in `prepare` are the recipe's, with its defaults (`--data-dir`, `--preset`,
`--seed`, `--vocabulary-size`, `--sequence-length`, `--max-examples`); `train` takes the rest of the recipe's
choices (AdamW, weight decay 0.01, warmup over 10 % of the steps then cosine
decay, early stopping on validation accuracy with the best epoch restored).
The held-out pairs are the recipe's; their masks are drawn once with the
recipe's seed (the recipe's own validation set draws them with seed 0).
`train` also appends its scores, one row, to benchmarks/results/mini_bert_gpu.csv
(`--results`) with the command, commit, date, machine and backend.
"""

import argparse
import json
import math
import os
import pathlib
import sys
import time

import keras
import numpy as np

from benchmarks import provenance

ARRAYS = "arrays.npz"
HEADER = ["device", "preset", "objective", "pretrain_epochs", "batch_size", "pretraining_steps", "pretrain_seconds",
          "masked_token_accuracy", "test_accuracy", "scratch_test_accuracy", "scratch_short_test_accuracy",
          "gain_points", "test_accuracy_after_epochs", "seed", "out"]


def recipe_flags(argv):
    """`recipes/pretrain_mini_bert.py`'s data flags, with its defaults -> argparse namespace."""
    p = argparse.ArgumentParser(prog="mini_bert_gpu prepare ARRAYS --", description="the recipe's data flags")
    p.add_argument("--data-dir", default=None, help="full IMDB (default: the bundled sample)")
    p.add_argument("--preset", default="bert_tiny")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--vocabulary-size", type=int, default=8000)
    p.add_argument("--sequence-length", type=int, default=128)
    p.add_argument("--max-examples", type=int, default=None)
    args = p.parse_args(argv)
    if args.max_examples is not None and args.max_examples < 1:
        p.error(f"argument --max-examples: expected an integer >= 1, got {args.max_examples}")
    return args


def prepare(argv):
    p = argparse.ArgumentParser(prog="mini_bert_gpu prepare", description="the recipe's data steps -> arrays")
    p.add_argument("arrays", type=pathlib.Path, help="folder to write arrays.npz, vocabulary.txt, config.json")
    args, recipe_argv = p.parse_known_args(argv)
    recipe = recipe_flags([a for a in recipe_argv if a != "--"])
    from kformer.data import imdb, mlm
    from kformer.data.preprocessors import BertPreprocessor
    from kformer.data.wordpiece import WordPieceTokenizer

    args.arrays.mkdir(parents=True, exist_ok=True)
    splits = {split: imdb.load_split(split, recipe.data_dir, recipe.max_examples)
              for split in ("train", "test", "unsup")}
    splits["train"], splits["validation"] = imdb.train_validation_split(*splits["train"], seed=recipe.seed)
    corpus = splits["unsup"][0] + splits["train"][0]  # as the recipe: never validation or test
    tokenizer = WordPieceTokenizer.learn(corpus, recipe.vocabulary_size, verbose=2)
    tokenizer.save(args.arrays / "vocabulary.txt")
    pairs = mlm.segment_pairs(corpus, tokenizer, recipe.sequence_length, seed=recipe.seed, verbose=2)
    preprocessor = BertPreprocessor(tokenizer, recipe.sequence_length)
    ids = "uint16" if tokenizer.vocabulary_size <= 2**16 else "int32"
    columns = {"pair_token_ids": pairs["token_ids"].astype(ids),
               "pair_segment_ids": pairs["segment_ids"].astype("uint8"),
               "nsp_labels": pairs["nsp_labels"].astype("uint8")}
    for split in ("train", "validation", "test"):
        texts, labels = splits[split]
        columns[f"{split}_token_ids"] = preprocessor.encode(texts)["token_ids"].astype(ids)
        columns[f"{split}_labels"] = np.asarray(labels, "uint8")
    config = {"preset": recipe.preset, "sequence_length": recipe.sequence_length, "seed": recipe.seed,
              **mlm.masking_args(tokenizer), "pretraining_texts": len(corpus)}
    (args.arrays / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    with open(args.arrays / f".tmp-{ARRAYS}", "wb") as f:  # atomic: a killed run leaves no half file
        np.savez_compressed(f, **columns)
    os.replace(args.arrays / f".tmp-{ARRAYS}", args.arrays / ARRAYS)
    print(json.dumps({k: list(v.shape) for k, v in columns.items()}))


class Snapshots(keras.callbacks.Callback):
    """Keep `backbone`'s weights after each epoch in `epochs` (1-based): `self.weights[epoch]`."""

    def __init__(self, backbone, epochs):
        super().__init__()
        self.backbone, self.epochs, self.weights = backbone, set(epochs), {}

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 in self.epochs:
            self.weights[epoch + 1] = self.backbone.get_weights()


class MaskedPairs(keras.utils.PyDataset):
    """Shuffled batches of sentence pairs, masked anew every batch (the recipe's dynamic masking)."""

    def __init__(self, pairs, batch_size, masking, seed):
        super().__init__()
        self.pairs, self.batch_size, self.masking = pairs, batch_size, masking
        self.rng = np.random.default_rng(seed)
        self.order = self.rng.permutation(len(pairs["nsp_labels"]))

    def __len__(self):
        return math.ceil(len(self.order) / self.batch_size)

    def __getitem__(self, index):
        rows = np.sort(self.order[index * self.batch_size:(index + 1) * self.batch_size])
        return masked_batch({k: v[rows] for k, v in self.pairs.items()}, self.masking, self.rng)

    def on_epoch_end(self):
        self.order = self.rng.permutation(len(self.order))


def masked_batch(pairs, masking, rng):
    """Pairs -> `(x, y, sample_weight)` for `bert_pretrainer`, as `mlm.make_pretraining_dataset`."""
    from kformer.data import mlm

    masked, positions, labels, weights = mlm.mask_tokens(pairs["token_ids"].astype("int32"), rng=rng, **masking)
    nsp = pairs["nsp_labels"].astype("int32")
    return mlm.pretraining_inputs(masked, pairs["segment_ids"].astype("int32"), positions, labels, weights, nsp,
                                  np.ones(len(nsp), "float32"))


def reviews(arrays, split):
    ids = arrays[f"{split}_token_ids"].astype("int32")
    x = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": ids != 0}
    return x, arrays[f"{split}_labels"].astype("int32")


def classify(args, backbone, arrays, epochs, learning_rate, log):
    """Fine-tune a classifier on `backbone`; early stopping keeps the best validation epoch -> (accuracy, s)."""
    from kformer import models

    train_x, train_y = reviews(arrays, "train")
    steps = epochs * math.ceil(len(train_y) / args.finetune_batch_size)
    model = models.bert_text_classifier(backbone, 2)
    model.compile(models.adamw(learning_rate, steps), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    start = time.time()
    model.fit(train_x, train_y, batch_size=args.finetune_batch_size, epochs=epochs, shuffle=True,
              validation_data=reviews(arrays, "validation"), verbose=args.verbose,
              callbacks=[keras.callbacks.EarlyStopping("val_accuracy", mode="max", patience=args.patience,
                                                       restore_best_weights=True),
                         keras.callbacks.CSVLogger(str(log))])
    _, accuracy = model.evaluate(*reviews(arrays, "test"), batch_size=256, verbose=0)
    return float(accuracy), round(time.time() - start, 1)


def train(argv):
    p = argparse.ArgumentParser(prog="mini_bert_gpu train", description="pretrain, fine-tune, from scratch")
    p.add_argument("arrays", type=pathlib.Path, help="the folder `prepare` wrote")
    p.add_argument("--out", type=pathlib.Path, required=True, help="folder for metrics.json and the logs")
    p.add_argument("--pretrain-epochs", type=int, default=10, help="passes over the pretraining pairs")
    p.add_argument("--batch-size", type=int, default=32, help="pretraining batch")
    p.add_argument("--learning-rate", type=float, default=1e-3, help="pretraining peak learning rate")
    p.add_argument("--objective", choices=["mlm_nsp", "mlm"], default="mlm_nsp")
    p.add_argument("--pretrain-dropout", type=float, default=None, help="default: the preset's")
    p.add_argument("--finetune-epochs", type=int, default=3)
    p.add_argument("--finetune-batch-size", type=int, default=32)
    p.add_argument("--finetune-learning-rate", type=float, default=5e-4)
    p.add_argument("--scratch-learning-rate", type=float, default=1e-3)
    p.add_argument("--patience", type=int, default=3)
    p.add_argument("--finetune-at", default="", help="comma-separated pretraining epochs to fine-tune from too")
    p.add_argument("--seed", type=int, default=None,
                   help="initialization, masking and shuffling (default: the recipe seed `prepare` used)")
    p.add_argument("--verbose", type=int, default=2)
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("mini_bert_gpu.csv"),
                   help="the CSV the run's row is appended to")
    args = p.parse_args(argv)
    for name in ("pretrain_epochs", "batch_size", "finetune_epochs", "finetune_batch_size", "patience"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1. Received: {getattr(args, name)}")
    try:
        args.finetune_at = sorted({int(e) for e in args.finetune_at.split(",") if e.strip()})
    except ValueError:
        p.error(f"--finetune-at must be comma-separated integers. Received: {args.finetune_at!r}")
    if any(not 1 <= e < args.pretrain_epochs for e in args.finetune_at):
        p.error(f"--finetune-at epochs must be in [1, {args.pretrain_epochs - 1}]. Received: {args.finetune_at}")
    if not (args.arrays / ARRAYS).is_file():
        p.error(f"{args.arrays / ARRAYS} not found: run `prepare {args.arrays}` first")
    if (args.out / "metrics.json").exists():
        p.error(f"--out {args.out} already holds a run's metrics.json: pass a new folder (results are never "
                "overwritten)")
    from kformer import models

    config = json.loads((args.arrays / "config.json").read_text())
    masking = {k: config[k] for k in ("vocabulary_size", "num_special", "mask_id")}
    args.out.mkdir(parents=True, exist_ok=True)
    with np.load(args.arrays / ARRAYS) as saved:
        arrays = {k: saved[k] for k in saved.files}
    pairs = {k: arrays[f"pair_{k}"] for k in ("token_ids", "segment_ids")} | {"nsp_labels": arrays["nsp_labels"]}
    cut = len(pairs["nsp_labels"]) - max(1, len(pairs["nsp_labels"]) // 20)  # the recipe's 5 % held out
    seed = config["seed"] if args.seed is None else args.seed
    keras.utils.set_random_seed(seed)

    def backbone(**overrides):
        return models.build(config["preset"], vocabulary_size=config["vocabulary_size"],
                            sequence_length=config["sequence_length"], **overrides)

    train_pairs = MaskedPairs({k: v[:cut] for k, v in pairs.items()}, args.batch_size, masking, seed)
    x, y, weights = masked_batch({k: v[cut:] for k, v in pairs.items()}, masking,
                                 np.random.default_rng(config["seed"]))  # held-out masks drawn once
    steps = args.pretrain_epochs * len(train_pairs)
    pretrained = backbone(**({} if args.pretrain_dropout is None else {"dropout": args.pretrain_dropout}))
    model = models.bert_pretrainer(pretrained)
    models.compile_bert_pretrainer(model, models.adamw(args.learning_rate, steps), objective=args.objective)
    snapshots = Snapshots(pretrained, args.finetune_at)
    start = time.time()
    model.fit(train_pairs, epochs=args.pretrain_epochs, validation_data=(x, y, weights),
              validation_batch_size=256, verbose=args.verbose,
              callbacks=[keras.callbacks.CSVLogger(str(args.out / "pretrain_log.csv")), snapshots])
    pretrain_seconds = round(time.time() - start, 1)
    results = model.evaluate(x, y, sample_weight=weights, batch_size=256, verbose=0, return_dict=True)
    metrics = {"backend": keras.backend.backend(), "device": device_name(), **vars(args),
               "arrays": str(args.arrays), "out": str(args.out), "results": str(args.results),
               "pretraining_pairs": cut, "held_out_pairs": len(pairs["nsp_labels"]) - cut, "pretraining_steps": steps,
               "pretrain_seconds": pretrain_seconds,
               "masked_token_accuracy": float(results["mlm_logits_sparse_categorical_accuracy"])}
    save(args.out, metrics)  # after each stage: a run cut short keeps what it finished

    def finetune(weights, log):
        finetuned = backbone()  # the preset's dropout; the pooler trains here
        finetuned.set_weights(weights)
        return classify(args, finetuned, arrays, args.finetune_epochs, args.finetune_learning_rate, log)

    metrics["test_accuracy"], metrics["finetune_seconds"] = finetune(pretrained.get_weights(),
                                                                     args.out / "finetune_log.csv")
    per_epoch = math.ceil(len(arrays["train_labels"]) / args.finetune_batch_size)
    metrics["scratch_epochs"] = math.ceil((steps + args.finetune_epochs * per_epoch) / per_epoch)
    keras.utils.set_random_seed(seed)
    metrics["scratch_test_accuracy"], metrics["scratch_seconds"] = classify(
        args, backbone(), arrays, metrics["scratch_epochs"], args.scratch_learning_rate,
        args.out / "scratch_log.csv")
    metrics["gain_points"] = round(100 * (metrics["test_accuracy"] - metrics["scratch_test_accuracy"]), 2)
    save(args.out, metrics)
    keras.utils.set_random_seed(seed)
    metrics["scratch_short_test_accuracy"], _ = classify(  # the fine-tuning schedule, at scratch's rate
        args, backbone(), arrays, args.finetune_epochs, args.scratch_learning_rate,
        args.out / "scratch_short_log.csv")
    save(args.out, metrics)
    for epoch in args.finetune_at:
        metrics[f"test_accuracy_after_epoch_{epoch}"], _ = finetune(snapshots.weights[epoch],
                                                                    args.out / f"finetune_at_{epoch}_log.csv")
        save(args.out, metrics)
    after = "; ".join(f"{e}: {metrics[f'test_accuracy_after_epoch_{e}']:.4f}" for e in args.finetune_at)
    provenance.write_csv(args.results, HEADER, [(
        metrics["device"], config["preset"], args.objective, args.pretrain_epochs, args.batch_size, steps,
        pretrain_seconds, *(round(metrics[k], 4) for k in ("masked_token_accuracy", "test_accuracy",
                                                          "scratch_test_accuracy", "scratch_short_test_accuracy")),
        metrics["gain_points"], after, seed, str(args.out))], backend=metrics["backend"], append=True)
    print(f"appended a row to {args.results}")


def save(out, metrics):
    (out / ".tmp-metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    os.replace(out / ".tmp-metrics.json", out / "metrics.json")  # atomic
    print(json.dumps(metrics), flush=True)


def plot(argv):
    """Masked-token accuracy per pretraining epoch; validation accuracy per fine-tuning epoch, by run."""
    p = argparse.ArgumentParser(prog="mini_bert_gpu plot", description=plot.__doc__)
    p.add_argument("results", type=pathlib.Path, nargs="+", help="folders `train` wrote (named for the legend)")
    p.add_argument("--out", type=pathlib.Path, required=True, help="the PNG to write")
    args = p.parse_args(argv)
    fig, left, right = two_panels()
    for index, folder in enumerate(args.results):
        metrics, color, run = json.loads((folder / "metrics.json").read_text()), f"C{index}", folder.name
        accuracy = column(folder / "pretrain_log.csv", "val_mlm_logits_sparse_categorical_accuracy")
        left.plot(range(1, len(accuracy) + 1), accuracy, color=color, label=run)
        for stage, key, label, style in [
                ("finetune", "test_accuracy", "pretrained, fine-tuned", "-"),
                ("scratch", "scratch_test_accuracy", "from scratch, same steps", "--"),
                ("scratch_short", "scratch_short_test_accuracy",
                 f"from scratch, {metrics['finetune_epochs']} epochs", ":")]:
            if key in metrics:
                curve = column(folder / f"{stage}_log.csv", "val_accuracy")
                right.plot(range(1, len(curve) + 1), curve, style, color=color, marker="o", markersize=3,
                           label=f"{run}, {label}: test {100 * metrics[key]:.2f} %")
    left.set(title=f"pretraining ({metrics['pretraining_steps']} steps of {metrics['batch_size']})",
             xlabel="epoch", ylabel="held-out masked-token accuracy")
    right.set(title="IMDB sentiment fine-tuning", xlabel="epoch", ylabel="validation accuracy")
    save_figure(fig, left, right, args.out)


def column(path, name):
    """One column of a CSVLogger file, as floats."""
    import csv

    with open(path, newline="") as f:
        return [float(row[name]) for row in csv.DictReader(f)]


def two_panels():
    """-> (figure, pretraining axis, fine-tuning axis), drawn off screen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 4.5), width_ratios=(1, 1.4))
    return fig, left, right


def save_figure(fig, left, right, out):
    left.legend(fontsize=8)
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # outside: the curves cross
    for axis in (left, right):
        axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


def device_name():
    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        return f"{device.platform}: {device.device_kind}"  # e.g. "gpu: NVIDIA H100 80GB HBM3"
    if keras.backend.backend() == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return "tensorflow"


if __name__ == "__main__":
    commands = {"prepare": prepare, "train": train, "plot": plot}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python -m benchmarks.mini_bert_gpu {{prepare,train,plot}} ...  (got {sys.argv[1:]})")
    commands[sys.argv[1]](sys.argv[2:])
