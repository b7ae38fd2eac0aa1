import keras
import numpy as np
import pytest
from keras import ops

from kformer.blocks import TransformerDecoderBlock
from tests.helpers import run_layer_test, to_numpy

RNG = np.random.default_rng(0)
TARGET = RNG.normal(size=(2, 6, 8)).astype("float32")
SOURCE = RNG.normal(size=(2, 5, 8)).astype("float32")
SOURCE_PADDING = np.array([[True] * 5, [True] * 3 + [False] * 2])
TARGET_PADDING = np.array([[True] * 6, [True] * 4 + [False] * 2])


@pytest.mark.parametrize("normalize_first", [False, True])
def test_decoder_layer_causal(normalize_first, tmp_path):
    run_layer_test(
        TransformerDecoderBlock,
        {"num_heads": 2, "intermediate_dim": 16, "dropout": 0.1, "normalize_first": normalize_first},
        {"decoder_sequence": TARGET, "encoder_sequence": SOURCE},
        (2, 6, 8), causal=True, tmp_path=tmp_path,
    )


def test_decoder_layer_padding(tmp_path):
    run_layer_test(
        TransformerDecoderBlock, {"num_heads": 2, "intermediate_dim": 16},
        {"decoder_sequence": TARGET, "encoder_sequence": SOURCE},
        (2, 6, 8), padding_mask=TARGET_PADDING, padding_mask_arg="decoder_padding_mask",
        tmp_path=tmp_path,
    )


def test_decoder_only_layer(tmp_path):
    run_layer_test(TransformerDecoderBlock, {"num_heads": 2, "intermediate_dim": 16}, TARGET,
                   (2, 6, 8), causal=True, tmp_path=tmp_path)


def test_encoder_padding_hides_padded_source_tokens():
    block = TransformerDecoderBlock(2, 16)
    out = to_numpy(block(TARGET, SOURCE, encoder_padding_mask=SOURCE_PADDING))
    changed = SOURCE.copy()
    changed[1, 3:] = 100.0
    again = to_numpy(block(TARGET, changed, encoder_padding_mask=SOURCE_PADDING))
    np.testing.assert_allclose(again, out, atol=1e-5)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_cached_decoding_through_a_stack_equals_full_causal_pass(normalize_first):
    stack = [TransformerDecoderBlock(2, 16, normalize_first=normalize_first, name=f"decoder_{i}")
             for i in range(2)]
    x = TARGET
    for block in stack:
        x = block(x, SOURCE, encoder_padding_mask=SOURCE_PADDING)
    full = to_numpy(x)

    self_caches = [ops.zeros((2, 2, 6, 2, 4)) for _ in stack]
    cross_caches = [block.compute_cross_attention_cache(SOURCE) for block in stack]
    steps = []
    for i in range(6):
        h = TARGET[:, i : i + 1]
        for j, block in enumerate(stack):
            h, self_caches[j], cross_caches[j] = block(
                h, encoder_padding_mask=SOURCE_PADDING,
                self_attention_cache=self_caches[j], self_attention_cache_update_index=i,
                cross_attention_cache=cross_caches[j],
            )
        steps.append(to_numpy(h))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_decoder_errors():
    block = TransformerDecoderBlock(2, 16)
    block(TARGET, SOURCE)
    with pytest.raises(ValueError, match="self_attention_cache_update_index=None"):
        block(TARGET[:, :1], SOURCE, self_attention_cache=ops.zeros((2, 2, 6, 2, 4)))
    with pytest.raises(ValueError, match="encoder_sequence=None"):
        block(TARGET)
    decoder_only = TransformerDecoderBlock(2, 16)
    decoder_only(TARGET)
    with pytest.raises(ValueError, match="without an `encoder_sequence`"):
        decoder_only(TARGET, SOURCE)
    with pytest.raises(ValueError, match=r"hidden_dim=8.*num_heads=3"):
        TransformerDecoderBlock(3, 16)(TARGET)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_attention_scores_are_causal_padded_probabilities(normalize_first):
    block = TransformerDecoderBlock(2, 16, normalize_first=normalize_first)
    masks = dict(decoder_padding_mask=TARGET_PADDING, encoder_padding_mask=SOURCE_PADDING)
    plain = to_numpy(block(TARGET, SOURCE, **masks))
    out, self_scores, cross_scores = block(TARGET, SOURCE, return_attention_scores=True, **masks)
    self_scores, cross_scores = to_numpy(self_scores), to_numpy(cross_scores)
    assert self_scores.shape == (2, 2, 6, 6) and cross_scores.shape == (2, 2, 6, 5)
    for scores in (self_scores, cross_scores):
        assert np.all(scores >= 0)
        np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(np.triu(self_scores, 1), 0.0)  # future keys
    np.testing.assert_array_equal(self_scores[1, :, :, 4:], 0.0)  # padded target keys
    np.testing.assert_array_equal(cross_scores[1, :, :, 3:], 0.0)  # padded source keys
    np.testing.assert_allclose(to_numpy(out), plain, atol=1e-5)


def test_decoder_only_attention_scores():
    block = TransformerDecoderBlock(2, 16)
    plain = to_numpy(block(TARGET))
    out, scores = block(TARGET, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), plain, atol=1e-5)
    np.testing.assert_array_equal(np.triu(to_numpy(scores)[0, 0], 1), 0.0)


def test_cached_attention_scores_equal_full_pass_rows():
    block = TransformerDecoderBlock(2, 16)
    _, full_self, full_cross = (to_numpy(s) for s in block(
        TARGET, SOURCE, encoder_padding_mask=SOURCE_PADDING, return_attention_scores=True))
    cache, cross_cache = ops.zeros((2, 2, 6, 2, 4)), block.compute_cross_attention_cache(SOURCE)
    for i in range(6):
        # Order: outputs, self cache, cross cache, self scores, cross scores.
        _, cache, cross_cache, self_scores, cross_scores = block(
            TARGET[:, i : i + 1], encoder_padding_mask=SOURCE_PADDING, self_attention_cache=cache,
            self_attention_cache_update_index=i, cross_attention_cache=cross_cache,
            return_attention_scores=True)
        assert tuple(self_scores.shape) == (2, 2, 1, 6)  # keys: the whole cache
        np.testing.assert_allclose(to_numpy(self_scores)[:, :, 0], full_self[:, :, i], atol=1e-5)
        np.testing.assert_allclose(to_numpy(cross_scores)[:, :, 0], full_cross[:, :, i], atol=1e-5)


def test_a_quantized_block_decodes_through_the_general_path():
    """int8 sublayers decode through their `quantized_call` (inside `Layer.__call__`)."""
    block = TransformerDecoderBlock(num_heads=2, intermediate_dim=16)
    block(TARGET, SOURCE)
    for layer in block._flatten_layers():
        if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense)):
            layer.quantize("int8")
    call = dict(self_attention_cache=np.zeros((2, 2, 7, 2, 4), "float32"), self_attention_cache_update_index=0,
                cross_attention_cache=block.compute_cross_attention_cache(SOURCE))
    out, cache, _ = block(TARGET[:, :1], **call)
    assert tuple(out.shape) == (2, 1, 8) and np.isfinite(to_numpy(out)).all()
    assert np.abs(to_numpy(cache)[:, :, 0]).sum() > 0 and not to_numpy(cache)[:, :, 1:].any()
