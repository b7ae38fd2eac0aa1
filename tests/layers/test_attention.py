import keras
import numpy as np
import pytest
from keras import ops

from kformer.layers import MultiHeadAttention, attention, masks
from tests.helpers import JIT, run_layer_test, to_numpy

RNG = np.random.default_rng(0)
QUERY = RNG.normal(size=(2, 6, 8)).astype("float32")
SOURCE = RNG.normal(size=(2, 4, 8)).astype("float32")
PADDING = np.array([[True] * 6, [True] * 4 + [False] * 2])


def test_layer_self_attention_with_padding(tmp_path):
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 2, "key_dim": 4},
        {"query": QUERY, "value": QUERY},
        (2, 6, 8),
        padding_mask=PADDING,
        padding_mask_arg="value_mask",
        tmp_path=tmp_path,
    )


def test_layer_causal(tmp_path):
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 2, "key_dim": 4, "output_dim": 5},
        {"query": QUERY, "value": QUERY},
        (2, 6, 5),
        call_kwargs={"use_causal_mask": True},
        causal=True,
        tmp_path=tmp_path,
    )


def _pair(**kwargs):
    ours = MultiHeadAttention(2, 4, **kwargs)
    ref = keras.layers.MultiHeadAttention(2, 4, **kwargs)
    ours(QUERY, SOURCE)
    ref(QUERY, SOURCE)
    assert [w.shape for w in ours.get_weights()] == [w.shape for w in ref.get_weights()]
    ours.set_weights(ref.get_weights())
    return ours, ref


@pytest.mark.parametrize(
    "case", ["plain", "padding", "causal", "explicit", "all", "cross", "cross_padding"]
)
def test_equals_keras_multi_head_attention(case):
    ours, ref = _pair()
    value = SOURCE if case.startswith("cross") else QUERY
    kwargs = {}
    if case in ("padding", "all"):
        kwargs.update(query_mask=PADDING, value_mask=PADDING)
    if case == "cross_padding":
        kwargs.update(value_mask=np.array([[True] * 4, [True, True, False, False]]))
    if case in ("causal", "all"):
        kwargs.update(use_causal_mask=True)
    if case in ("explicit", "all"):
        kwargs.update(attention_mask=RNG.random((2, 6, 6)) > 0.3)
    expected = to_numpy(ref(QUERY, value, **kwargs))
    got = to_numpy(ours(QUERY, value, **kwargs))
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_scores_equal_keras_and_fused_equals_explicit():
    ours, ref = _pair()
    kwargs = dict(query_mask=PADDING, value_mask=PADDING, use_causal_mask=True)
    out, scores = ours(QUERY, QUERY, return_attention_scores=True, **kwargs)
    ref_out, ref_scores = ref(QUERY, QUERY, return_attention_scores=True, **kwargs)
    np.testing.assert_allclose(to_numpy(scores), to_numpy(ref_scores), atol=1e-5)
    np.testing.assert_allclose(to_numpy(out), to_numpy(ref_out), atol=1e-5)
    fused = ours(QUERY, QUERY, **kwargs)
    np.testing.assert_allclose(to_numpy(fused), to_numpy(out), atol=1e-5)


def test_fully_masked_rows_are_finite_on_every_backend():
    layer = MultiHeadAttention(2, 4)
    empty = np.zeros((2, 6), bool)
    out = layer(QUERY, QUERY, value_mask=empty, use_causal_mask=True)
    assert np.all(np.isfinite(to_numpy(out)))


def test_incoming_keras_masks_are_used():
    ids = np.array([[3, 4, 5, 0, 0], [1, 2, 0, 0, 0]])
    embed = keras.layers.Embedding(10, 8, mask_zero=True)
    layer = MultiHeadAttention(2, 4)
    x = embed(ids)
    implicit = layer(x, x)
    explicit = layer(x, x, query_mask=ids != 0, value_mask=ids != 0)
    np.testing.assert_allclose(to_numpy(implicit), to_numpy(explicit), atol=1e-6)


