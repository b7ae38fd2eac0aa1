"""The ViT recipe against the keras-io ViT example on a machine without TensorFlow (a GPU machine).

`quality_vs_anchor --task mnist|cifar10` runs `recipes.train_vit`, whose input
pipeline is tf.data, which a GPU machine may lack. `train` runs both sides
with keras alone, on the same files, train / validation / test split, seed
and epochs, and writes `metrics.json` (after each side) and the per-epoch logs:

- kformer: the recipe's flags and choices: its preset, AdamW (weight decay
  0.05) with warmup + cosine decay, batch 128, random shifts (and flips on
  CIFAR-10) from `kformer.data.augmentation`, early stopping on
  validation accuracy with the best epoch restored. The augmentation runs as
  the model's first layer, on the device, instead of in tf.data: the same
  layers, drawn per image.
- anchor: `benchmarks.anchors.vit`, the example at its published sizes
  (resized to 72x72, 8 blocks of width 256, batch 256, the best validation
  epoch tested).

    KERAS_BACKEND=jax python -m benchmarks.vit_gpu train RESULTS -- --dataset cifar10 --data-dir DATA \\
        --epochs 24 --patience 6
    python -m benchmarks.vit_gpu plot RESULTS [RESULTS ...] --out curves.png

Flags after `--` are the recipe's (`--dataset`, `--data-dir`, `--preset`,
`--epochs`, `--batch-size`, `--learning-rate`, `--weight-decay`, `--patience`,
`--seed`, `--max-examples`, `--verbose`, `--jit-compile`), with its defaults
(`recipe_flags`; the benchmark imports no recipe, tests/benchmarks/test_vit_gpu.py
checks the defaults agree). CIFAR-10's JPEGs are decoded with Pillow where
TensorFlow is missing (the same pixels; `kformer.data.images`). `train` also
appends one row per side to benchmarks/results/vit_gpu.csv (`--results`) with the
command, commit, date, machine and backend.
"""

import argparse
import json
import pathlib
import sys
import time

import keras

from benchmarks import provenance

HEADER = ["device", "dataset", "side", "model", "epochs", "test_top1", "test_top5", "fit_seconds", "seconds",
          "parameters", "train_examples", "seed", "out"]
DEFAULT_PRESETS = {"mnist": "vit_tiny", "cifar10": "vit_hybrid_cifar"}  # recipes/train_vit.py's


