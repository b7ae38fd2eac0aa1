import keras
import numpy as np
import pytest

from kformer.layers import ConformerConvolution, ConvolutionSubsampling
from tests.helpers import run_layer_test, to_numpy

# Not seed 0: run_layer_test perturbs padding with default_rng(0) noise, which would
# then be 3 * X, invisible after a LayerNorm.
RNG = np.random.default_rng(1)
X = RNG.normal(size=(2, 6, 8)).astype("float32")
PADDING = np.array([[True] * 6, [True] * 4 + [False] * 2])
FEATURES = RNG.normal(size=(2, 15, 9)).astype("float32")


def _random_weight(weight, scale):
    value = RNG.normal(size=weight.shape).astype("float32")
    return np.abs(value) + 0.5 if "variance" in weight.path else value * scale


def _noisy_padding(x, mask):
    return np.where(mask[..., None], x, RNG.normal(size=x.shape) * 3).astype("float32")


def test_convolution_layer(tmp_path):
    run_layer_test(ConformerConvolution, {"kernel_size": 5}, X, (2, 6, 8),
                   padding_mask=PADDING, tmp_path=tmp_path)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("kernel_size", [3, 4])
def test_convolution_equals_numpy_figure_2(kernel_size):
    layer = ConformerConvolution(kernel_size)
    layer(X)
    layer.set_weights([_random_weight(w, 0.5) for w in layer.weights])
    (gamma, beta), (w1, b1), (kernel, bias), (bn_gamma, bn_beta, mean, var), (w2, b2) = (
        [to_numpy(w) for w in sub.weights] for sub in (
            layer.norm, layer.pointwise_in, layer.depthwise, layer.batch_norm, layer.pointwise_out)
    )
    h = (X - X.mean(-1, keepdims=True)) / np.sqrt(X.var(-1, keepdims=True) + 1e-5) * gamma + beta
    h = h @ w1 + b1
    h = h[..., :8] * _sigmoid(h[..., 8:])  # GLU
    h = np.where(PADDING[..., None], h, 0.0)
    left = (kernel_size - 1) // 2  # 'same' padding
    padded = np.pad(h, ((0, 0), (left, kernel_size - 1 - left), (0, 0)))
    h = sum(padded[:, k:k + 6] * kernel[k, :, 0] for k in range(kernel_size)) + bias
    h = (h - mean) / np.sqrt(var + 1e-3) * bn_gamma + bn_beta
    expected = (h * _sigmoid(h)) @ w2 + b2
    out = to_numpy(layer(_noisy_padding(X, PADDING), padding_mask=PADDING))
    np.testing.assert_allclose(out[PADDING], expected[PADDING], atol=1e-4)


def test_batch_statistics_ignore_padded_frames():
    layer = ConformerConvolution(3)
    layer(X)
    initial = layer.get_weights()
    moving = layer.batch_norm.moving_mean, layer.batch_norm.moving_variance
    start = [to_numpy(w).copy() for w in moving]

    def batch_moments():  # what the last training call measured: the moving update undone
        momentum = layer.batch_norm.momentum
        return [(to_numpy(w) - momentum * s) / (1 - momentum) for w, s in zip(moving, start)]

    # Sequences of 4 real frames: padded to 6 with noise, or cut to 4.
    mask = np.arange(6) < np.array([[4], [4]])
    padded = to_numpy(layer(_noisy_padding(X, mask), padding_mask=mask, training=True))
    padded_moments = batch_moments()
    layer.set_weights(initial)
    short = to_numpy(layer(X[:, :4], training=True))
    np.testing.assert_allclose(padded[:, :4], short, atol=1e-5)
    for a, b in zip(padded_moments, batch_moments()):
        np.testing.assert_allclose(a, b, atol=1e-4)

    # A batch of two lengths: noise in the padding changes neither outputs nor statistics.
    layer.set_weights(initial)
    first = to_numpy(layer(X, padding_mask=PADDING, training=True))
    first_moments = batch_moments()
    layer.set_weights(initial)
    second = to_numpy(layer(_noisy_padding(X, PADDING), padding_mask=PADDING, training=True))
    np.testing.assert_allclose(first[PADDING], second[PADDING], atol=1e-5)
    for a, b in zip(first_moments, batch_moments()):
        np.testing.assert_allclose(a, b, atol=1e-4)

    # Control: without the mask the padded noise does reach the statistics.
    layer.set_weights(initial)
    layer(_noisy_padding(X, PADDING), training=True)
    assert np.abs(first_moments[0] - batch_moments()[0]).max() > 1e-2


