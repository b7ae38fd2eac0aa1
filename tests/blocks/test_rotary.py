"""Rotary positions (RoPE) in self-attention: causal, cacheable, relative."""

import numpy as np
import pytest
from keras import ops

from kformer.blocks import TransformerDecoderBlock, TransformerEncoderBlock
from kformer.layers import MultiHeadAttention
from tests.helpers import run_layer_test, to_numpy

X = np.random.default_rng(1).normal(size=(2, 7, 8)).astype("float32")
ROTARY = {"num_heads": 2, "intermediate_dim": 16, "normalize_first": True, "activation": "gelu",
          "rotary_max_wavelength": 10000}


def test_rotary_decoder_only_block(tmp_path):
    run_layer_test(TransformerDecoderBlock, ROTARY, X, (2, 7, 8), causal=True, tmp_path=tmp_path)


def test_rotary_encoder_block_respects_padding(tmp_path):
    padding = np.array([[True] * 7, [True] * 4 + [False] * 3])
    run_layer_test(TransformerEncoderBlock, ROTARY, X, (2, 7, 8), padding_mask=padding,
                   run_mixed_precision=False, tmp_path=tmp_path)


def _decode(stack, prompt_length, offset=0, cache_length=12):
    """Prefill `prompt_length` tokens at cache index `offset`, then one token a step."""
    caches = [ops.zeros((2, 2, cache_length, 2, 4)) for _ in stack]
    written = np.broadcast_to(np.arange(cache_length) >= offset, (2, cache_length))  # hide slots < offset
    outputs, start = [], 0
    for length in [prompt_length] + [1] * (X.shape[1] - prompt_length):
        h = X[:, start:start + length]
        for i, block in enumerate(stack):
            h, caches[i] = block(h, self_attention_cache=caches[i], decoder_padding_mask=written,
                                 self_attention_cache_update_index=offset + start)
        outputs.append(to_numpy(h))
        start += length
    return np.concatenate(outputs, axis=1)


@pytest.mark.parametrize("prompt_length", [1, 3])
def test_cached_rotary_decoding_equals_the_full_causal_pass(prompt_length):
    stack = [TransformerDecoderBlock(**ROTARY) for _ in range(2)]
    full = X
    for block in stack:
        full = block(full)
    np.testing.assert_allclose(_decode(stack, prompt_length), to_numpy(full), atol=1e-5)


def test_rotary_attention_depends_on_relative_positions_only():
    stack = [TransformerDecoderBlock(**ROTARY)]
    stack[0](X)
    # The same tokens written from cache index 4 instead of 0: every query-key distance is kept.
    shifted = _decode(stack, 3, offset=4)
    np.testing.assert_allclose(shifted, _decode(stack, 3), atol=1e-4)
    plain = [TransformerDecoderBlock(2, 16, normalize_first=True)]
    plain[0](X)
    assert np.allclose(_decode(plain, 3, offset=4), _decode(plain, 3), atol=1e-4)  # no positions at all


def test_rotary_needs_an_even_key_dim():
    with pytest.raises(ValueError, match="key_dim=3"):
        MultiHeadAttention(2, 3, rotary_max_wavelength=10000)
