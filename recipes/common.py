"""Shared recipe plumbing: flags, precision and distribution, callbacks, versioned output.

Every recipe writes `<output-dir>/<name>/<version>/` (the SavedModel for TF
Serving plus `model.keras`, vocabularies, `config.json`, `metrics.json` and
the training logs), atomically. While it trains, its state lives in
`<output-dir>/<name>/_training/` (BackupAndRestore, checkpoints, TensorBoard
logs, CSV log): rerun the same command after a crash and it resumes from the
last finished epoch. TF Serving ignores the non-numeric `_training` folder.
"""

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

from kformer import models  # noqa: E402
from kformer.export.versioning import write_new_version  # noqa: E402


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def make_parser(doc, *, builder, preset, epochs, batch_size, learning_rate, tfds=False):
    """The flags every recipe shares; `builder` limits `--preset` to that builder's presets.

    `tfds=True` adds `--tfds`: read the data with tensorflow_datasets instead of files.
    """
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc)
    p.set_defaults(builder=builder)
    p.add_argument("--preset", default=preset, help=f"a {builder} preset (default {preset})")
    p.add_argument("--epochs", type=positive_int, default=epochs)
    p.add_argument("--batch-size", type=positive_int, default=batch_size, help="global batch size")
    p.add_argument("--learning-rate", type=float, default=learning_rate)
    p.add_argument("--max-examples", type=positive_int, default=None,
                   help="use at most this many examples of each split (quick runs)")
    p.add_argument("--data-dir", default=None, help="full data sets (default: the bundled sample)")
    if tfds:
        p.add_argument("--tfds", action="store_true",
                       help="load with tensorflow_datasets instead (downloads on first use; needs network)")
    p.add_argument("--output-dir", default="saved_models")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--mixed-precision", action="store_true",
                   help="mixed_float16 on a GPU, mixed_bfloat16 otherwise")
    p.add_argument("--jit-compile", choices=("auto", "true", "false"), default="auto",
                   help="XLA (TF/JAX) or torch.compile; auto = Keras's choice")
    p.add_argument("--distribute", action="store_true",
                   help="data parallel over every local device (JAX DataParallel, TF MirroredStrategy)")
    p.add_argument("--patience", type=positive_int, default=3, help="EarlyStopping patience (epochs)")
    p.add_argument("--no-export", action="store_true", help="skip the TF Serving SavedModel")
    p.add_argument("--verbose", choices=("auto", "0", "1", "2"), default="auto",
                   help="Keras fit verbosity (auto: progress bars on a terminal)")
    return p


def parse_args(parser, argv):
    args = parser.parse_args(argv)
    known = [n for n in models.list_models() if models.get_preset(n)["builder"] == args.builder]
    if args.preset not in known:
        parser.error(f"--preset {args.preset!r} is not a {args.builder} preset; expected one of {known}")
    if not args.learning_rate > 0:
        parser.error(f"--learning-rate must be > 0, got {args.learning_rate}")
    if args.data_dir is not None and not os.path.isdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir!r} is not a directory")
    if getattr(args, "tfds", False) and args.data_dir is not None:
        parser.error("--tfds and --data-dir are alternatives; pass one of them")
    if args.distribute and keras.backend.backend() not in ("jax", "tensorflow"):
        parser.error(f"--distribute supports KERAS_BACKEND=jax or tensorflow, got "
                     f"{keras.backend.backend()} (for torch, launch with torchrun and DDP)")
    args.jit_compile = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    args.verbose = args.verbose if args.verbose == "auto" else int(args.verbose)
    return args


def setup(args):
    """Seed, precision policy and distribution; returns the scope to build and compile in."""
    keras.utils.set_random_seed(args.seed)
    if args.mixed_precision:
        gpu = any(d.startswith("gpu") or d.startswith("cuda") for d in _devices())
        keras.mixed_precision.set_global_policy("mixed_float16" if gpu else "mixed_bfloat16")
    print(f"backend={keras.backend.backend()} devices={_devices()} "
          f"policy={keras.mixed_precision.global_policy().name}", flush=True)
    if not args.distribute:
        return contextlib.nullcontext()
    if keras.backend.backend() == "jax":
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        return contextlib.nullcontext()
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
    strategy = tf.distribute.MirroredStrategy(devices)
    print(f"MirroredStrategy over {strategy.num_replicas_in_sync} devices", flush=True)
    return strategy.scope()


