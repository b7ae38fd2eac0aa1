"""`python -m kformer.export STAGE_DIR OUT_DIR`: the TensorFlow-backend half of an export.

Reads `model.keras` (the task with its preprocessor) and `options.json` from
STAGE_DIR (written by `save_for_serving` on JAX or torch) and writes the
SavedModel to OUT_DIR. `python -m kformer.export --worker` does the same for
each request on stdin (`kformer.export.worker`).
"""

import os
import sys

from kformer.export import worker

if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:  # by hand: kformer's exports start the worker with `worker._BOOT`
        worker.watch_parent(os.getppid(), kill_signal=False)
        worker.serve()
    elif len(sys.argv) == 3:
        worker.export_stage(*sys.argv[1:])
    else:
        sys.exit("usage: python -m kformer.export STAGE_DIR OUT_DIR  (or --worker)")
