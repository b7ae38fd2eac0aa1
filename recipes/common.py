"""Shared recipe plumbing: flags, precision and distribution, callbacks, versioned output.

Every recipe writes `<output-dir>/<name>/<version>/` (the SavedModel for TF
Serving plus `model.keras`, vocabularies, `config.json`, `metrics.json` and
the training logs), atomically. While it trains, its state lives in
`<output-dir>/<name>/_training/` (BackupAndRestore, checkpoints, TensorBoard
logs, CSV log): rerun the same command after a crash and it resumes from the
last finished epoch. One run at a time holds the folder (`_training.lock`,
`recipes.lock`): a second one exits with status 2. Ctrl-C exits with status
130 and keeps the finished epochs' backups; a failed write (a full disk)
exits with status 1, naming the path and the error. Learned vocabularies (and mini-BERT's sentence pairs)
are cached in `<output-dir>/<name>/_prepared/` (`recipes.prepared`). TF
Serving ignores the non-numeric folders.
"""

import argparse
import contextlib
import errno
import functools
import json
import math
import os
import pathlib
import re
import shlex
import shutil
import sys
import tempfile

import keras  # recipes/__init__.py has turned TensorFlow's start-up logging down (kformer.runtime.quiet_startup)
import numpy as np

from kformer import models, runtime
from kformer.cli import QUANTIZE_MODES
from kformer.export.versioning import write_new_version
from recipes import lock, model_card, plots, prepared
from recipes.backup import AtomicBackupAndRestore, weights_are_finite


_WRITE_ERRORS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EIO}
_running = {}  # "backup": the AtomicBackupAndRestore of the `fit` in progress or last run


def entry_point(main):
    """Wrap a recipe's `main(argv=None)`: Ctrl-C and write errors end it cleanly, locks are released.

    Ctrl-C (SIGINT) exits with status 130 and a message saying after which
    epoch (the finished epochs' backups stay, so the same command resumes);
    an `OSError` (a full disk, `ulimit -f`, a read-only folder) exits with
    status 1 naming the error. Either way, and on success, the `_training`
    lock is released (`training_dir`).
    """
    @functools.wraps(main)
    def run(argv=None):
        _running.clear()
        try:
            return main(argv)
        except KeyboardInterrupt:
            print(f"\n{_interrupted()}", file=sys.stderr, flush=True)
            sys.exit(130)
        except OSError as err:  # a full disk, `ulimit -f`, a read-only folder: not a bug
            unnamed = err.errno in _WRITE_ERRORS and not err.filename and "/" not in str(err)
            held = ", ".join(str(p.with_suffix("")) for p in lock._held) or "the output folder"
            fail(f"{err}" + (f" (writing under {held})" if unnamed else ""))
        finally:
            lock.release_all()
    return run


def _interrupted():
    backup = _running.get("backup")
    if backup is None:
        return "interrupted before training started; rerun the same command to start again"
    if backup.finished:
        return "interrupted after training, before the version was written; rerun the same command to run again"
    if backup.last_epoch:
        return f"interrupted after epoch {backup.last_epoch}; rerun the same command to resume"
    return "interrupted in the first epoch, before any was backed up; rerun the same command to start again"


