"""Mismatched shapes inside attention and an empty MoE input: clear messages or a correct empty result."""

import numpy as np
import pytest

from kformer import blocks, layers

QUERY = np.zeros((2, 5, 8), "float32")
VALUE = np.zeros((2, 6, 8), "float32")


@pytest.mark.parametrize("call, names", [
    (lambda mha: mha(QUERY, VALUE, attention_mask=np.ones((3, 5, 6), bool)), "attention_mask"),
    (lambda mha: mha(QUERY, VALUE, attention_mask=np.ones((2, 5, 7), bool)), "attention_mask"),
    (lambda mha: mha(QUERY, np.zeros((3, 6, 8), "float32")), "batch size"),
], ids=["mask batch", "mask key length", "value batch"])
def test_attention_shape_mismatch_names_the_tensors(call, names):
    mha = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    with pytest.raises(ValueError, match=names) as error:
        call(mha)
    assert "Received" in str(error.value)


def test_attention_mask_may_broadcast():
    mha = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    assert tuple(mha(QUERY, VALUE, attention_mask=np.ones((1, 1, 6), bool)).shape) == (2, 5, 8)


def test_decoder_block_with_an_encoder_of_another_batch_names_both_shapes():
    block = blocks.TransformerDecoderBlock(2, 16)
    with pytest.raises(ValueError, match=r"same batch size.*query.shape=\(2, 5, 8\).*\(3, 6, 8\)"):
        block(QUERY, np.zeros((3, 6, 8), "float32"))


def test_mixture_of_experts_on_an_empty_sequence_returns_an_empty_sequence():
    moe = layers.MixtureOfExperts(num_experts=2, intermediate_dim=8)
    out = moe(np.zeros((2, 0, 8), "float32"))
    assert tuple(out.shape) == (2, 0, 8)
    assert tuple(moe(np.ones((2, 3, 8), "float32")).shape) == (2, 3, 8)  # still works after
