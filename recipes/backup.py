"""Resumable training that survives a kill at any moment, including during the backup write."""

import io
import json
import math
import os
import pathlib
import shutil
import sys

import keras
import numpy as np

from kformer.layers.lora import base_kernels
from kformer.models import lora

WEIGHTS = "model.weights.h5"
META = "training_state.json"
ADAPTERS = "lora.safetensors"  # a LoRA run's adapters (`kformer.models.lora`): weights hold the frozen base


class AtomicBackupAndRestore(keras.callbacks.Callback):
    """Keras's `BackupAndRestore`, with backups that are never half-written.

    Each epoch end writes `backup_dir/epoch-<n>/` (weights with the optimizer
    state, and the epoch) into a temporary folder, then renames it into place
    and drops all but the `keep` newest. A SIGKILL mid-write leaves only a
    `.tmp-*` folder, which is ignored. At the start of `fit`, the newest
    readable backup is restored; a truncated or corrupt one is reported and
    the previous one used instead.

    A failed write (a full disk, `ulimit -f`) removes the temporary folder and
    raises `BackupWriteError` (an `OSError`) naming it and the error: the
    weights file is built in memory first, because HDF5 crashes the process
    (SIGSEGV) when a write to its file fails.

    With LoRA adapters, the weights file holds the frozen base kernels (not the merged ones a `.keras`
    file holds) and `lora.safetensors` the adapters, so a resumed run has the same base and adapters.

    An epoch whose loss or weights are not finite is not backed up, and training that
    ends that way keeps its backups: rerun with a lower learning rate and it
    resumes from the last finite epoch. Otherwise the backups are deleted
    when `fit` ends.

    Args:
        backup_dir: path, one per training run.
        keep: int >= 1, how many epochs' backups to keep (default 2).

    Example:

    >>> import tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> backup = AtomicBackupAndRestore(tempfile.mkdtemp())
    >>> model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=1, callbacks=[backup], verbose=0).epoch
    [0]
    """

    def __init__(self, backup_dir, keep=2):
        super().__init__()
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"`keep` must be an int >= 1. Received: keep={keep!r}")
        self.backup_dir = pathlib.Path(backup_dir)
        self.keep = keep
        self.diverged = False
        self.last_epoch = 0  # the newest epoch backed up or resumed from; 0: none yet
        self.finished = False

    def backups(self):
        """[(epoch, folder)] of finished backups, newest first."""
        if not self.backup_dir.is_dir():
            return []
        found = [(int(p.name[6:]), p) for p in self.backup_dir.glob("epoch-*") if p.name[6:].isdigit()]
        return sorted(found, reverse=True)

    def on_train_begin(self, logs=None):
        self.diverged, self.finished, self.last_epoch = False, False, 0
        adapted = bool(lora.adapted_layers(self.model))
        for epoch, folder in self.backups():
            if (folder / ADAPTERS).exists() != adapted:
                raise ValueError(f"The backup {folder} was written {'with' if not adapted else 'without'} LoRA "
                                 f"adapters, and this run has {'none' if not adapted else 'them'}: rerun with the "
                                 f"same --lora-rank, or remove {self.backup_dir} to start over.")
            try:
                if self.model.optimizer is not None and not self.model.optimizer.built:
                    self.model.optimizer.build(self.model.trainable_variables)
                self.model.load_weights(folder / WEIGHTS)  # with adapters: the base; the adapters restart at 0
                if adapted:
                    lora.load_lora_weights(self.model, folder / ADAPTERS)  # ... and are restored here
            except Exception as err:  # noqa: BLE001 (h5py raises OSError, Keras ValueError, ...)
                print(f"warning: backup {folder} is unreadable ({type(err).__name__}: "
                      f"{str(err)[:200]}); trying the previous one", file=sys.stderr, flush=True)
                continue
            self.model._initial_epoch = epoch  # how keras.callbacks.BackupAndRestore resumes
            self.last_epoch = epoch
            print(f"resuming from the backup of epoch {epoch} in {folder}", flush=True)
            return

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if (loss is not None and not math.isfinite(float(loss))) or not weights_are_finite(self.model):
            self.diverged = True
            return
        tmp = self.backup_dir / f".tmp-epoch-{epoch + 1}"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            with base_kernels(self.model):  # LoRA: the frozen base, not the merged kernels
                _write(tmp / WEIGHTS, weights_file(self.model))
            if lora.adapted_layers(self.model):
                lora.save_lora_weights(self.model, tmp / ADAPTERS)
            (tmp / META).write_text(json.dumps({"epoch": epoch + 1}))
            _fsync_folder(tmp)
        except BaseException as err:  # an interrupt too: leave no temporary folder
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(err, OSError):
                raise BackupWriteError(f"could not write the backup of epoch {epoch + 1} to {tmp} "
                                       f"(removed): {err}") from err
            raise
        final = self.backup_dir / f"epoch-{epoch + 1}"
        shutil.rmtree(final, ignore_errors=True)  # only after a crash between rename and pruning
        os.rename(tmp, final)
        self.last_epoch = epoch + 1
        for _, old in self.backups()[self.keep:]:
            shutil.rmtree(old, ignore_errors=True)

    def on_train_end(self, logs=None):
        self.finished = True
        if not self.diverged:
            shutil.rmtree(self.backup_dir, ignore_errors=True)


class BackupWriteError(OSError):
    """The epoch's backup could not be written (the message names the folder and the OS error)."""


def weights_file(model):
    """The bytes of `model.save_weights(...)`'s `.weights.h5` (weights and optimizer state), built in memory.

    HDF5 writing straight to disk crashes the process (SIGSEGV in h5py's
    `close`) when a write fails; written from memory, the file write raises
    a plain `OSError` instead.
    """
    try:
        from keras.src.saving import saving_lib

        buffer = io.BytesIO()
        store = saving_lib.H5IOStore(buffer, mode="w")
        saving_lib._save_state(model, weights_store=store, assets_store=None, inner_path="",
                               visited_saveables=set())
        store.close()
        return buffer.getvalue()
    except (ImportError, AttributeError, TypeError):  # Keras moved its internals: through a file
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            path = pathlib.Path(folder) / WEIGHTS
            model.save_weights(path)
            return path.read_bytes()


def weights_are_finite(model):
    """True if every float weight of `model` is finite (no NaN or inf)."""
    return all(np.isfinite(keras.ops.convert_to_numpy(w)).all() for w in model.weights
               if "float" in str(w.dtype))


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def _fsync_folder(folder):
    """Flush the files in `folder` to disk, so a rename never publishes unwritten data."""
    for path in folder.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())