def bounded(kind, low, high=None, *, open_low=False):
    """An argparse `type`: `kind` (int or float) in [low, high] ((low, high] if `open_low`).

    Floats must be finite: `--learning-rate inf` or `nan` fails at parse time,
    before any data is read. argparse names the flag in the message.
    """
    name = "an integer" if kind is int else "a finite number"
    what = f"{name} {'>' if open_low else '>='} {low}" + ("" if high is None else f" and <= {high}")

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (open_low and value == low) or (
                high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


positive_int = bounded(int, 1)
positive_float = bounded(float, 0.0, open_low=True)
VOCABULARY_SIZE = bounded(int, 64, 10_000_000)  # WordPiece: special tokens + the alphabet at least


LORA_TARGETS = ("query", "key", "value", "attention_output", "mlp_in", "mlp_out")


def _lora_targets(text):
    names = list(LORA_TARGETS) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in LORA_TARGETS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected names from {','.join(LORA_TARGETS)} or 'all', got {text!r}")
    return names


def make_parser(doc, *, builder, preset, epochs, batch_size, learning_rate, tfds=False, pretrained=None,
                quantize=True):
    """The flags every recipe shares; `builder` limits `--preset` to that builder's presets.

    `tfds=True` adds `--tfds`: read the data with tensorflow_datasets instead of files.
    `preset=None`: the recipe picks one after parsing (`parse_args(default_preset=...)`).
    `pretrained=(what, learning_rate)` adds `--from-pretrained SOURCE` (fine-tune a published
    checkpoint of `what`, e.g. "BERT", instead of a `--preset`) with its own default learning rate.
    `quantize=False` leaves out `--quantize` (a recipe whose models share weights, quantized together).
    """
    p = argparse.ArgumentParser(description=doc.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc)
    p.set_defaults(builder=builder)
    p.add_argument("--preset", default=None if pretrained else preset,
                   help=f"a {builder} preset (default {preset or 'chosen by the data set'})"
                        + ("; not with --from-pretrained" if pretrained else ""))
    p.set_defaults(_preset=preset)
    p.add_argument("--epochs", type=positive_int, default=epochs)
    p.add_argument("--batch-size", type=positive_int, default=batch_size, help="global batch size")
    if pretrained:
        what, finetune_rate = pretrained
        p.add_argument("--learning-rate", type=positive_float, default=None,
                       help=f"default {learning_rate}, or {finetune_rate} with --from-pretrained (fine-tuning "
                            "a pretrained model wants a small rate, as in the BERT paper's 2e-5 to 5e-5)")
        p.set_defaults(_learning_rates=(learning_rate, finetune_rate))
        p.add_argument("--from-pretrained", metavar="SOURCE", default=None,
                       help=f"fine-tune a published {what} checkpoint instead of training a --preset from "
                            "scratch: a folder in the Hugging Face layout (transformers' save_pretrained) or an "
                            "hf://org/name handle (downloaded once with the network, then read from the cache)")
        p.add_argument("--lora-rank", type=positive_int, default=None, metavar="R",
                       help="with --from-pretrained: train rank-R LoRA adapters (and a new head) instead of every "
                            "weight (models.enable_lora); the version folder also holds the adapters "
                            "(lora_adapter.safetensors, and peft_adapter/ for peft), model.keras and the export "
                            "the merged weights")
        p.add_argument("--lora-targets", type=_lora_targets, default=["query", "value"], metavar="NAMES",
                       help="with --lora-rank: the projections adapted, comma-separated from "
                            f"{','.join(LORA_TARGETS)}, or 'all' (default query,value)")
    else:
        p.add_argument("--learning-rate", type=positive_float, default=learning_rate)
    p.add_argument("--max-examples", type=positive_int, default=None,
                   help="use at most this many examples of each split (quick runs)")
    p.add_argument("--data-dir", default=None, help="full data sets (default: the bundled sample)")
    if tfds:
        p.add_argument("--tfds", action="store_true",
                       help="load with tensorflow_datasets instead (downloads on first use; needs network)")
    p.add_argument("--output-dir", default="saved_models")
    p.add_argument("--seed", type=bounded(int, 0, 2**31 - 1), default=1337)
    p.add_argument("--mixed-precision", action="store_true",
                   help="mixed_float16 on a GPU, mixed_bfloat16 otherwise (on a CPU with bf16 instructions, "
                        "often faster steps on TensorFlow and torch, rarely on JAX: docs/decisions.md#bfloat16-off)")
    p.add_argument("--jit-compile", choices=("auto", "true", "false"), default="auto",
                   help="XLA (TF/JAX) or torch.compile; auto = Keras's choice")
    p.add_argument("--distribute", action="store_true",
                   help="data parallel over every local device (JAX DataParallel, TF MirroredStrategy)")
    p.add_argument("--model-parallel", type=positive_int, default=1, metavar="N",
                   help="JAX: split each model's weights over N devices (models.layout_map, Megatron-style); "
                        "the batch is split over the rest")
    p.add_argument("--patience", type=positive_int, default=3, help="EarlyStopping patience (epochs)")
    p.add_argument("--gradient-accumulation-steps", type=positive_int, default=1, metavar="K",
                   help="update the weights once every K batches with their gradients' mean: the update of a "
                        "K times larger --batch-size in the memory of one (models.accumulating)")
    if quantize:
        p.add_argument("--quantize", choices=QUANTIZE_MODES, default=None,
                       help="after training, quantize the model's weights (task.quantize): the test metrics, "
                            "model.keras and the export are the quantized model's")
    p.add_argument("--no-export", action="store_true", help="skip the TF Serving SavedModel")
    p.add_argument("--no-plots", action="store_true",
                   help="skip curves.png and attention.png in the version folder")
    p.add_argument("--verbose", choices=("auto", "0", "1", "2"), default="auto",
                   help="Keras fit verbosity (auto: progress bars on a terminal)")
    p.add_argument("--keep-freed-memory", action=argparse.BooleanOptionalAction, default=True,
                   help="glibc's malloc keeps freed memory for the next step instead of returning it to the "
                        "kernel (kformer.runtime.keep_freed_memory; Linux only): CPU steps 1.2-1.6x faster, "
                        "resident memory stays at its peak")
    return p


def parse_args(parser, argv, default_preset=None):
    """Parse and check the shared flags; `default_preset(args)` picks the preset when `--preset` is not given."""
    args = parser.parse_args(argv)
    if args.keep_freed_memory:  # before any model or backend op: threads that allocated keep their arenas
        runtime.keep_freed_memory()
    args._argv = list(sys.argv[1:] if argv is None else argv)  # for the model card
    source = getattr(args, "from_pretrained", None)
    if hasattr(args, "_learning_rates") and args.learning_rate is None:
        args.learning_rate = args._learning_rates[source is not None]
    if source is not None:
        if args.preset is not None:
            parser.error(f"--from-pretrained and --preset are alternatives (the checkpoint {source!r} is the "
                         f"model); pass one of them")
        if args.model_parallel > 1:
            parser.error("--model-parallel needs a --preset (its layout map), not --from-pretrained")
    elif getattr(args, "lora_rank", None) is not None:
        parser.error("--lora-rank adapts a checkpoint: pass --from-pretrained SOURCE with it")
    if getattr(args, "lora_rank", None) is None and tuple(getattr(args, "lora_targets", ())) not in (
            (), ("query", "value")):
        parser.error("--lora-targets chooses what --lora-rank adapts: pass --lora-rank R with it")
    if getattr(args, "lora_rank", None) is not None and getattr(args, "quantize", None) is not None:
        parser.error("--quantize and --lora-rank: quantize the merged model after the run instead "
                     "(kformer export VERSION_FOLDER --quantize MODE)")
    if source is None:
        if args.preset is None:
            args.preset = default_preset(args) if default_preset is not None else args._preset
        known = [n for n in models.list_models() if models.get_preset(n)["builder"] == args.builder]
        if args.preset not in known:
            parser.error(f"--preset {args.preset!r} is not a {args.builder} preset; expected one of {known}")
    _check_output_dir(parser, args.output_dir)
    if args.data_dir is not None and not os.path.isdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir!r} is not a directory")
    if getattr(args, "tfds", False) and args.data_dir is not None:
        parser.error("--tfds and --data-dir are alternatives; pass one of them")
    if args.distribute and keras.backend.backend() not in ("jax", "tensorflow"):
        parser.error(f"--distribute supports KERAS_BACKEND=jax or tensorflow, got "
                     f"{keras.backend.backend()} (for torch, launch with torchrun and DDP)")
    if args.model_parallel > 1:
        _check_model_parallel(parser, args)
    if not args.distribute and args.model_parallel == 1:
        runtime.faster_jax_random()  # one device, JAX: half the hashing for each dropout mask
    args.jit_compile = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    args.verbose = args.verbose if args.verbose == "auto" else int(args.verbose)
    return args


