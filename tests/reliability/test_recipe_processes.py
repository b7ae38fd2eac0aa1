"""Recipes as real processes: two runs into one output folder, Ctrl-C, a write that fails.

A run pauses after its first epoch (tests/recipes/pause_after_first_epoch.py)
while the test starts a second run or sends SIGINT; the write errors run
under a file-size limit (`ulimit -f`).
"""

import csv
import json
import os
import pathlib
import resource
import signal
import socket
import subprocess
import sys
import time

import pytest

from recipes import train_imdb

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAGS = ["--preset=imdb_tiny", "--max-examples=32", "--sequence-length=16", "--vocabulary-size=200",
         "--verbose=2", "--no-export", "--no-plots"]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def paused_run(tmp_path, flags):
    """A recipe process paused after its first epoch's backup; returns (process, gate, log)."""
    gate, log = tmp_path / "gate", open(tmp_path / "paused-run.log", "w+")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "recipes" / "pause_after_first_epoch.py"), str(gate),
         "recipes.train_imdb", *flags], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=ENV)
    deadline = time.monotonic() + 300
    while not gate.with_name("gate.paused").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            log.seek(0)
            pytest.fail(f"the run ended ({process.poll()}) before its first epoch:\n{log.read()[-3000:]}")
        time.sleep(0.05)
    return process, gate, log


def output_of(process, log):
    process.wait(timeout=300)
    log.seek(0)
    return log.read()


@pytest.mark.only_backend("torch")  # the lock is the operating system's: the same on every backend
def test_a_second_run_into_the_same_output_exits_2_while_the_first_one_trains(tmp_path, capsys):
    flags = FLAGS + ["--epochs=1", f"--output-dir={tmp_path / 'out'}"]
    first, gate, log = paused_run(tmp_path, flags)
    with pytest.raises(SystemExit) as second:  # this process is the second run (no second start-up)
        train_imdb.main(flags)
    lock = tmp_path / "out" / "imdb_tiny" / "_training.lock"
    err = capsys.readouterr().err
    assert second.value.code == 2
    assert f"error: another run is training in {lock.with_suffix('')} (host {socket.gethostname()}, " \
           f"pid {first.pid}; lock file {lock})" in err
    gate.touch()
    out = output_of(first, log)
    assert first.returncode == 0, out[-3000:]
    version = tmp_path / "out" / "imdb_tiny" / "1"
    with open(version / "training_log.csv") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0"]
    assert (version / "logs").is_dir() and (version / "model.keras").is_file()
    assert sorted(p.name for p in version.parent.iterdir()) == ["1", "_prepared"]  # no lock, no _training


@pytest.mark.only_backend("torch")  # KeyboardInterrupt through `fit` is Python's on every backend
def test_ctrl_c_exits_130_without_a_traceback_and_the_rerun_resumes(tmp_path, capsys):
    flags = FLAGS + ["--epochs=2", f"--output-dir={tmp_path / 'out'}"]
    run, _, log = paused_run(tmp_path, flags)
    run.send_signal(signal.SIGINT)
    out = output_of(run, log)
    assert run.returncode == 130, out[-3000:]
    assert "interrupted after epoch 1; rerun the same command to resume" in out and "Traceback" not in out
    work = tmp_path / "out" / "imdb_tiny" / "_training"
    assert [p.name for p in (work / "backup").iterdir()] == ["epoch-1"]
    assert not work.with_suffix(".lock").exists()
    version = train_imdb.main(flags)
    assert "resuming from the backup of epoch 1" in capsys.readouterr().out
    with open(version / "training_log.csv") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0", "1"]  # epoch 1 from the interrupted run


BACKUP_UNDER_A_FILE_SIZE_LIMIT = """
import sys
from recipes import common
from recipes.backup import AtomicBackupAndRestore
from tests.reliability.test_versions_and_backups import DATA, _model

common.entry_point(lambda argv: _model().fit(*DATA, epochs=2, verbose=0,
                                             callbacks=[AtomicBackupAndRestore(argv[0])]))(sys.argv[1:])
"""


@pytest.mark.only_backend("jax")  # the crash was HDF5's; the same callback on all three in test_versions_and_backups
def test_a_backup_write_over_the_file_size_limit_exits_1_without_a_crash(tmp_path):
    # HDF5 writing the weights straight to disk crashed here (SIGSEGV, exit 139) when the write failed
    backup = tmp_path / "backup"
    ran = subprocess.run([sys.executable, "-c", BACKUP_UNDER_A_FILE_SIZE_LIMIT, str(backup)], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=300,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.RLIM_INFINITY)))
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert f"error: could not write the backup of epoch 1 to {backup / '.tmp-epoch-1'} (removed): [Errno 27] " \
           "File too large" in ran.stderr and "Traceback" not in ran.stderr
    assert list(backup.iterdir()) == []


@pytest.mark.once("the OS file lock, in a subprocess that loads no backend")
def test_a_lock_is_held_until_its_process_dies_then_taken_over_with_a_message(tmp_path, capsys, monkeypatch):
    from recipes import lock

    path, host = tmp_path / "_training.lock", socket.gethostname()
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from recipes import lock; lock.acquire(sys.argv[1]); "
                               "print('locked', flush=True); sys.stdin.read()", str(path)],
                              cwd=ROOT, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    with pytest.raises(lock.HeldError, match=f"is held by another run \\(host {host}, pid {holder.pid}\\)"):
        lock.acquire(path)
    holder.kill()  # SIGKILL: the file stays, the operating system's lock goes
    holder.wait()
    lock.acquire(path)
    assert f"taking over the lock {path} of a run that no longer runs (host {host}, pid {holder.pid})" in \
        capsys.readouterr().out
    assert json.loads(path.read_text()) == {"host": host, "pid": os.getpid()}
    lock.release(path)
    assert not path.exists()
    # Without flock (some network file systems), the host and process id decide.
    monkeypatch.setattr(lock, "fcntl", None)
    path.write_text(json.dumps({"host": host, "pid": os.getppid()}))  # alive
    with pytest.raises(lock.HeldError, match=f"pid {os.getppid()}"):
        lock.acquire(path)
    path.write_text(json.dumps({"host": host, "pid": holder.pid}))  # gone
    lock.acquire(path)
    assert "taking over the lock" in capsys.readouterr().out
    lock.release(path)
