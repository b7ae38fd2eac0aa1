"""What the benchmarks that time kformer on every backend against one reference share: the median of whole
calls after a warm-up, and one worker subprocess per Keras backend that prints its seconds as JSON."""

import json
import os
import pathlib
import statistics
import subprocess
import sys
import time


def timed(call, repeats):
    """The median seconds of `repeats` calls of `call()`, after one warm-up call (compiling, on TensorFlow and JAX)."""
    call()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def report(seconds):
    """A worker's answer on stdout: `RESULT {json}` (the last such line is read)."""
    print("RESULT " + json.dumps(seconds))


def run_worker(module, backend, arguments):
    """`python -m module *arguments` with `KERAS_BACKEND=backend` from the repository root -> its `report`ed dict;
    exits naming the backend and the worker's stderr when it fails."""
    done = subprocess.run([sys.executable, "-m", module, *arguments], capture_output=True, text=True,
                          cwd=pathlib.Path(__file__).parents[1], env={**os.environ, "KERAS_BACKEND": backend})
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"{backend} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])