def _check_model_parallel(parser, args):
    n = args.model_parallel
    if keras.backend.backend() != "jax":
        parser.error(f"--model-parallel {n} needs KERAS_BACKEND=jax (keras.distribution.ModelParallel), got "
                     f"{keras.backend.backend()}")
    devices = len(_devices())
    if devices % n:
        parser.error(f"--model-parallel {n} must divide the {devices} local devices")
    try:
        models.layout_map(args.preset, _mesh(n))
    except ValueError as error:
        parser.error(f"--model-parallel {n}: {error}")


def _mesh(model_parallel):
    devices = keras.distribution.list_devices()
    return keras.distribution.DeviceMesh((len(devices) // model_parallel, model_parallel), ["batch", "model"],
                                         devices)


def _check_output_dir(parser, output_dir):
    path = pathlib.Path(output_dir)
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        parser.error(f"--output-dir {output_dir!r}: {str(existing)!r} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        parser.error(f"--output-dir {output_dir!r}: {str(existing)!r} is not writable")
    try:  # root passes os.access everywhere, and /proc or a read-only mount still refuse a folder: try one
        os.rmdir(tempfile.mkdtemp(prefix=".kformer-probe-", dir=existing))
    except OSError as err:
        parser.error(f"--output-dir {output_dir!r}: no folder can be made in {str(existing)!r} ({err.strerror})")


def setup(args):
    """Seed, precision policy and distribution; returns the scope to build and compile in."""
    keras.utils.set_random_seed(args.seed)
    if args.mixed_precision:
        gpu = any(d.startswith("gpu") or d.startswith("cuda") for d in _devices())
        keras.mixed_precision.set_global_policy("mixed_float16" if gpu else "mixed_bfloat16")
    print(f"backend={keras.backend.backend()} devices={_devices()} "
          f"policy={keras.mixed_precision.global_policy().name}", flush=True)
    if args.model_parallel > 1:
        layout = models.layout_map(args.preset, _mesh(args.model_parallel))
        keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layout,
                                                                             batch_dim_name="batch"))
        print(f"ModelParallel: mesh {layout.device_mesh.shape} (batch, model)", flush=True)
        return contextlib.nullcontext()
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


