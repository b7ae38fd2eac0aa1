"""`python -m kformer.export STAGE_DIR OUT_DIR`: the TensorFlow-backend half of an export.

Reads `model.keras` (the task with its preprocessor) and `options.json` from
STAGE_DIR (written by `save_for_serving` on JAX or torch) and writes the
SavedModel to OUT_DIR.
"""

import json
import pathlib
import sys


def main(stage, directory):
    import keras

    if keras.backend.backend() != "tensorflow":
        sys.exit(f"error: run with KERAS_BACKEND=tensorflow (got {keras.backend.backend()})")
    from kformer import models
    from kformer.export.serving import default_preprocessor
    from kformer.export.signatures import write_saved_model

    stage = pathlib.Path(stage)
    task = models.load(stage / "model.keras")
    write_saved_model(task, default_preprocessor(task), json.loads((stage / "options.json").read_text()),
                      directory)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m kformer.export STAGE_DIR OUT_DIR")
    main(*sys.argv[1:])