def test_cached_decoding_equals_full_causal_pass():
    layer = MultiHeadAttention(2, 4)
    full = to_numpy(layer(QUERY, QUERY, use_causal_mask=True))
    cache = ops.zeros((2, 2, 6, 2, 4))
    steps = []
    for i in range(6):
        token = QUERY[:, i : i + 1]
        out, cache = layer(token, token, cache=cache, cache_update_index=i, use_causal_mask=True)
        steps.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_prefill_then_step_with_cache():
    layer = MultiHeadAttention(2, 4)
    full = to_numpy(layer(QUERY, QUERY, use_causal_mask=True))
    cache = ops.zeros((2, 2, 6, 2, 4))
    prefix, cache = layer(QUERY[:, :4], QUERY[:, :4], cache=cache, cache_update_index=0,
                          use_causal_mask=True)
    step, cache = layer(QUERY[:, 4:5], QUERY[:, 4:5], cache=cache, cache_update_index=4,
                        use_causal_mask=True)
    np.testing.assert_allclose(to_numpy(prefix), full[:, :4], atol=1e-5)
    np.testing.assert_allclose(to_numpy(step), full[:, 4:5], atol=1e-5)


def test_cross_attention_cache_is_reused():
    layer = MultiHeadAttention(2, 4)
    source_mask = np.array([[True] * 4, [True, True, True, False]])
    direct = layer(QUERY, SOURCE, value_mask=source_mask)
    cache = layer.compute_cache(SOURCE)
    reused, same_cache = layer(QUERY, None, value_mask=source_mask, cache=cache)
    np.testing.assert_allclose(to_numpy(reused), to_numpy(direct), atol=1e-5)
    np.testing.assert_allclose(to_numpy(same_cache), to_numpy(cache))


def test_compiled_cached_step():
    layer = MultiHeadAttention(2, 4)
    token = keras.Input((1, 8), batch_size=2)
    cache = keras.Input((2, 6, 2, 4), batch_size=2)
    index = keras.Input((), batch_size=2, dtype="int32")
    out, new_cache = layer(token, token, cache=cache, cache_update_index=index[0],
                           use_causal_mask=True)
    model = keras.Model([token, cache, index], [out, new_cache])
    model.compile(jit_compile=JIT)
    out, new_cache = model.predict_on_batch(
        [QUERY[:, :1], np.zeros((2, 2, 6, 2, 4), "float32"), np.zeros(2, "int32")]
    )
    assert out.shape == (2, 1, 8) and new_cache.shape == (2, 2, 6, 2, 4)
    assert np.abs(new_cache[:, :, 0]).sum() > 0 and np.abs(new_cache[:, :, 1:]).sum() == 0