def pretrained_name(source):
    """The output folder name of a run fine-tuning `source`: its last path part, e.g. "bert-base-uncased"."""
    tail = str(source).rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", tail).lstrip(".") or "pretrained"


def load_pretrained(source, **kwargs):
    """`kformer.models.from_pretrained(source, **kwargs)` and the checkpoint's `config.json`.

    Exits with status 1 and the loader's message when the checkpoint is missing (offline and not
    cached) or one kformer cannot represent.
    """
    from kformer.models.pretrained.common import read_config, resolve

    try:
        folder = resolve(source)
        return models.from_pretrained(folder, **kwargs), read_config(folder)
    except ValueError as err:
        fail(f"--from-pretrained {source}: {err}")


def learn_or_load_tokenizer(args, name, work_path, texts):
    """The WordPiece vocabulary of `texts` (`--vocabulary-size` tokens), via the `_prepared` cache.

    A resumed run reuses the vocabulary its first epochs were trained with;
    a new run on the same texts reuses the cached one (`recipes.prepared`).
    """
    label = pathlib.Path(work_path).stem
    return prepared.tokenizer(prepared.cache_dir(args.output_dir, name), label, texts, args.vocabulary_size,
                              work_path, verbose=progress_verbosity(args))


def progress_verbosity(args):
    """`--verbose` for a data-preparation `Progbar`: auto -> 1."""
    return 1 if args.verbose == "auto" else args.verbose


# Flags that may change between a killed run and its rerun; any other flag
# changes what is trained, so resuming with it would mix two runs.
MAY_CHANGE_ON_RESUME = {"epochs", "finetune_epochs", "patience", "verbose", "no_export", "no_plots", "jit_compile",
                        "learning_rate", "finetune_learning_rate", "max_test_examples", "num_beams",
                        "sample_length", "compare_scratch", "no_repeat_ngram_size", "serving_xla",
                        "max_length_ratio", "max_length_offset", "max_ood_examples", "quantize"}


