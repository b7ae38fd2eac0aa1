"""Run under another backend: reload `.keras` files saved elsewhere and compare.

    KERAS_BACKEND=jax python -m tests.models.cross_backend_check DIR

DIR holds `<name>.keras`, `<name>.npz` (inputs and the saving backend's
outputs) and `generated.npz` (token ids from `models.generate`, and the
translator's `translate` strings: it is saved with its preprocessor).
"""

import pathlib
import sys

import keras
import numpy as np

from kformer import models
from tests.models.generate_cases import GENERATE_CASES, OPTIONS, TEXTS


def main(directory):
    directory = pathlib.Path(directory)
    for path in sorted(directory.glob("*.keras")):
        model = models.load(path)  # safe_mode=True, with its preprocessor
        saved = np.load(path.with_suffix(".npz"))
        inputs = {k[3:]: saved[k] for k in saved.files if k.startswith("in_")}
        outputs = keras.tree.flatten(model.predict(inputs, verbose=0))
        expected = [saved[f"out_{i}"] for i in range(len(outputs))]
        for got, want in zip(outputs, expected):
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=path.name)
        if path.stem.startswith("transformer"):
            generated = np.load(directory / "generated.npz")
            for name, kwargs in GENERATE_CASES.items():
                tokens = models.generate(model, inputs["encoder_token_ids"], **kwargs)
                np.testing.assert_array_equal(tokens, generated[name], err_msg=name)
            translations = model.translate(TEXTS, max_length=OPTIONS["max_length"])
            assert translations == generated["translations"].tolist(), translations
    print(f"OK {keras.backend.backend()}")


if __name__ == "__main__":
    main(sys.argv[1])
