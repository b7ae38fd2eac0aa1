"""Every model family compiles, predicts, trains a step and decodes under both mixed policies.

Issue 12, item 13: `mixed_float16` on a JAX CPU failed inside XLA ("F16_F16_F32 is not
supported by dot_general on CPU") because the fused attention asks for float32 logits
from float16 inputs. Attention now takes its explicit path there.
"""

import keras
import numpy as np
import pytest

from kformer import models
from tests.helpers import JIT, to_numpy
from tests.models.cases import random_inputs, small_model

PRESETS = ["transformer_tiny", "imdb_tiny", "bert_tiny", "vit_tiny", "conformer_s", "gpt_tiny"]


def _finite(tree):
    return all(np.all(np.isfinite(np.asarray(to_numpy(x), "float32"))) for x in keras.tree.flatten(tree))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_model_family_predicts_under_mixed_float16(preset):
    keras.config.set_dtype_policy("mixed_float16")
    model = small_model(preset)
    assert _finite(model.predict(random_inputs(model), verbose=0)), f"{preset}: non-finite predictions"


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_a_compiled_training_step_under_a_mixed_policy(policy):
    keras.config.set_dtype_policy(policy)
    model = small_model("imdb_tiny")
    data = random_inputs(model)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", jit_compile=JIT)
    history = model.fit(data, np.array([0, 1]), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_decoding_under_mixed_float16():
    keras.config.set_dtype_policy("mixed_float16")
    source = np.random.default_rng(0).integers(3, 40, (2, 6)).astype("int32")
    tokens = models.generate(small_model("transformer_tiny"), source, max_length=5,
                             start_token_id=1, end_token_id=2)
    assert tokens.shape == (2, 5) and tokens.min() >= 0 and tokens.max() < 40
