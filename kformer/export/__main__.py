"""`python -m kformer.export STAGE_DIR OUT_DIR`: the TensorFlow-backend half of an export.

Reads `model.keras`, `vocabulary_<i>.txt` and `spec.json` from STAGE_DIR
(written by `save_for_serving` on JAX or torch) and writes the SavedModel.
"""

import json
import pathlib
import sys


def main(stage, directory):
    import keras

    if keras.backend.backend() != "tensorflow":
        sys.exit(f"error: run with KERAS_BACKEND=tensorflow (got {keras.backend.backend()})")
    import kformer.models  # noqa: F401  (registers kformer's serializable layers)
    from kformer.data.wordpiece import WordPieceTokenizer
    from kformer.export.graphs import write_saved_model

    stage = pathlib.Path(stage)
    spec = json.loads((stage / "spec.json").read_text())
    model = keras.saving.load_model(stage / "model.keras", compile=False)
    tokenizers = [WordPieceTokenizer.load(stage / f"vocabulary_{i}.txt")
                  for i in range(spec.pop("num_tokenizers"))]
    write_saved_model(model, tokenizers, spec, directory)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m kformer.export STAGE_DIR OUT_DIR")
    main(*sys.argv[1:])
