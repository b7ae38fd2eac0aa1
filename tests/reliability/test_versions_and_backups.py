"""Versions never collide or loop; training backups survive truncation and a kill mid-write."""

import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from kformer.export.versioning import next_version, write_new_version
from recipes.backup import AtomicBackupAndRestore

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_a_plain_file_named_like_a_version_is_skipped_not_looped_on(tmp_path):
    (tmp_path / "1").write_text("not a version")
    assert next_version(tmp_path) == 2
    final = write_new_version(tmp_path, lambda tmp: (tmp / "model.txt").write_text("weights"))
    assert final.name == "2" and (final / "model.txt").is_file()
    with pytest.raises(ValueError, match="Version 1 already exists"):
        write_new_version(tmp_path, lambda tmp: None, version=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2"]  # no .tmp-* left


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
import keras
from recipes.backup import AtomicBackupAndRestore
from tests.reliability.test_versions_and_backups import DATA, _model

original = keras.Model.save_weights
def save_then_die(self, path, *args, **kwargs):
    original(self, path, *args, **kwargs)
    if "epoch-2" in str(path):  # half the file on disk, then SIGKILL
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        os.kill(os.getpid(), signal.SIGKILL)
keras.Model.save_weights = save_then_die
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
