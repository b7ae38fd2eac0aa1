"""A model saved on this backend reloads on the next one with equal outputs (a subprocess).

Around the cycle tensorflow -> jax -> torch -> tensorflow: the three CI runs
save on every backend and reload on every backend, at a third of the cost of
reloading on both others each time.
"""

import os
import subprocess
import sys

import keras
import numpy as np

from kformer import models
from tests.models.cases import random_inputs, small_model
from kformer.data.preprocessors import TranslatorPreprocessor
from kformer.data.wordpiece import WordPieceTokenizer
from tests.models.generate_cases import GENERATE_CASES, OPTIONS, TEXTS, VOCABULARY

NAMES = ("transformer_tiny", "imdb_tiny", "bert_tiny", "vit_tiny")
NEXT = {"tensorflow": "jax", "jax": "torch", "torch": "tensorflow"}


def test_saved_models_reload_on_the_next_backend(tmp_path):
    for name in NAMES:
        model = small_model(name)
        if name == "transformer_tiny":  # with its preprocessor: strings must translate alike everywhere
            tokenizer = WordPieceTokenizer(VOCABULARY)
            model.preprocessor = TranslatorPreprocessor(tokenizer, tokenizer, OPTIONS["max_length"])
        inputs = random_inputs(model)
        outputs = keras.tree.flatten(model.predict(inputs, verbose=0))
        model.save(tmp_path / f"{name}.keras")
        np.savez(tmp_path / f"{name}.npz", **{f"in_{k}": v for k, v in inputs.items()},
                 **{f"out_{i}": v for i, v in enumerate(outputs)})
        if name == "transformer_tiny":
            source = inputs["encoder_token_ids"]
            np.savez(tmp_path / "generated.npz", **{
                case: models.generate(model, source, **kwargs) for case, kwargs in GENERATE_CASES.items()
            }, translations=np.array(model.translate(TEXTS, max_length=OPTIONS["max_length"])))
    here = keras.backend.backend()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for backend in (NEXT[here],):
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        result = subprocess.run(
            [sys.executable, "-m", "tests.models.cross_backend_check", str(tmp_path)],
            cwd=root, env=env, capture_output=True, text=True, timeout=600,
        )
        assert result.returncode == 0, f"{here} -> {backend}:\n{result.stderr[-3000:]}"
        assert f"OK {backend}" in result.stdout
