"""Sliding-window (local) causal attention, unscaled scores and projections without query/key/value
biases (GPT-Neo): the window with a key/value cache equals it without, step by step."""

import keras
import numpy as np
import pytest
from keras import ops

from kformer.layers import MultiHeadAttention, masks
from tests.helpers import run_layer_test, to_numpy

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 9, 8)).astype("float32")
WINDOW = 3


def _layer(**kwargs):
    layer = MultiHeadAttention(2, 4, **kwargs)
    layer(X, X, use_causal_mask=True)
    return layer


def _softmax_reference(layer, x, allowed, scale):
    """softmax(Q K^T * scale + mask) V per head, in NumPy from the layer's own weights."""
    weights = {w.path.split("/")[-2] + "/" + w.path.split("/")[-1]: np.asarray(to_numpy(w)) for w in layer.weights}
    project = {name: np.einsum("bsc,cde->bsde", x, weights[f"{name}/kernel"]) +
               weights.get(f"{name}/bias", 0.0) for name in ("query", "key", "value")}
    scores = np.einsum("bqhd,bkhd->bhqk", project["query"], project["key"]) * scale
    scores = np.where(allowed[None, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    heads = np.einsum("bhqk,bkhd->bqhd", probs, project["value"])
    return np.einsum("bqhd,hde->bqe", heads, weights["attention_output/kernel"]) + weights["attention_output/bias"]


def test_causal_mask_window():
    got = np.asarray(to_numpy(masks.causal_mask(4, 6, start_index=2, window=2)))[0].astype(int)
    rows = np.arange(4)[:, None] + 2
    expected = (np.arange(6)[None] <= rows) & (np.arange(6)[None] > rows - 2)
    np.testing.assert_array_equal(got, expected.astype(int))


def test_layer_local_unscaled_without_qkv_bias(tmp_path):
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 2, "key_dim": 4, "attention_window": WINDOW, "attention_scale": 1.0, "use_qkv_bias": False},
        {"query": X, "value": X},
        (2, 9, 8),
        call_kwargs={"use_causal_mask": True},
        causal=True,
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("scale", [None, 1.0])
def test_window_equals_numpy_reference(scale):
    layer = _layer(attention_window=WINDOW, attention_scale=scale, use_qkv_bias=False)
    assert [w.path.split("/")[-2:] for w in layer.weights if "bias" in w.path] == [["attention_output", "bias"]]
    rows, columns = np.arange(9)[:, None], np.arange(9)[None]
    allowed = (columns <= rows) & (columns > rows - WINDOW)
    expected = _softmax_reference(layer, X, allowed, 0.5 if scale is None else scale)
    out, scores = layer(X, X, use_causal_mask=True, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), expected, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(to_numpy(scores))[0, 0] > 0, allowed)
    np.testing.assert_allclose(to_numpy(layer(X, X, use_causal_mask=True)), expected, atol=1e-4)  # fused path


def test_cached_steps_equal_the_windowed_pass():
    """A prefill of 4 tokens, then one token a step: each step attends the last `WINDOW` cached positions."""
    layer = _layer(attention_window=WINDOW)
    full = to_numpy(layer(X, X, use_causal_mask=True))
    cache = ops.zeros((2, 2, 9, 2, 4))
    prefix, cache = layer(X[:, :4], X[:, :4], cache=cache, cache_update_index=0, use_causal_mask=True)
    np.testing.assert_allclose(to_numpy(prefix), full[:, :4], atol=1e-5)
    for i in range(4, 9):
        step, cache = layer(X[:, i:i + 1], X[:, i:i + 1], cache=cache, cache_update_index=i, use_causal_mask=True)
        np.testing.assert_allclose(to_numpy(step), full[:, i:i + 1], atol=1e-5, err_msg=f"step {i}")
    far = np.array(X[:, 8:9])  # a step's output ignores keys before its window: change them, nothing moves
    changed = ops.concatenate([ops.zeros_like(cache[:, :, :9 - WINDOW]), cache[:, :, 9 - WINDOW:]], axis=2)
    again, _ = layer(far, far, cache=changed, cache_update_index=8, use_causal_mask=True)
    np.testing.assert_allclose(to_numpy(again), full[:, 8:9], atol=1e-5)


def test_compiled_cached_step_with_a_window():
    layer = _layer(attention_window=WINDOW)
    full = to_numpy(layer(X, X, use_causal_mask=True))
    _, cache = layer(X[:, :8], X[:, :8], cache=ops.zeros((2, 2, 9, 2, 4)), cache_update_index=0,
                     use_causal_mask=True)
    token, cache_in = keras.Input((1, 8), batch_size=2), keras.Input((2, 9, 2, 4), batch_size=2)
    index = keras.Input((), batch_size=2, dtype="int32")
    out, _ = layer(token, token, cache=cache_in, cache_update_index=index[0], use_causal_mask=True)
    model = keras.Model([token, cache_in, index], out)
    got = model.predict_on_batch([X[:, 8:9], to_numpy(cache), np.full(2, 8, "int32")])
    np.testing.assert_allclose(got, full[:, 8:9], atol=1e-5)


@pytest.mark.parametrize("window", [9, 20])
def test_window_at_least_the_sequence_is_plain_causal(window):
    local, plain = _layer(attention_window=window), _layer()
    plain.set_weights(local.get_weights())
    np.testing.assert_allclose(to_numpy(local(X, X, use_causal_mask=True)),
                               to_numpy(plain(X, X, use_causal_mask=True)), atol=1e-6)
    cache_local = cache_plain = ops.zeros((2, 2, 9, 2, 4))
    for i in range(9):
        token = X[:, i:i + 1]
        a, cache_local = local(token, token, cache=cache_local, cache_update_index=i, use_causal_mask=True)
        b, cache_plain = plain(token, token, cache=cache_plain, cache_update_index=i, use_causal_mask=True)
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-6)


@pytest.mark.parametrize("kwargs, call, match", [
    ({"attention_window": 0}, None, "attention_window=0"),
    ({"attention_window": 2.5}, None, "attention_window=2.5"),
    ({"attention_scale": -1.0}, None, "attention_scale=-1.0"),
    ({"attention_window": 2}, {}, "use_causal_mask"),
])
def test_bad_arguments_are_named(kwargs, call, match):
    with pytest.raises(ValueError, match=match):
        layer = MultiHeadAttention(2, 4, **kwargs)
        if call is not None:
            layer(X, X, **call)


def test_use_bias_still_covers_every_projection():
    names = lambda layer: sorted(w.path.split("/")[-2] for w in layer.weights if "bias" in w.path)  # noqa: E731
    assert names(_layer(use_bias=False)) == []
    assert names(_layer(use_bias=False, use_qkv_bias=True)) == ["key", "query", "value"]
    assert names(_layer()) == ["attention_output", "key", "query", "value"]
    config = _layer(use_qkv_bias=False, attention_window=4, attention_scale=1.0).get_config()
    assert (config["use_qkv_bias"], config["attention_window"], config["attention_scale"]) == (False, 4, 1.0)