def _devices():
    if keras.backend.backend() == "jax":
        import jax

        return [f"{d.platform}:{d.id}" for d in jax.devices()]
    if keras.backend.backend() == "torch":
        import torch

        return [f"cuda:{i}" for i in range(torch.cuda.device_count())] or ["cpu:0"]
    import tensorflow as tf

    return [d.name.replace("/physical_device:", "").lower() for d in tf.config.list_logical_devices()]


def load_imdb(args, *, unlabeled=False):
    """IMDB from `--tfds`, `--data-dir` or the bundled sample, split as the recipes train on it.

    Returns `{"train", "validation", "test"}` -> (texts, labels), the validation
    split carved from train with `--seed`; plus `"unsup"` when `unlabeled`.
    Exits with the loader's message when a file is missing or corrupt.
    """
    from kformer.data import imdb

    def load(split):
        if args.tfds:
            return imdb.load_split_tfds(split, args.max_examples)
        return imdb.load_split(split, args.data_dir, args.max_examples)

    try:
        splits = {split: load(split) for split in ("train", "test") + (("unsup",) if unlabeled else ())}
    except ValueError as err:
        fail(err)
    splits["train"], splits["validation"] = imdb.train_validation_split(*splits["train"], seed=args.seed)
    return splits


def learn_or_load_tokenizer(path, texts, vocabulary_size):
    """The WordPiece vocabulary at `path`, learned from `texts` on the first run.

    A resumed run reuses the vocabulary its first epochs were trained with.
    """
    from kformer.data.wordpiece import WordPieceTokenizer

    path = pathlib.Path(path)
    if path.is_file():
        return WordPieceTokenizer.load(path)
    tokenizer = WordPieceTokenizer.learn(texts, vocabulary_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(path)
    return tokenizer


def training_dir(args, name):
    return pathlib.Path(args.output_dir) / name / "_training"


def callbacks(work_dir, patience, monitor="val_loss"):
    """Checkpoint the best model, back up every epoch, log, stop early or on NaN."""
    work_dir = pathlib.Path(work_dir)
    (work_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    mode = "max" if "acc" in monitor else "min"
    return [
        keras.callbacks.BackupAndRestore(str(work_dir / "backup")),
        keras.callbacks.ModelCheckpoint(str(work_dir / "checkpoints" / "best.keras"),
                                        monitor=monitor, mode=mode, save_best_only=True),
        keras.callbacks.EarlyStopping(monitor=monitor, mode=mode, patience=patience,
                                      restore_best_weights=True),
        keras.callbacks.CSVLogger(str(work_dir / "training_log.csv"), append=True),
        keras.callbacks.TensorBoard(str(work_dir / "logs")),
        keras.callbacks.TerminateOnNaN(),
    ]


def finish(args, name, work_dir, write):
    """Write `<output-dir>/<name>/<version>/` via `write(tmp_dir)` plus the logs; drop `work_dir`."""
    def write_all(tmp_dir):
        write(tmp_dir)
        work = pathlib.Path(work_dir)
        for source in [*work.rglob("training_log.csv"), *work.rglob("logs")]:
            target = tmp_dir / source.relative_to(work)
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_file():
                shutil.copy2(source, target)
            else:
                shutil.copytree(source, target)

    run_dir = write_new_version(pathlib.Path(args.output_dir) / name, write_all)
    shutil.rmtree(work_dir, ignore_errors=True)
    return run_dir


def write_json(path, data):
    pathlib.Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def fail(message):
    """Exit with a clear message and status 1 (bad data, not a bug)."""
    sys.exit(f"error: {message}")
