"""The TensorFlow process that writes SavedModels for JAX and torch sessions.

An export from JAX or torch runs in a TensorFlow-backend process (see
`kformer.export.serving`). Starting one costs about 8 s of imports on a
2-core CPU, so the first export starts a worker and later exports from the
same process reuse it. The worker reads one request a line on stdin, answers
one JSON line on its own pipe, and exits when this process closes its stdin
or dies (then a write in progress stops; its `.tmp-*` folder is removed by
the next `write_new_version` in that folder).

The worker watches its parent from its first line, before it imports
kformer, Keras and TensorFlow (`watch_parent`): this file imports only the
standard library at its top, and the worker's command loads it by its path.
"""

import atexit
import ctypes
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

# The worker's command: watch the parent (argv: this file, the parent's pid, whether the parent's main
# thread started it), then import kformer and serve. `-c` puts the working directory first on
# sys.path, as `-m kformer.export` does.
_BOOT = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('kformer_export_watch', "
         "sys.argv[1]); watch = importlib.util.module_from_spec(spec); spec.loader.exec_module(watch); "
         "watch.watch_parent(int(sys.argv[2]), kill_signal=sys.argv[3] == 'main'); "
         "from kformer.export import worker; worker.serve()")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_SECONDS = 0.2  # how often the watch thread looks for a new parent
_LOCK = threading.Lock()
_WORKER = {}  # "process", "log" (its stderr, a file), "owner" (the pid that started it)
LOG_TAIL = 3000  # characters of the worker's log in an error
ANSWER = "kformer-export-answer: "  # what starts each answer line


def write_in_tensorflow(stage, directory):
    """Export `stage/model.keras` with `stage/options.json` to `directory` in the TensorFlow worker.

    Args:
        stage: path of a folder holding `model.keras` and `options.json`.
        directory: path of the SavedModel folder to write (empty or new).

    Raises:
        RuntimeError: the export failed; the message holds the worker's
            traceback, or the end of its log if it died.
    """
    request = json.dumps({"stage": os.path.abspath(stage), "directory": os.path.abspath(directory)})
    with _LOCK:
        process, log = _running_worker()
        try:
            process.stdin.write(request + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
            while line and not line.startswith(ANSWER):  # anything printed while kformer was imported
                line = process.stdout.readline()
        except OSError:  # a broken pipe: the worker is gone
            line = ""
        if not line:  # the worker died: the next export starts a new one
            _WORKER.clear()
            raise RuntimeError(f"Export under the TensorFlow backend failed: its process exited "
                               f"({process.wait()}). The end of its log:\n{_tail(log)}")
    answer = json.loads(line[len(ANSWER):])
    if not answer["ok"]:
        raise RuntimeError(f"Export under the TensorFlow backend failed:\n{answer['error'][-LOG_TAIL:]}")


def _running_worker():
    """`(process, log path)` of the worker, started on first use (and anew in a forked child)."""
    process = _WORKER.get("process")
    if process is None or process.poll() is not None or _WORKER["owner"] != os.getpid():
        handle, log = tempfile.mkstemp(prefix="kformer-export-worker-", suffix=".log")
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        # Linux's parent-death signal follows the thread that starts the worker: only the main thread's
        # lasts as long as this process (another thread's would kill a worker that later exports reuse).
        thread = "main" if threading.current_thread() is threading.main_thread() else "other"
        command = [sys.executable, "-c", _BOOT, os.path.abspath(__file__), str(os.getpid()), thread]
        process = subprocess.Popen(command, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=handle)
        os.close(handle)  # the worker has its own
        atexit.register(_stop, process, log, os.getpid())
        _WORKER.update(process=process, log=log, owner=os.getpid())
    return _WORKER["process"], _WORKER["log"]


def _stop(process, log, owner):
    """At exit of the process that started it: end the worker's input (it exits when it has read it
    all) and remove its log."""
    if os.getpid() == owner:
        try:
            process.stdin.close()
        except OSError:  # it died with a request unread
            pass
        pathlib.Path(log).unlink(missing_ok=True)


def _tail(log):
    with open(log, "rb") as f:
        f.seek(max(0, os.path.getsize(log) - LOG_TAIL))
        return f.read().decode(errors="replace")


def export_stage(stage, directory):
    """Load `stage/model.keras` and write its SavedModel with `stage/options.json` to `directory`
    (the TensorFlow backend)."""
    import keras

    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(f"The export process needs KERAS_BACKEND=tensorflow. Received: {keras.backend.backend()}")
    from kformer import models
    from kformer.export.preprocessing import default_preprocessor
    from kformer.export.signatures import write_saved_model

    stage = pathlib.Path(stage)
    task = models.load(stage / "model.keras")
    options = json.loads((stage / "options.json").read_text())
    write_saved_model(task, default_preprocessor(task), options, directory)


def serve():
    """The worker's loop (`python -m kformer.export --worker`, TensorFlow backend).

    Each stdin line is `{"stage": ..., "directory": ...}`; each answer is a
    line on the process's original stdout, `ANSWER` then `{"ok": true}` or
    `{"ok": false, "error": traceback}`, while prints and logs go to stderr.

    Its parent is watched by the caller: the worker's command (`_BOOT`)
    calls `watch_parent` before importing kformer, `python -m kformer.export
    --worker` after.
    """
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # TensorFlow's and Keras's prints go to the log, not into the answers
    import keras

    for line in sys.stdin:
        request = json.loads(line)
        try:
            export_stage(request["stage"], request["directory"])
            answer = {"ok": True}
        except Exception:
            answer = {"ok": False, "error": traceback.format_exc()}
        keras.utils.clear_session()  # names and traces of this export do not reach the next
        answers.write(ANSWER + json.dumps(answer) + "\n")
        answers.flush()


def watch_parent(parent, kill_signal=True):
    """End this process, mid-export too, as soon as process `parent` (the one that started it) is gone.

    Call it first, before slow imports, with the pid the parent gave: a
    parent looked up with `os.getppid()` after importing TensorFlow (about
    8 s) may already be `init` or a subreaper, if the real one was killed
    meanwhile; the worker would then run the request waiting in its stdin to
    the end.

    Args:
        parent: int. The pid of the process that started this one.
        kill_signal: bool. On Linux, also have the kernel send SIGKILL when
            the thread that started this process ends (`prctl(PR_SET_PDEATHSIG)`),
            which works while Python is busy in a long C call. True only
            when the parent's main thread started it. A thread polling
            `os.getppid()` every `WATCH_SECONDS` is the portable fallback.
    """
    if kill_signal and sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl in this libc: the thread below still watches
            pass
    if os.getppid() != parent:  # it died before the signal was asked for
        os._exit(1)
    threading.Thread(target=_exit_with, args=(parent,), daemon=True, name="kformer-watch-parent").start()


def _exit_with(parent):
    """Stop the worker, mid-export too, once the process that started it is gone."""
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os._exit(1)
