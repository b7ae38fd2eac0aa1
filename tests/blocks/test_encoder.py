import keras
import numpy as np
import pytest

from kformer.blocks import TransformerEncoderBlock
from tests.helpers import run_layer_test, to_numpy

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 6, 8)).astype("float32")
PADDING = np.array([[True] * 6, [True] * 4 + [False] * 2])


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_layer(normalize_first, tmp_path):
    run_layer_test(
        TransformerEncoderBlock,
        {"num_heads": 2, "intermediate_dim": 16, "dropout": 0.1, "normalize_first": normalize_first},
        X, (2, 6, 8), padding_mask=PADDING, tmp_path=tmp_path,
    )


def test_encoder_with_experts_layer(tmp_path):
    kwargs = {"num_heads": 2, "intermediate_dim": 16, "num_experts": 4, "top_k": 2}
    run_layer_test(TransformerEncoderBlock, kwargs, X, (2, 6, 8), padding_mask=PADDING,
                   tmp_path=tmp_path)
    block = TransformerEncoderBlock(**kwargs)
    block(X)
    assert len(block.losses) == 1 and float(to_numpy(block.losses[0])) > 0


def _reference_parts(block):
    mha = keras.layers.MultiHeadAttention(2, 4)
    mha(X, X)
    mha.set_weights(block.self_attention.get_weights())
    w1, b1 = (to_numpy(w) for w in block.feed_forward.inner.weights)
    w2, b2 = (to_numpy(w) for w in block.feed_forward.outer.weights)

    def ffn(h):
        return np.maximum(h @ w1 + b1, 0) @ w2 + b2

    def norm(layer, h):
        gamma, beta = (to_numpy(w) for w in layer.weights)
        mean, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
        return (h - mean) / np.sqrt(var + 1e-5) * gamma + beta

    return mha, ffn, norm


def test_post_norm_is_the_paper_block():
    block = TransformerEncoderBlock(2, 16)
    out = to_numpy(block(X, padding_mask=PADDING))
    mha, ffn, norm = _reference_parts(block)
    h = norm(block.self_attention_norm, X + to_numpy(mha(X, X, value_mask=PADDING)))
    expected = norm(block.feed_forward_norm, h + ffn(h))
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_pre_norm_block():
    block = TransformerEncoderBlock(2, 16, normalize_first=True)
    out = to_numpy(block(X))
    mha, ffn, norm = _reference_parts(block)
    a = norm(block.self_attention_norm, X)
    h = X + to_numpy(mha(a, a))
    expected = h + ffn(norm(block.feed_forward_norm, h))
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_keras_mask_from_embedding_is_used_and_propagated():
    ids = np.array([[3, 4, 5, 0], [1, 0, 0, 0]])
    inputs = keras.Input((4,), dtype="int32")
    x = keras.layers.Embedding(10, 8, mask_zero=True)(inputs)
    block = TransformerEncoderBlock(2, 16)
    y = block(x)
    pooled = keras.layers.GlobalAveragePooling1D()(y)
    model = keras.Model(inputs, [y, pooled])
    out, pooled = model.predict(ids, verbose=0)
    embedded = model.layers[1](ids)
    explicit = to_numpy(block(embedded, padding_mask=ids != 0))
    np.testing.assert_allclose(out, explicit, atol=1e-5)
    np.testing.assert_allclose(pooled[1], explicit[1, 0], atol=1e-5)


def test_encoder_errors():
    with pytest.raises(ValueError, match=r"hidden_dim=8.*num_heads=3"):
        TransformerEncoderBlock(3, 16)(X)
    with pytest.raises(ValueError, match=r"inputs.shape=\(6, 8\)"):
        TransformerEncoderBlock(2, 16)(X[0])
    with pytest.raises(ValueError, match="dropout=1.0"):
        TransformerEncoderBlock(2, 16, dropout=1.0)
    with pytest.raises(ValueError, match="num_experts=-1"):
        TransformerEncoderBlock(2, 16, num_experts=-1)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_attention_scores_are_probabilities_over_real_keys(normalize_first):
    block = TransformerEncoderBlock(2, 16, normalize_first=normalize_first)
    plain = to_numpy(block(X, padding_mask=PADDING))
    out, scores = block(X, padding_mask=PADDING, return_attention_scores=True)
    scores = to_numpy(scores)
    assert scores.shape == (2, 2, 6, 6)  # (batch, heads, q_len, k_len)
    assert np.all(scores >= 0)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(scores[1, :, :, 4:], 0.0)  # padded keys
    np.testing.assert_allclose(to_numpy(out), plain, atol=1e-5)


def test_attention_scores_follow_the_keras_mask_and_trace_symbolically():
    ids = np.array([[3, 4, 5, 0], [1, 0, 0, 0]])
    inputs = keras.Input((4,), dtype="int32")
    block = TransformerEncoderBlock(2, 16)
    y, scores = block(keras.layers.Embedding(10, 8, mask_zero=True)(inputs), return_attention_scores=True)
    assert tuple(scores.shape) == (None, 2, 4, 4)
    out, scores = keras.Model(inputs, [y, scores]).predict(ids, verbose=0)
    np.testing.assert_array_equal(scores[0, :, :, 3], 0.0)
    np.testing.assert_array_equal(scores[1, :, :, 1:], 0.0)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("block_class", ["encoder", "decoder"])
def test_residual_dropout_acts_in_training_only_also_through_a_model(block_class):
    from kformer.blocks import TransformerDecoderBlock

    block = (TransformerEncoderBlock if block_class == "encoder" else TransformerDecoderBlock)(
        num_heads=2, intermediate_dim=16, dropout=0.5)
    inputs = keras.Input((6, 8))
    model = keras.Model(inputs, block(inputs))  # training reaches the block through Keras's call context
    inference = [to_numpy(model(X)), to_numpy(model(X, training=False)), to_numpy(block(X))]
    for out in inference[1:]:
        np.testing.assert_allclose(out, inference[0], rtol=1e-5, atol=1e-5)
    first, second = to_numpy(model(X, training=True)), to_numpy(model(X, training=True))
    assert not np.allclose(first, inference[0]) and not np.allclose(first, second)