def test_subsampling_layer(tmp_path):
    run_layer_test(ConvolutionSubsampling, {"hidden_dim": 8, "filters": 4}, FEATURES, (2, 3, 8),
                   tmp_path=tmp_path)


def test_subsampled_length_formula():
    layer = ConvolutionSubsampling(8, filters=4)
    for frames in (7, 8, 9, 10, 11, 12, 13, 14, 17, 18):
        x = RNG.normal(size=(1, frames, 9)).astype("float32")
        expected = ((frames - 1) // 2 - 1) // 2
        assert expected == (frames - 3) // 4
        assert tuple(layer(x).shape) == (1, expected, 8), frames
        assert layer.compute_output_shape((1, frames, 9)) == (1, expected, 8)
    assert ConvolutionSubsampling(8).compute_output_shape((None, None, 80)) == (None, None, 8)


def test_subsampled_mask_for_odd_and_even_lengths():
    layer = ConvolutionSubsampling(8, filters=4)
    lengths = np.arange(20)
    mask = np.arange(19)[None] < lengths[:, None]  # (20, 19): 0 ... 19 real frames
    subsampled = to_numpy(layer.subsample_mask(mask))
    assert subsampled.shape == (20, 4) and subsampled.dtype == bool
    expected = np.arange(4)[None] < np.maximum(0, (lengths - 3) // 4)[:, None]
    np.testing.assert_array_equal(subsampled, expected)


@pytest.mark.parametrize("length", [7, 8, 10, 13])
def test_subsampled_real_frames_see_no_padding(length):
    layer = ConvolutionSubsampling(8, filters=4)
    x = np.random.default_rng(length).normal(size=(1, 17, 15)).astype("float32")
    mask = np.arange(17)[None] < length
    out_mask = to_numpy(layer.subsample_mask(mask))
    reference = to_numpy(layer(x))
    perturbed = to_numpy(layer(_noisy_padding(x, mask)))
    np.testing.assert_allclose(perturbed[out_mask], reference[out_mask], atol=1e-5)
    assert out_mask.sum() == (length - 3) // 4
    # Output frame t sees input frames 4t ... 4t + 6, no more.
    for t in range(reference.shape[1]):
        for frame, changes in ((4 * t + 6, True), (4 * t + 7, False)):
            if frame < 17:
                moved = x.copy()
                moved[:, frame] += 3.0
                assert changes != np.allclose(to_numpy(layer(moved))[:, t], reference[:, t])


def test_subsampling_passes_the_keras_mask_on():
    layer = ConvolutionSubsampling(8, filters=4)
    inputs = keras.Input((15, 9))
    pooled = keras.layers.GlobalAveragePooling1D()(layer(keras.layers.Masking(0.0)(inputs)))
    model = keras.Model(inputs, pooled)
    mask = np.arange(15)[None] < np.array([[15], [11]])
    x = np.where(mask[..., None], FEATURES, 0.0)
    out_mask = to_numpy(layer.subsample_mask(mask))
    assert out_mask.sum(1).tolist() == [3, 2]
    outputs = to_numpy(layer(x))
    np.testing.assert_allclose(model.predict(x, verbose=0)[1], outputs[1, :2].mean(0), atol=1e-5)


def test_errors():
    for cls, kwargs, match in (
        (ConformerConvolution, {"kernel_size": 0}, "kernel_size=0"),
        (ConformerConvolution, {"dropout": -0.1}, "dropout=-0.1"),
        (ConvolutionSubsampling, {"hidden_dim": 0}, "hidden_dim=0"),
        (ConvolutionSubsampling, {"hidden_dim": 8, "filters": 2.5}, "filters=2.5"),
        (ConvolutionSubsampling, {"hidden_dim": 8, "dropout": 1.0}, "dropout=1.0"),
    ):
        with pytest.raises(ValueError, match=match):
            cls(**kwargs)
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 15, 6\)"):
        ConvolutionSubsampling(8)(FEATURES[..., :6])
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 6, 9\)"):
        ConvolutionSubsampling(8)(FEATURES[:, :6])
    with pytest.raises(ValueError, match=r"inputs.shape=\(6, 8\)"):
        ConformerConvolution(3)(X[0])
