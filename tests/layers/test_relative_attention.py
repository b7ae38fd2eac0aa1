import keras
import numpy as np
import pytest

from kformer.layers import RelativeMultiHeadAttention
from kformer.layers.relative_attention import relative_shift
from tests.helpers import run_layer_test, to_numpy

# Not seed 0: run_layer_test perturbs padding with default_rng(0) noise, which would
# then be 3 * X, invisible after a LayerNorm.
RNG = np.random.default_rng(1)
X = RNG.normal(size=(2, 6, 8)).astype("float32")
PADDING = np.array([[True] * 6, [True] * 4 + [False] * 2])


def test_layer(tmp_path):
    run_layer_test(
        RelativeMultiHeadAttention, {"num_heads": 2, "key_dim": 4},
        X, (2, 6, 8), padding_mask=PADDING, tmp_path=tmp_path,
    )


@pytest.mark.parametrize("length", [1, 2, 5])
def test_relative_shift_picks_distance_i_minus_j(length):
    scores = RNG.normal(size=(2, 3, length, 2 * length - 1)).astype("float32")
    shifted = to_numpy(relative_shift(scores))
    assert shifted.shape == (2, 3, length, length)
    for i in range(length):
        for j in range(length):  # column r holds distance length - 1 - r
            r = length - 1 - (i - j)
            np.testing.assert_array_equal(shifted[:, :, i, j], scores[:, :, i, r])


def _sinusoid(distance, dim):
    two_i = np.arange(dim) - np.arange(dim) % 2
    angles = distance / 10000.0 ** (two_i / dim)
    return np.where(np.arange(dim) % 2 == 0, np.sin(angles), np.cos(angles))


def _layer_with_random_weights():
    layer = RelativeMultiHeadAttention(2, 4)
    layer(X)
    layer.set_weights([RNG.normal(size=w.shape).astype("float32") * 0.5 for w in layer.weights])
    return layer


def _numpy_attention(layer, x, padding_mask):
    """Direct per-(i, j) evaluation of (q_i + u).k_j + (q_i + v).W_r R_{i-j}, then softmax."""
    w = lambda sublayer: [to_numpy(v) for v in sublayer.weights]  # noqa: E731
    (wq, bq), (wk, bk), (wv, bv) = w(layer.query_dense), w(layer.key_dense), w(layer.value_dense)
    (wr,), (wo, bo) = w(layer.position_dense), w(layer.output_dense)
    u, v = to_numpy(layer.content_bias), to_numpy(layer.position_bias)
    q = np.einsum("bsc,chd->bshd", x, wq) + bq
    k = np.einsum("bsc,chd->bshd", x, wk) + bk
    val = np.einsum("bsc,chd->bshd", x, wv) + bv
    length, dim = x.shape[1], x.shape[2]
    scores = np.zeros((x.shape[0], 2, length, length))
    for i in range(length):
        for j in range(length):
            r = np.einsum("c,chd->hd", _sinusoid(i - j, dim), wr)  # W_r R_{i-j}
            scores[:, :, i, j] = ((q[:, i] + u) * k[:, j]).sum(-1) + ((q[:, i] + v) * r).sum(-1)
    scores = np.where(padding_mask[:, None, None, :], scores / 2.0, -np.inf)  # sqrt(key_dim) = 2
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhij,bjhd,hdc->bic", probs, val, wo) + bo


def test_equals_direct_numpy_computation():
    layer = _layer_with_random_weights()
    assert np.abs(to_numpy(layer.position_bias)).max() > 0.1
    out = to_numpy(layer(X, padding_mask=PADDING))
    np.testing.assert_allclose(out, _numpy_attention(layer, X, PADDING), atol=1e-4)


def test_without_biases_and_positions_is_plain_softmax_attention():
    layer = _layer_with_random_weights()
    for weight in (layer.content_bias, layer.position_bias, layer.position_dense.kernel):
        weight.assign(np.zeros(weight.shape, "float32"))
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (
        [to_numpy(w) for w in d.weights]
        for d in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
    )
    q, k, v = (np.einsum("bsc,chd->bhsd", X, w) + b[:, None] for w, b in
               ((wq, bq), (wk, bk), (wv, bv)))
    scores = np.where(PADDING[:, None, None], q @ k.transpose(0, 1, 3, 2) / 2.0, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    expected = np.einsum("bhij,bhjd,hdc->bic", probs, v, wo) + bo
    np.testing.assert_allclose(to_numpy(layer(X, padding_mask=PADDING)), expected, atol=1e-4)


def test_position_term_depends_only_on_distance():
    layer = _layer_with_random_weights()
    q = np.broadcast_to(RNG.normal(size=(1, 1, 2, 4)), (1, 7, 2, 4)).astype("float32")
    logits = to_numpy(layer._logits(q, np.zeros_like(q), 8))[0]  # content term is 0
    for i in range(6):
        np.testing.assert_allclose(logits[:, i + 1, 1:], logits[:, i, :-1], atol=1e-5)
    assert np.std(logits[:, 3]) > 1e-2  # ... and does depend on it


def test_padding_and_fully_masked_rows():
    layer = _layer_with_random_weights()
    mask = np.array([[True] * 4 + [False] * 2, [False] * 6])
    out, probs = layer(X, padding_mask=mask, return_attention_scores=True)
    probs = to_numpy(probs)
    assert probs.shape == (2, 2, 6, 6)
    np.testing.assert_allclose(probs[0, :, :, 4:], 0.0)  # padded keys never attended
    assert np.all(np.isfinite(to_numpy(out)))  # no real key: every key, as without a mask
    np.testing.assert_allclose(to_numpy(out)[1], to_numpy(layer(X))[1], atol=1e-5)


def test_attention_dropout_only_while_training():
    layer = RelativeMultiHeadAttention(2, 4, dropout=0.5)
    inference = to_numpy(layer(X, padding_mask=PADDING))
    np.testing.assert_allclose(to_numpy(layer(X, padding_mask=PADDING, training=False)), inference)
    dropped = to_numpy(layer(X, padding_mask=PADDING, training=True))
    assert np.all(np.isfinite(dropped)) and not np.allclose(dropped, inference)


def test_unknown_length_in_a_functional_model():
    inputs = keras.Input((None, 8))
    model = keras.Model(inputs, RelativeMultiHeadAttention(2, 4)(inputs))
    for length in (3, 7):
        x = RNG.normal(size=(2, length, 8)).astype("float32")
        np.testing.assert_allclose(model.predict(x, verbose=0), to_numpy(model(x)), atol=1e-5)


def test_keras_mask_is_used_and_passed_on():
    layer = _layer_with_random_weights()
    inputs = keras.Input((6, 8))
    masked = keras.layers.Masking(0.0)(inputs)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling1D()(layer(masked)))
    x = np.where(PADDING[..., None], X, 0.0)
    explicit = to_numpy(layer(x, padding_mask=PADDING))
    np.testing.assert_allclose(model.predict(x, verbose=0)[1], explicit[1, :4].mean(0), atol=1e-5)


def test_errors():
    for kwargs, match in (({"num_heads": 0}, "num_heads=0"), ({"key_dim": -1}, "key_dim=-1"),
                          ({"dropout": 1.0}, "dropout=1.0"),
                          ({"max_wavelength": 0}, "max_wavelength=0")):
        with pytest.raises(ValueError, match=match):
            RelativeMultiHeadAttention(**{"num_heads": 2, "key_dim": 4, **kwargs})
    with pytest.raises(ValueError, match=r"inputs.shape=\(6, 8\)"):
        RelativeMultiHeadAttention(2, 4)(X[0])
