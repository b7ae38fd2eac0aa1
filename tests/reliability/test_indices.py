"""Position and cache indices are checked whatever their type, on every backend."""

import keras
import numpy as np
import pytest

from kformer.layers import (MultiHeadAttention, PositionEmbedding, RotaryEmbedding, SinusoidalPositionEncoding,
                            TokenAndPositionEmbedding)

X = np.zeros((2, 5, 8), "float32")


@pytest.mark.parametrize("index, message", [
    (np.int64(-1), "`start_index` must be >= 0. Received: start_index=-1"),
    (-2, "must be >= 0"),
    (2.7, "`start_index` must be an int or an integer scalar tensor"),
    (np.float32(2.0), "`start_index` must be an integer"),
    ("3", "must be an int"),
    (True, "must be an int"),
])
def test_bad_start_indices_are_refused_by_every_position_layer(index, message):
    for layer in (PositionEmbedding(16), SinusoidalPositionEncoding(), RotaryEmbedding()):
        with pytest.raises(ValueError, match=message):
            layer(X, start_index=index)
    with pytest.raises(ValueError, match=message):
        TokenAndPositionEmbedding(20, 16, 8)(np.ones((2, 5), "int32"), start_index=index)


def test_tensor_start_indices_are_range_checked_like_ints():
    layer = PositionEmbedding(16)
    for index in (12, np.int64(12), keras.ops.convert_to_tensor(12, "int32")):
        with pytest.raises(ValueError, match="Positions up to 17 requested"):
            layer(X, start_index=index)
    ok = layer(X, start_index=keras.ops.convert_to_tensor(3, "int32"))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ok)[0], keras.ops.convert_to_numpy(
        layer.position_embeddings)[3:8], rtol=1e-6)
    with pytest.raises(ValueError, match="must be a scalar"):
        layer(X, start_index=keras.ops.convert_to_tensor([1, 2], "int32"))


def test_cache_update_index_must_fit_the_cache():
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    cache = np.zeros((2, 2, 6, 2, 4), "float32")
    step = np.ones((2, 1, 8), "float32")
    attention(step, step, cache=cache, cache_update_index=5)  # the last slot
    for index, message in ((6, "must fit the cache length 6. Received: cache_update_index=6"),
                           (keras.ops.convert_to_tensor(6, "int32"), "must fit the cache length 6"),
                           (np.int64(-1), "`cache_update_index` must be >= 0"),
                           (1.0, "`cache_update_index` must be an int")):
        with pytest.raises(ValueError, match=message):
            attention(step, step, cache=cache, cache_update_index=index)
    with pytest.raises(ValueError, match="`cache` must hold 2 heads"):
        attention(step, step, cache=np.zeros((2, 2, 6, 3, 4), "float32"), cache_update_index=0)
    with pytest.raises(ValueError, match="same batch size"):
        attention(step, step, cache=np.zeros((3, 2, 6, 2, 4), "float32"), cache_update_index=0)
