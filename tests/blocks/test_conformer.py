import keras
import numpy as np
import pytest

from kformer.blocks import ConformerBlock
from kformer.layers import ConvolutionSubsampling
from tests.helpers import run_layer_test, to_numpy

# Not seed 0: run_layer_test perturbs padding with default_rng(0) noise, which would
# then be 3 * X, invisible after a LayerNorm.
RNG = np.random.default_rng(1)
X = RNG.normal(size=(2, 6, 8)).astype("float32")
PADDING = np.array([[True] * 6, [True] * 4 + [False] * 2])


def _random_weight(weight, scale):
    value = RNG.normal(size=weight.shape).astype("float32")
    return np.abs(value) + 0.5 if "variance" in weight.path else value * scale


def _noisy_padding(x, mask):
    return np.where(mask[..., None], x, RNG.normal(size=x.shape) * 3).astype("float32")


def test_conformer_layer(tmp_path):
    # kernel_size=3: real frame 3 of the second example has padded frame 4 in its window.
    run_layer_test(
        ConformerBlock,
        {"num_heads": 2, "kernel_size": 3, "dropout": 0.1, "attention_dropout": 0.1},
        X, (2, 6, 8), padding_mask=PADDING, tmp_path=tmp_path,
    )


def _random_block():
    block = ConformerBlock(2, kernel_size=3)
    block(X)
    block.set_weights([_random_weight(w, 0.3) for w in block.weights])
    return block


def test_block_is_equation_1_of_the_paper():
    block = _random_block()
    assert block.feed_forward_1.inner.kernel.shape == (8, 32)  # intermediate_dim = 4 * hidden_dim

    def norm(layer, h):
        gamma, beta = (to_numpy(w) for w in layer.weights)
        h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
        return (h * gamma + beta).astype("float32")

    def half_feed_forward(norm_layer, feed_forward, h):  # LN -> Dense -> swish -> Dense
        w1, b1, w2, b2 = (to_numpy(w) for w in feed_forward.weights)
        z = norm(norm_layer, h) @ w1 + b1
        return 0.5 * ((z / (1 + np.exp(-z))) @ w2 + b2)

    x = X + half_feed_forward(block.feed_forward_1_norm, block.feed_forward_1, X)
    attended = block.self_attention(norm(block.self_attention_norm, x), padding_mask=PADDING)
    x = (x + to_numpy(attended)).astype("float32")
    x = x + to_numpy(block.convolution(x, padding_mask=PADDING))
    x = x + half_feed_forward(block.feed_forward_2_norm, block.feed_forward_2, x)
    expected = norm(block.output_norm, x)
    np.testing.assert_allclose(to_numpy(block(X, padding_mask=PADDING)), expected, atol=1e-4)


def test_padding_is_invisible_in_training_mode():
    """Attention, depthwise convolution and BatchNorm batch statistics all skip padding."""
    block = _random_block()
    initial = block.get_weights()
    moving = block.convolution.batch_norm.moving_mean, block.convolution.batch_norm.moving_variance

    def run(x, padding_mask=None):
        block.set_weights(initial)
        out = to_numpy(block(x, padding_mask=padding_mask, training=True))
        return out, [to_numpy(w).copy() for w in moving]

    # Sequences of 4 real frames: padded to 6 with noise, or cut to 4.
    mask = np.arange(6) < np.array([[4], [4]])
    padded, padded_stats = run(_noisy_padding(X, mask), mask)
    short, short_stats = run(X[:, :4])
    np.testing.assert_allclose(padded[:, :4], short, atol=1e-4)
    for a, b in zip(padded_stats, short_stats):
        np.testing.assert_allclose(a, b, atol=1e-6)
    _, unmasked_stats = run(_noisy_padding(X, mask))  # control: the noise is visible unmasked
    assert np.abs(unmasked_stats[0] - padded_stats[0]).max() > 1e-4

    # Two lengths in one batch: noise in the padding changes neither outputs nor statistics.
    first, first_stats = run(X, PADDING)
    second, second_stats = run(_noisy_padding(X, PADDING), PADDING)
    np.testing.assert_allclose(first[PADDING], second[PADDING], atol=1e-4)
    for a, b in zip(first_stats, second_stats):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_subsampled_keras_mask_reaches_the_blocks():
    features = RNG.normal(size=(2, 15, 9)).astype("float32")
    padding_mask = np.arange(15) < np.array([[15], [11]])
    features = np.where(padding_mask[..., None], features, 0.0)
    subsampling = ConvolutionSubsampling(8, filters=4)
    block = ConformerBlock(2, intermediate_dim=16, kernel_size=3)
    inputs = keras.Input((15, 9))
    hidden = block(subsampling(keras.layers.Masking(0.0)(inputs)))
    model = keras.Model(inputs, [hidden, keras.layers.GlobalAveragePooling1D()(hidden)])
    out, pooled = model.predict(features, verbose=0)
    mask = subsampling.subsample_mask(padding_mask)
    explicit = to_numpy(block(subsampling(features), padding_mask=mask))
    np.testing.assert_allclose(out, explicit, atol=1e-5)
    np.testing.assert_allclose(pooled[1], explicit[1, :2].mean(0), atol=1e-5)  # 2 real frames


def test_errors():
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 6, 8\), num_heads=3"):
        ConformerBlock(3)(X)
    with pytest.raises(ValueError, match=r"inputs.shape=\(6, 8\)"):
        ConformerBlock(2)(X[0])
    for kwargs, match in (({"dropout": 1.0}, "dropout=1.0"),
                          ({"attention_dropout": -0.5}, "attention_dropout=-0.5"),
                          ({"kernel_size": 0}, "kernel_size=0"),
                          ({"intermediate_dim": 0}, "intermediate_dim=0"),
                          ({"num_heads": 0}, "num_heads=0")):
        with pytest.raises(ValueError, match=match):
            ConformerBlock(**{"num_heads": 2, **kwargs})
