"""`kernels.decoding.PlainDecoder` computes what the task's readable `call_with_cache` computes."""

import collections
import sys

import keras
import numpy as np
import pytest
from keras import ops

from kformer import models
from kformer.kernels import decoding
from kformer.kernels.decoding import PlainDecoder, linear
from tests.helpers import to_numpy

RNG = np.random.default_rng(0)
VOCAB = 40
SOURCE = RNG.integers(3, VOCAB, (3, 7)).astype("int32")
SOURCE[1, 4:] = 0
PROMPTS = RNG.integers(3, VOCAB, (3, 5)).astype("int32")
PROMPTS[0, 3:] = 0


def translator(**kwargs):
    keras.utils.set_random_seed(0)
    return models.translator(preset="transformer_tiny", vocabulary_size=VOCAB, dropout=0.0, **kwargs)


def causal_lm(**kwargs):
    keras.utils.set_random_seed(0)
    return models.causal_lm(preset="gpt_tiny", vocabulary_size=VOCAB, dropout=0.0, **kwargs)


CASES = {
    "translator": lambda: (translator(), SOURCE),
    "translator_pre_norm_untied": lambda: (translator(normalize_first=True, tie_output_embedding=False), SOURCE),
    "translator_learned_positions": lambda: (translator(position="learned"), SOURCE),
    "causal_lm": lambda: (causal_lm(), PROMPTS),
    "causal_lm_rotary_untied": lambda: (causal_lm(position="rotary", tie_output_embedding=False), PROMPTS),
    "causal_lm_gpt_neo_local": lambda: (causal_lm(attention_window=3, attention_types=["global", "local"],
                                                  attention_scale=1.0, use_qkv_bias=False), PROMPTS),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_plain_steps_equal_call_with_cache(case):
    """Logits and caches of eight steps, each at a known index, equal the readable path's."""
    task, inputs = CASES[case]()
    tokens, _, start, cache, context, _ = task.prefill(inputs, 12, (1,), True)
    start = int(to_numpy(start))
    assert PlainDecoder.applies(task)
    plain = PlainDecoder(task, context, ops.shape(tokens)[1])  # also where it steps aside (`PAYS`): kept equal
    plain_cache = cache
    for index in range(start, start + 8):
        step = RNG.integers(3, VOCAB, (3, 1)).astype("int32")
        want, cache = task.call_with_cache(step, cache, index, context)
        got, plain_cache = plain.step(step, index, plain_cache)
        np.testing.assert_allclose(to_numpy(got), to_numpy(want)[:, -1], atol=2e-4)
        for a, b in zip(plain_cache, cache):
            np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-5)


@pytest.mark.parametrize("case", ["translator", "causal_lm_rotary_untied"])
@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_generate_gives_the_same_tokens_with_and_without_the_plain_step(case, strategy, monkeypatch):
    """The whole loop, compiled where the backend compiles it (a traced index): the same tokens."""
    task, inputs = CASES[case]()
    kwargs = dict(max_length=10, strategy=strategy, num_beams=3)
    if task.decoding_family == "translator":
        kwargs.update(start_token_id=1, end_token_id=2)
    generate = sys.modules["kformer.generation.search"]
    everywhere = {backend: ("translator", "causal") for backend in ("tensorflow", "jax", "torch")}
    monkeypatch.setattr(decoding, "PAYS", everywhere)
    monkeypatch.setattr(generate, "_COMPILED", collections.OrderedDict())
    plain = models.generate(task, inputs, **kwargs)
    monkeypatch.setattr(decoding, "PAYS", {})
    monkeypatch.setattr(generate, "_COMPILED", collections.OrderedDict())
    np.testing.assert_array_equal(models.generate(task, inputs, **kwargs), plain)


def test_plain_step_steps_aside_where_it_does_not_apply(monkeypatch):
    backend = keras.backend.backend()  # where it pays (`PAYS`): every language model, no JAX translator
    assert (PlainDecoder.create(translator(), {}, 8) is not None) == (backend != "jax")
    assert PlainDecoder.create(causal_lm(), {}, 8) is not None
    monkeypatch.setattr(decoding, "PAYS", {keras.backend.backend(): ("causal",)})
    quantized = causal_lm()
    quantized.quantize("int8")
    assert PlainDecoder.create(quantized, {}, 8) is None
    keras.config.set_dtype_policy("mixed_float16")
    try:
        mixed = causal_lm()
    finally:
        keras.config.set_dtype_policy("float32")
    assert PlainDecoder.create(mixed, {}, 8) is None
    monkeypatch.setattr(decoding, "PAYS", {})
    assert PlainDecoder.create(causal_lm(), {}, 8) is None


@pytest.mark.parametrize("bias", [True, False])
def test_linear_is_x_times_kernel_plus_bias(bias):
    x, kernel, b = (RNG.normal(size=s).astype("float32") for s in ((2, 3, 4), (4, 5), (5,)))
    want = x @ kernel + (b if bias else 0)
    np.testing.assert_allclose(to_numpy(linear(x, kernel, b if bias else None)), want, atol=1e-5)
    np.testing.assert_allclose(to_numpy(linear(x[0], kernel, b if bias else None)), want[0], atol=1e-5)