def recipe_flags(argv):
    """`recipes/train_vit.py`'s flags that apply here, with its defaults -> argparse namespace."""
    from kformer.data import images

    p = argparse.ArgumentParser(prog="vit_gpu train ... --", description="the recipe's flags")
    p.add_argument("--dataset", choices=images.DATASETS, default="mnist")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--preset", default=None, help="default: vit_tiny (mnist), vit_hybrid_cifar (cifar10)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--patience", type=int, default=3)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--max-examples", type=int, default=None)
    p.add_argument("--verbose", choices=("auto", "0", "1", "2"), default="auto")
    p.add_argument("--jit-compile", choices=("auto", "true", "false"), default="auto")
    args = p.parse_args(argv)
    for flag in ("epochs", "batch_size", "patience", "max_examples"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            p.error(f"argument --{flag.replace('_', '-')}: expected an integer >= 1, got {getattr(args, flag)}")
    args.preset = args.preset or DEFAULT_PRESETS[args.dataset]
    args.verbose = 2 if args.verbose == "auto" else int(args.verbose)
    args.jit_compile = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    args._argv = list(argv)
    return args


def run_kformer(recipe, train, validation, test, log):
    """The recipe's model, optimizer, augmentation and early stopping on in-memory arrays -> results."""
    from benchmarks.anchors.vit import compile_augmentation, jit_compile
    from kformer import models
    from kformer.data import images
    from kformer.data.augmentation import augmentation

    keras.utils.set_random_seed(recipe.seed)
    start = time.time()
    classifier = models.build(recipe.preset, class_names=list(images.CLASS_NAMES[recipe.dataset]))
    inputs = keras.Input(images.IMAGE_SHAPES[recipe.dataset])
    augment = augmentation(recipe.dataset, seed=recipe.seed)  # identity when training=False
    model = keras.Model(inputs, classifier(augment(inputs)), name=f"{recipe.preset}_augmented")
    jit = jit_compile(recipe.jit_compile)
    if jit is True:
        compile_augmentation(model)
    steps = recipe.epochs * -(-len(train[1]) // recipe.batch_size)
    model.compile(models.adamw(recipe.learning_rate, steps, weight_decay=recipe.weight_decay),  # the recipe's
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
                           keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5")], jit_compile=jit)
    fit_start = time.time()
    history = model.fit(train[0].astype("float32"), train[1], batch_size=recipe.batch_size, epochs=recipe.epochs,
                        shuffle=True, validation_data=(validation[0].astype("float32"), validation[1]),
                        verbose=recipe.verbose,
                        callbacks=[keras.callbacks.EarlyStopping("val_accuracy", mode="max", patience=recipe.patience,
                                                                 restore_best_weights=True),
                                   keras.callbacks.CSVLogger(str(log))])
    fit_seconds = time.time() - fit_start
    _, top1, top5 = model.evaluate(test[0].astype("float32"), test[1], batch_size=256, verbose=0)
    return {"test_top1": round(float(top1), 4), "test_top5": round(float(top5), 4),
            "val_accuracy": [round(v, 4) for v in history.history["val_accuracy"]], "epochs": recipe.epochs,
            "fit_seconds": round(fit_seconds, 1), "seconds": round(time.time() - start, 1),
            "parameters": model.count_params(), "preset": recipe.preset}


def train(argv):
    p = argparse.ArgumentParser(prog="vit_gpu train", description="the ViT recipe and the keras-io example")
    p.add_argument("out", type=pathlib.Path, help="a new folder for metrics.json and the logs")
    p.add_argument("--anchor-epochs", type=int, default=None, help="the example's epochs (default: the recipe's)")
    p.add_argument("--only", choices=("kformer", "anchor"), default=None, help="run one side")
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("vit_gpu.csv"),
                   help="the CSV the rows are appended to")
    args, recipe_argv = p.parse_known_args(argv)
    from benchmarks.anchors import vit as anchor
    from benchmarks.mini_bert_gpu import device_name, save
    from kformer.data import images

    recipe = recipe_flags([a for a in recipe_argv if a != "--"])  # no --tfds, --mixed-precision, --distribute:
    # both sides train in float32 on one device from the files in --data-dir
    if args.anchor_epochs is not None and args.anchor_epochs < 1:
        p.error(f"--anchor-epochs must be >= 1. Received: {args.anchor_epochs}")
    if (args.out / "metrics.json").exists():
        p.error(f"{args.out} already holds a run's metrics.json: pass a new folder (results are never overwritten)")
    args.out.mkdir(parents=True, exist_ok=True)
    x, y = images.load_split("train", recipe.dataset, recipe.data_dir, recipe.max_examples)
    test = images.load_split("test", recipe.dataset, recipe.data_dir, recipe.max_examples)
    cut = len(y) - max(1, len(y) // 10)  # the recipe's validation split
    splits = (x[:cut], y[:cut]), (x[cut:], y[cut:]), test
    metrics = {"backend": keras.backend.backend(), "device": device_name(), "dataset": recipe.dataset,
               "data_dir": recipe.data_dir, "seed": recipe.seed, "train_examples": cut,
               "validation_examples": len(y) - cut, "test_examples": len(test[1]),
               "recipe_args": recipe._argv}
    if args.only != "anchor":
        metrics["kformer"] = run_kformer(recipe, *splits, args.out / "kformer_log.csv")
        save(args.out, metrics)
    if args.only != "kformer":
        metrics["anchor"] = anchor.run(*splits, recipe.dataset, epochs=args.anchor_epochs or recipe.epochs,
                                       seed=recipe.seed, verbose=recipe.verbose,
                                       jit_compile=anchor.jit_compile(recipe.jit_compile))
        save(args.out, metrics)
    sides = [side for side in ("kformer", "anchor") if side in metrics]
    provenance.write_csv(args.results, HEADER, [(
        metrics["device"], recipe.dataset, side, metrics[side].get("preset", "keras-io ViT example"),
        *(metrics[side][k] for k in ("epochs", "test_top1", "test_top5", "fit_seconds", "seconds", "parameters")),
        metrics["train_examples"], recipe.seed, str(args.out)) for side in sides], backend=metrics["backend"],
        append=True)
    print(f"appended {len(sides)} rows to {args.results}")


def plot(argv):
    """Validation accuracy per epoch, kformer against the example, one panel per run folder."""
    p = argparse.ArgumentParser(prog="vit_gpu plot", description=plot.__doc__)
    p.add_argument("results", type=pathlib.Path, nargs="+", help="folders `train` wrote")
    p.add_argument("--out", type=pathlib.Path, required=True, help="the PNG to write")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.results), figsize=(6.5 * len(args.results), 4.5), squeeze=False)
    for axis, folder in zip(axes[0], args.results):
        metrics = json.loads((folder / "metrics.json").read_text())
        for side, label in (("kformer", "kformer {preset}"), ("anchor", "keras-io ViT example")):
            if side in metrics:
                result = metrics[side]
                curve = result["val_accuracy"]
                axis.plot(range(1, len(curve) + 1), curve, marker="o", markersize=3,
                          label=f"{label.format(**result)}: test top-1 {100 * result['test_top1']:.2f} %, "
                                f"fit {result['fit_seconds']:.0f} s")
        epochs = max(metrics[side]["epochs"] for side in ("kformer", "anchor") if side in metrics)
        axis.set(title=f"{metrics['dataset']}, {epochs} epochs ({metrics['backend']} on {metrics['device']})",
                 xlabel="epoch",
                 ylabel="validation accuracy")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    commands = {"train": train, "plot": plot}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python -m benchmarks.vit_gpu {{train,plot}} ...  (got {sys.argv[1:]})")
    commands[sys.argv[1]](sys.argv[2:])