def training_dir(args, name):
    """`<output-dir>/<name>/_training`, checked against the flags of a run it holds.

    A rerun resumes from the folder only with the same training flags; a
    different one (say `--sequence-length`) exits with status 2, naming it.
    The run holds `<output-dir>/<name>/_training.lock` until it ends
    (`entry_point`, `finish`); while another live process holds it, this
    exits with status 2 naming the lock file and that process.
    """
    work_dir = pathlib.Path(args.output_dir) / name / "_training"
    try:
        lock.acquire(work_dir.with_suffix(".lock"))
    except lock.HeldError as err:
        holder = f"host {err.holder.get('host')}, pid {err.holder.get('pid')}" if err.holder else "unknown"
        usage_error(f"another run is training in {work_dir} ({holder}; lock file {err.path}). Wait for it to "
                    "finish, or pass another --output-dir.")
    flags = {k: v for k, v in sorted(vars(args).items())
             if k not in MAY_CHANGE_ON_RESUME | {"builder"} and not k.startswith("_")}
    saved_path = work_dir / "flags.json"
    if saved_path.is_file():
        try:
            saved = json.loads(saved_path.read_text(encoding="utf-8"))
        except ValueError:
            saved = None  # torn write: rewritten below
        differ = [k for k in flags if saved is not None and k in saved and saved[k] != flags[k]]
        if differ:
            shown = ", ".join(f"--{k.replace('_', '-')} was {saved[k]!r}, now {flags[k]!r}" for k in differ)
            lock.release(work_dir.with_suffix(".lock"))
            usage_error(f"{work_dir} holds an unfinished run with other flags ({shown}). Rerun with "
                        f"its flags to resume it, or delete {work_dir} to start fresh.")
    work_dir.mkdir(parents=True, exist_ok=True)
    write_json(saved_path, flags)
    return work_dir