@pytest.mark.parametrize(
    "kwargs, call, match",
    [
        ({"num_heads": 0, "key_dim": 4}, None, "num_heads=0"),
        ({"num_heads": 2, "key_dim": 4, "dropout": 1.5}, None, "dropout=1.5"),
        ({"num_heads": 2, "key_dim": 4}, {"query": QUERY[0], "value": QUERY[0]}, "query.shape"),
        ({"num_heads": 2, "key_dim": 4}, {"query": QUERY, "value": QUERY,
                                          "attention_mask": np.ones((2, 6, 5), bool)}, "attention_mask"),
        ({"num_heads": 2, "key_dim": 4}, {"query": QUERY, "value": QUERY,
                                          "value_mask": np.ones((2, 5), bool)}, "value_mask"),
        ({"num_heads": 2, "key_dim": 4}, {"query": QUERY, "value": QUERY,
                                          "cache": np.zeros((2, 2, 6, 2, 4), "float32")},
         "cache_update_index"),
        ({"num_heads": 2, "key_dim": 4}, {"query": QUERY, "value": None}, "value"),
        ({"num_heads": 2, "key_dim": 4}, {"query": QUERY, "value": QUERY, "key": SOURCE}, "key.shape"),
        ({"num_heads": 2, "key_dim": 4, "value_dim": 3},
         {"query": QUERY, "value": QUERY, "cache": np.zeros((2, 2, 6, 2, 4), "float32"),
          "cache_update_index": 0}, "key_dim"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, call, match):
    with pytest.raises(ValueError, match=match):
        layer = MultiHeadAttention(**kwargs)
        if call is not None:
            layer(**call)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fast_attention_gives_the_explicit_numbers(monkeypatch, dtype):
    """`kernels.attention.fast_attention` (no scores asked: fused, or per head on a JAX CPU) equals the
    explicit softmax path (scores asked), with padding, an attention mask, causality, one query (with
    padded keys too: `one_query_attention` on a TensorFlow CPU) and one key."""
    layer = MultiHeadAttention(num_heads=2, key_dim=4, dtype=dtype)
    calls, fast = [], attention.fast_attention
    monkeypatch.setattr(attention, "fast_attention", lambda *a: calls.append(fast(*a)) or calls[-1])
    kwargs = dict(value_mask=PADDING, attention_mask=RNG.random((2, 6, 6)) > 0.3, use_causal_mask=True)
    cases = [((QUERY, QUERY), kwargs), ((QUERY[:, 2:3], QUERY), {}), ((QUERY[:, 2:3], QUERY[:, :1]), {}),
             ((QUERY[:, 2:3], QUERY), {"value_mask": PADDING})]  # one query (a decoding step): padded keys
    for args, kw in cases:
        got = layer(*args, **kw)
        reference = layer(*args, return_attention_scores=True, **kw)[0]  # the explicit path
        assert keras.backend.standardize_dtype(got.dtype) == dtype
        np.testing.assert_allclose(to_numpy(ops.cast(got, "float32")), to_numpy(ops.cast(reference, "float32")),
                                   atol=1e-5 if dtype == "float32" else 3e-2)
    assert len(calls) == 4 and all(c is not None for c in calls)


def test_long_sequences_attend_in_query_blocks_with_the_explicit_numbers():
    """Past `QUERY_BLOCK` queries, `per_head_attention` (a JAX CPU's path) attends a block of queries at a time:
    the explicit path's numbers, with padded keys and a mask."""
    from kformer.kernels import attention as kernel

    length = 2 * kernel.QUERY_BLOCK + 9  # three blocks, the last short
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, length, 8)).astype("float32")
    padding = np.ones((2, length), bool)
    padding[1, -40:] = False
    mask = rng.random((2, length, length)) > 0.2
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    got = layer(x, x, value_mask=padding, attention_mask=mask)
    reference = layer(x, x, value_mask=padding, attention_mask=mask, return_attention_scores=True)[0]
    np.testing.assert_allclose(to_numpy(got), to_numpy(reference), atol=1e-5)
    q = ops.convert_to_tensor(x.reshape(2, length, 2, 4))
    blocks = kernel.per_head_attention(q, q, q, ops.convert_to_tensor(mask), 0.5, None, False)
    whole = kernel.per_head_attention(q[:, :kernel.QUERY_BLOCK], q, q,
                                         ops.convert_to_tensor(mask[:, :kernel.QUERY_BLOCK]), 0.5, None, False)
    np.testing.assert_allclose(to_numpy(blocks)[:, :kernel.QUERY_BLOCK], to_numpy(whole), atol=1e-6)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="a torch CPU's bfloat16 attention backward")
def test_bfloat16_training_on_a_torch_cpu_takes_the_explicit_path():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, dtype="mixed_bfloat16")
    q = ops.cast(ops.convert_to_tensor(QUERY.reshape(2, 6, 2, 4)), "bfloat16")
    no_dropout = keras.layers.Dropout(0.0)
    assert attention.fast_attention(q, q, q, None, 0.5, True, no_dropout) is None  # training: explicit
    assert attention.fast_attention(q, q, q, None, 0.5, False, no_dropout) is not None  # inference: fused
    inference = layer(QUERY, QUERY, value_mask=PADDING, training=False)
    training = layer(QUERY, QUERY, value_mask=PADDING, training=True)
    assert {keras.backend.standardize_dtype(t.dtype) for t in (training, inference)} == {"bfloat16"}
    np.testing.assert_allclose(to_numpy(ops.cast(training, "float32")), to_numpy(ops.cast(inference, "float32")),
                               atol=3e-2)


def test_attention_dropout_drops_probabilities_in_training_only():
    """Explicit path (scores asked) or fast path (JAX CPU: per head): dropout only when training."""
    layer = MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.5)
    inference = to_numpy(layer(QUERY, QUERY, training=False))
    _, scores = layer(QUERY, QUERY, return_attention_scores=True, training=False)
    np.testing.assert_allclose(inference, to_numpy(layer(QUERY, QUERY)), atol=1e-6)
    trained = [to_numpy(layer(QUERY, QUERY, training=True)) for _ in range(2)]
    assert not np.allclose(trained[0], inference, atol=1e-3)
    assert not np.allclose(trained[0], trained[1], atol=1e-3)  # a new draw each call
    np.testing.assert_allclose(to_numpy(ops.sum(scores, axis=-1)), 1.0, atol=1e-5)


def test_call_reads_in_one_screen():
    """The layer's `call` is the paper's computation, readable in one screen (issue 56)."""
    import inspect

    assert len(inspect.getsource(MultiHeadAttention.call).splitlines()) <= 40
    assert len(inspect.getsource(attention).splitlines()) <= 250
