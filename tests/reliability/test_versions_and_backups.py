"""Versions never collide or loop; training backups survive truncation and a kill mid-write."""

import errno
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from kformer.export.versioning import next_version, write_new_version
from recipes import backup as backup_module
from recipes import common
from recipes.backup import AtomicBackupAndRestore, BackupWriteError

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.once("version folders written with plain files")
def test_a_plain_file_named_like_a_version_is_skipped_not_looped_on(tmp_path):
    (tmp_path / "1").write_text("not a version")
    assert next_version(tmp_path) == 2
    final = write_new_version(tmp_path, lambda tmp: (tmp / "model.txt").write_text("weights"))
    assert final.name == "2" and (final / "model.txt").is_file()
    with pytest.raises(ValueError, match="Version 1 already exists"):
        write_new_version(tmp_path, lambda tmp: None, version=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2"]  # no .tmp-* left


@pytest.mark.once("version folders written with plain files")
def test_a_killed_writers_temporary_folder_is_removed_by_the_next_write(tmp_path):
    import socket

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid no longer runs
    host = socket.gethostname().replace("-", "_")
    abandoned = tmp_path / f".tmp-{host}-{dead.pid}-abc"
    running = tmp_path / f".tmp-{host}-{os.getpid()}-def"  # a live writer's: kept
    other_host = tmp_path / ".tmp-otherhost-1-ghi"  # a shared file system's other writer: kept
    for folder in (abandoned, running, other_host):
        folder.mkdir()
        (folder / "saved_model.pb").write_bytes(b"half")
    final = write_new_version(tmp_path, lambda tmp: (tmp / "model.txt").write_text("weights"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([final.name, running.name, other_host.name])


@pytest.mark.once("version folders written with plain files")
def test_a_failed_write_leaves_no_temporary_folder(tmp_path):
    def broken(tmp):
        (tmp / "half").write_text("...")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_new_version(tmp_path, broken)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="`base_dir` must be a directory"):
        write_new_version(tmp_path / "file" if (tmp_path / "file").write_text("x") else None, broken)


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    return model


DATA = (np.arange(24, dtype="float32").reshape(8, 3) / 24, np.ones((8, 1), "float32"))


class Crash(keras.callbacks.Callback):
    def __init__(self, after_epoch):
        super().__init__()
        self.after_epoch = after_epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.after_epoch:
            raise KeyboardInterrupt  # after the backup callback ran, as a crash then would


def test_a_truncated_backup_falls_back_to_the_previous_epoch(tmp_path, capsys):
    backup = tmp_path / "backup"
    with pytest.raises(KeyboardInterrupt):
        _model().fit(*DATA, epochs=5, verbose=0, callbacks=[AtomicBackupAndRestore(backup), Crash(3)])
    weights = backup / "epoch-3" / "model.weights.h5"
    assert sorted(p.name for p in backup.iterdir()) == ["epoch-2", "epoch-3"]  # keep=2
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # torn write
    history = _model().fit(*DATA, epochs=5, verbose=0, callbacks=[AtomicBackupAndRestore(backup)])
    assert history.epoch == [2, 3, 4]  # resumed after epoch 2: nothing lost but the torn epoch
    err = capsys.readouterr().err
    assert "epoch-3 is unreadable" in err and "trying the previous one" in err
    assert not backup.exists()  # finished: backups dropped


def test_a_kill_during_the_backup_write_resumes_from_the_last_whole_backup(tmp_path):
    script = """
import os, signal, sys
from recipes import backup
from recipes.backup import AtomicBackupAndRestore
from tests.reliability.test_versions_and_backups import DATA, _model

original = backup._write
def write_then_die(path, data):
    if "epoch-2" not in str(path):
        return original(path, data)
    original(path, data[: len(data) // 2])  # half the file on disk, then SIGKILL
    os.kill(os.getpid(), signal.SIGKILL)
backup._write = write_then_die
_model().fit(*DATA, epochs=4, verbose=0, callbacks=[AtomicBackupAndRestore(sys.argv[1])])
"""
    backup = tmp_path / "backup"
    run = subprocess.run([sys.executable, "-c", script, str(backup)], cwd=ROOT, capture_output=True,
                         text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == -9, run.stderr[-2000:]
    assert sorted(p.name for p in backup.iterdir()) == [".tmp-epoch-2", "epoch-1"]
    history = _model().fit(*DATA, epochs=4, verbose=0, callbacks=[AtomicBackupAndRestore(backup)])
    assert history.epoch == [1, 2, 3]


def test_a_diverged_epoch_is_not_backed_up_and_the_last_finite_one_is_kept(tmp_path):
    backup = tmp_path / "backup"

    class Poison(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.model.layers[0].kernel.assign(np.full((3, 1), np.nan, "float32"))

    callbacks = [Poison(), AtomicBackupAndRestore(backup), keras.callbacks.TerminateOnNaN()]
    history = _model().fit(*DATA, epochs=5, batch_size=4, verbose=0, callbacks=callbacks)
    assert len(history.epoch) == 3 and np.isnan(history.history["loss"][-1])  # stopped in epoch 3
    assert sorted(p.name for p in backup.iterdir()) == ["epoch-1"]  # not the poisoned epoch 2


def test_a_failed_backup_write_removes_its_temporary_folder_and_exits_1_naming_it(tmp_path, monkeypatch):
    backup = tmp_path / "backup"

    def disk_full(path, data):
        path.write_bytes(data[:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(backup_module, "_write", disk_full)
    fit = common.entry_point(lambda argv: _model().fit(*DATA, epochs=2, verbose=0,
                                                       callbacks=[AtomicBackupAndRestore(backup)]))
    with pytest.raises(SystemExit) as exit_info:
        fit()
    assert exit_info.value.code == (f"error: could not write the backup of epoch 1 to {backup / '.tmp-epoch-1'} "
                                    "(removed): [Errno 28] No space left on device")
    assert list(backup.iterdir()) == []
    with pytest.raises(BackupWriteError):  # an OSError, for callers of the callback itself
        _model().fit(*DATA, epochs=1, verbose=0, callbacks=[AtomicBackupAndRestore(backup)])


@pytest.mark.once("a recipe's version write with plain files")
def test_a_failed_version_write_exits_1_and_keeps_the_training_state(tmp_path, capsys):
    from types import SimpleNamespace

    work_dir = tmp_path / "m" / "_training"
    (work_dir / "backup" / "epoch-1").mkdir(parents=True)

    def disk_full(tmp):
        (tmp / "model.keras").write_bytes(b"half")
        raise OSError(errno.EFBIG, "File too large", str(tmp / "model.keras"))

    with pytest.raises(SystemExit) as exit_info:
        common.finish(SimpleNamespace(output_dir=str(tmp_path)), "m", work_dir, disk_full)
    message = str(exit_info.value.code)
    assert message.startswith(f"error: could not write the new version in {tmp_path / 'm'} (its temporary folder "
                              f"is removed; the training state stays in {work_dir}): [Errno 27] File too large: ")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["_training"]  # no .tmp-*, no version


def test_a_lora_run_resumes_with_its_frozen_base_and_its_adapters(tmp_path):
    """The backup of a LoRA run holds the base kernels and the adapters apart (a `.keras` file holds them
    merged): a resumed run has exactly the same base, adapters and optimizer state."""
    from tests.models.cases import small_model

    def adapted():
        keras.utils.set_random_seed(0)
        task = small_model("imdb_tiny")
        task.enable_lora(2, target_names=("query", "value", "mlp_in"))
        task.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        return task

    first = adapted()
    ids = np.random.default_rng(0).integers(1, first.vocabulary_size, (8, first.sequence_length)).astype("int32")
    labels = np.arange(8) % 2
    first.fit(ids, labels, epochs=1, verbose=0)  # adapters and optimizer state moved
    saving = AtomicBackupAndRestore(tmp_path / "backup")
    saving.set_model(first)
    saving.on_epoch_end(0)
    assert (tmp_path / "backup" / "epoch-1" / backup_module.ADAPTERS).is_file()

    second = adapted()
    resuming = AtomicBackupAndRestore(tmp_path / "backup")
    resuming.set_model(second)
    resuming.on_train_begin()
    assert resuming.last_epoch == 1
    for a, b in zip(first.weights + first.optimizer.variables, second.weights + second.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)

    plain = small_model("imdb_tiny")  # a rerun without --lora-rank must not take the base for the model
    plain.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    refused = AtomicBackupAndRestore(tmp_path / "backup")
    refused.set_model(plain)
    with pytest.raises(ValueError, match="written with LoRA adapters, and this run has none"):
        refused.on_train_begin()