def callbacks(work_dir, patience, monitor="val_loss", ema=False):
    """Checkpoint the best model, back up every epoch, log, stop early or on NaN.

    `ema=True` (an optimizer with `use_ema`): validation, the checkpoint and
    early stopping see the weights' moving average; the backup keeps the raw
    weights and the average apart, so a resumed run goes on as if never stopped.
    """
    work_dir = pathlib.Path(work_dir)
    (work_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    mode = "max" if "acc" in monitor else "min"
    return [
        AtomicBackupAndRestore(work_dir / "backup"),
        *([keras.callbacks.SwapEMAWeights(swap_on_epoch=True)] if ema else []),
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

    base = pathlib.Path(args.output_dir) / name
    try:
        run_dir = write_new_version(base, write_all)  # removes its temporary folder on any error
    except OSError as err:
        fail(f"could not write the new version in {base} (its temporary folder is removed; the training "
             f"state stays in {work_dir}): {err}")
    shutil.rmtree(work_dir, ignore_errors=True)
    lock.release(pathlib.Path(work_dir).with_suffix(".lock"))
    return run_dir


def print_next_steps(run_dir, example, exported=True):
    """A run's closing lines: its version folder, model card and figures, then two commands to try it.

    Args:
        run_dir: the version folder `finish` returned.
        example: str. An input for `kformer predict` (a text, or an image file's path).
        exported: bool. Whether the folder holds a TF Serving SavedModel (not `--no-export`).
    """
    run_dir = pathlib.Path(run_dir)
    shown = shlex.quote(str(run_dir))
    lines = [f"saved: {run_dir}" + (" (TF Serving SavedModel + model.keras)" if exported else " (model.keras)")]
    if (run_dir / "README.md").is_file():
        lines.append(f"  model card: {run_dir / 'README.md'}")
    figures = sorted(str(p) for p in run_dir.glob("*.png"))
    if figures:
        lines.append(f"  figures:    {', '.join(figures)}")
    lines += ["try it:",
              f"  kformer predict {shown} {shlex.quote(example)}",
              f"  kformer demo {shown}    # in the browser (pip install \"kformer[demo]\")"]
    print("\n".join(lines), flush=True)


def write_json(path, data):
    """Write `data` as JSON to `path` atomically (a temporary file, then a rename)."""
    path = pathlib.Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def lora(args, model):
    """`--lora-rank R`: LoRA adapters of rank R on `model`'s `--lora-targets` projections; every other
    weight frozen but a new head (`models.enable_lora`). Call before `compile`."""
    if getattr(args, "lora_rank", None) is None:
        return
    model.enable_lora(args.lora_rank, target_names=tuple(args.lora_targets))
    trained = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    total = sum(int(np.prod(w.shape)) for w in model.weights)
    print(f"LoRA rank {args.lora_rank} on {', '.join(args.lora_targets)}: training {trained:,} of {total:,} "
          f"weights ({100 * trained / total:.2f} %)", flush=True)


def _write_adapters(model, tmp_dir):
    """A LoRA run's adapters beside the merged model: kformer's file, and a peft folder where the task has a
    Hugging Face layout."""
    from kformer.models import lora as lora_module

    if not lora_module.adapted_layers(model):
        return
    model.save_lora_weights(tmp_dir / "lora_adapter.safetensors")
    model.save_pretrained(tmp_dir / "peft_adapter", adapter_only=True)


def version_writer(model, args, *, name, config, metrics, card, export_options=None, log=None,
                   attention=None, expert_load=None):
    """The `write(tmp_dir)` a recipe hands to `finish`: everything a version folder holds.

    The TF Serving SavedModel (unless `--no-export`; `export_options` go to
    `save_for_serving`), `model.keras`, `config.json`, `metrics.json`, the
    figures (unless `--no-plots`: `curves.png` from the CSV log at `log`,
    `attention.png` from `attention()`, `expert_load.png` from `expert_load()`, see `recipes.plots`) and the model card
    (`card`: `recipe`, `dataset` and `limits` for `model_card.write_for_run`).
    """
    if getattr(args, "quantize", None):
        metrics = {**metrics, "quantized": args.quantize}

    def write(tmp_dir):
        if not args.no_export:
            from kformer import export

            export.save_for_serving(model, tmp_dir, model_name=name, **(export_options or {}))
        model.save(tmp_dir / "model.keras")  # with LoRA: the merged weights
        _write_adapters(model, tmp_dir)
        write_json(tmp_dir / "config.json", config)
        write_json(tmp_dir / "metrics.json", metrics)
        figures = {} if args.no_plots else plots.write(tmp_dir, log=log, attention=attention,
                                                       expert_load=expert_load)
        model_card.write_for_run(tmp_dir, model=model, name=name, args=args, config=config, metrics=metrics,
                                 figures=figures, **card)
    return write


def accumulated(args, optimizer):
    """The recipe's `optimizer`, updating every `--gradient-accumulation-steps` batches."""
    return models.accumulating(optimizer, args.gradient_accumulation_steps)


adamw = models.adamw  # the recipes' AdamW (weight decay 0.01) with `warmup_cosine`: kformer's public API
warmup_cosine = models.warmup_cosine


class AverageLastEpochs(keras.callbacks.Callback):
    """Checkpoint averaging (paper 6.1): the final weights are the mean of the last `n` epochs' ends.

    At the end of each of the last `n` of `epochs` epochs, every float weight
    of the model (trainable and not; not the optimizer's) is added, one at a
    time, to a running sum: host memory for one float32 copy of the model,
    not `n`. When training ends, the weights become the sums over the number
    of epochs summed, the 1-based epochs listed in `averaged_epochs`.

    Placed after `EarlyStopping(restore_best_weights=True)` (as `fit`'s
    `extra_callbacks` are), the average replaces the best epoch's weights
    that it restores; if early stopping ends training inside the window, the
    epochs summed so far are averaged, and if before it, nothing is (the
    best epoch's weights stay, `averaged_epochs` is empty). It sums what
    `ModelCheckpoint` saves at an epoch's end: with an EMA optimizer
    (`callbacks(ema=True)`, no recipe combines the two yet), the moving
    average. With `path`, the sums are written
    there (npz, atomically) after each summed epoch and read back when
    training starts, so a resumed run keeps the epochs it summed before.

    Args:
        n: int, the epochs to average (1 = the last epoch's weights).
        epochs: int, the epochs `fit` runs (the window is the last `n`).
        path: str or path, or None: where to keep the sums for a resumed run.
    """

    def __init__(self, n, epochs, path=None):
        super().__init__()
        if n < 1:
            raise ValueError(f"`n` must be >= 1. Received: n={n}")
        self.n, self.epochs, self.path = n, epochs, None if path is None else pathlib.Path(path)
        self.sums, self.averaged_epochs = None, []

    def _float_weights(self):
        return [w for w in self.model.weights if "float" in str(w.dtype)]

    def on_train_begin(self, logs=None):
        if self.path is not None and self.path.is_file():
            import numpy as np

            with np.load(self.path) as saved:
                self.averaged_epochs = [int(e) for e in saved["epochs"]]
                self.sums = [saved[f"w{i}"] for i in range(len(self._float_weights()))]

    def on_epoch_end(self, epoch, logs=None):
        if epoch < self.epochs - self.n or epoch + 1 in self.averaged_epochs:
            return
        import numpy as np

        first, self.sums = self.sums is None, self.sums or []
        for i, weight in enumerate(self._float_weights()):
            dtype = "float64" if weight.dtype == "float64" else "float32"
            value = np.asarray(keras.ops.convert_to_numpy(weight), dtype)
            if first:
                self.sums.append(value.copy())  # JAX hands out read-only arrays
            else:
                self.sums[i] += value
        self.averaged_epochs.append(epoch + 1)
        if self.path is not None:
            tmp = self.path.with_name(self.path.name + ".tmp.npz")
            np.savez(tmp, epochs=np.array(self.averaged_epochs), **{f"w{i}": s for i, s in enumerate(self.sums)})
            os.replace(tmp, self.path)

    def on_train_end(self, logs=None):
        if self.sums is None:
            return
        count = len(self.averaged_epochs)
        for weight, total in zip(self._float_weights(), self.sums):
            weight.assign(keras.ops.cast(total / count, weight.dtype))
        print(f"averaged the weights of epochs {self.averaged_epochs}", flush=True)


def fit(model, train_ds, val_ds, args, epochs, work_dir, monitor, steps_per_epoch=None, extra_callbacks=()):
    """`model.fit` with the recipe callbacks (then `extra_callbacks`); exits (writing nothing) if training diverged."""
    fit_callbacks = callbacks(work_dir, args.patience, monitor, ema=getattr(model.optimizer, "use_ema", False))
    fit_callbacks += list(extra_callbacks)
    _running["backup"] = next((c for c in fit_callbacks if isinstance(c, AtomicBackupAndRestore)), None)
    history = model.fit(train_ds, validation_data=val_ds, epochs=epochs, verbose=args.verbose,
                        steps_per_epoch=steps_per_epoch, shuffle=False, callbacks=fit_callbacks)
    check_finite(model, history, work_dir)
    return history


def quantize(args, model):
    """`--quantize MODE`: the trained model's weights quantized in place (`task.quantize`), before the recipe
    evaluates, saves and exports it."""
    if getattr(args, "quantize", None):
        model.quantize(args.quantize)
        print(f"--quantize {args.quantize}: the weights are quantized; the metrics below are the quantized "
              "model's", flush=True)


def check_finite(model, history, work_dir):
    """Exit with status 1, writing nothing, if training diverged (a non-finite loss or weight)."""
    losses = [float(v) for v in history.history.get("loss", [])]
    bad = [i for i, v in enumerate(losses) if not math.isfinite(v)]
    if bad or not weights_are_finite(model):
        where = f"the loss was {losses[bad[0]]} in epoch {bad[0] + 1}" if bad else "the weights are not finite"
        fail(f"training diverged ({where}); no version was written. The last finite epoch's backup "
             f"and the best checkpoint are kept in {work_dir}: rerun with a lower learning rate to "
             "resume from there.")


def usage_error(message):
    """Exit with status 2 and a message, as argparse does for a bad flag."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def fail(message):
    """Exit with a clear message and status 1 (bad data, not a bug)."""
    sys.exit(f"error: {message}")
