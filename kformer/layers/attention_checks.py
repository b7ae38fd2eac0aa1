"""Argument checks of `MultiHeadAttention.call`: each names the argument, the value and what was expected.

Kept apart so the layer's `call` reads as the computation it is; every
check runs on static (or eager) shapes and is skipped where a size is unknown.
"""

from kformer.layers.checks import check_rank, known_index


def check_call(layer, query, value, key, query_mask, value_mask, key_mask, attention_mask, cache,
               cache_update_index):
    """Every check of one `MultiHeadAttention.call`; a ValueError names the first argument that is wrong."""
    for name, tensor in (("query", query), ("value", value), ("key", key), ("attention_mask", attention_mask)):
        check_rank(name, None if tensor is None else tensor.shape, (3,))
    if value is None and cache is None:
        raise ValueError("`value` is required unless a precomputed `cache` is passed.")
    if cache is not None:
        check_cacheable(layer)
        check_rank("cache", cache.shape, (5,))
        if value is not None and cache_update_index is None:
            raise ValueError(
                "`cache_update_index` is required when `cache` is passed with new `value` tokens. Received: "
                "cache_update_index=None. (To reuse a precomputed cross-attention cache, call with `value=None`.)")
        if value is not None:
            _check_cache_fits(layer, cache, value, cache_update_index)
    if key is not None and value is not None and None not in (key.shape[1], value.shape[1]) \
            and key.shape[1] != value.shape[1]:
        raise ValueError("`key` and `value` must have the same length. Received: "
                         f"key.shape={tuple(key.shape)}, value.shape={tuple(value.shape)}")
    _check_shapes_agree(query, value if key is None else key, attention_mask, cache)
    _check_widths(layer, query=query, key=key if key is not None else value, value=value)
    keys = value if key is None else key
    for name, mask, length in (("query_mask", query_mask, query.shape[1]),
                               ("value_mask", value_mask, None if keys is None else keys.shape[1]),
                               ("key_mask", key_mask, None if keys is None else keys.shape[1])):
        if mask is not None and (len(mask.shape) != 2 or None not in (mask.shape[1], length)
                                 and mask.shape[1] != length):
            raise ValueError(f"`{name}` must have shape (batch, {length}). Received: {name}.shape={tuple(mask.shape)}")


def check_cacheable(layer):
    """A key/value cache holds keys and values in one tensor: their head sizes must agree."""
    if layer.key_dim != layer.value_dim:
        raise ValueError("A key/value cache needs `key_dim == value_dim`. "
                         f"Received: key_dim={layer.key_dim}, value_dim={layer.value_dim}")


def _check_cache_fits(layer, cache, value, cache_update_index):
    """The new tokens fit the cache at `cache_update_index`; batch and heads agree."""
    index = known_index("cache_update_index", cache_update_index)
    length, new = cache.shape[2], value.shape[1]
    if index is not None and isinstance(length, int) and isinstance(new, int) and index + new > length:
        raise ValueError(f"`cache_update_index` + the {new} new tokens must fit the cache length {length}. "
                         f"Received: cache_update_index={index}, cache.shape={tuple(cache.shape)}")
    heads, batch = cache.shape[3], cache.shape[0]
    if heads is not None and heads != layer.num_heads:
        raise ValueError(f"`cache` must hold {layer.num_heads} heads (axis 3). Received: cache.shape={tuple(cache.shape)}")
    if None not in (batch, value.shape[0]) and batch != value.shape[0]:
        raise ValueError("`cache` and `value` must have the same batch size. Received: "
                         f"cache.shape={tuple(cache.shape)}, value.shape={tuple(value.shape)}")


def _check_widths(layer, **tensors):
    """The last dimension of each tensor is the width its projection was built for."""
    for name, tensor in tensors.items():
        dense = getattr(layer, f"{name}_dense")
        if tensor is None or not dense.built:
            continue
        width, got = dense.kernel.shape[0], tuple(tensor.shape)
        if len(got) != 3 or got[-1] not in (None, width):
            raise ValueError(f"`{name}` must be (batch, length, {width}): this layer was built for width {width}. "
                             f"Received: {name}.shape={got}")


def _check_shapes_agree(query, key, attention_mask, cache):
    """Known batch sizes and lengths of the query, keys and `attention_mask` agree (1 broadcasts in the mask)."""
    q_shape = tuple(query.shape)
    k_shape = None if key is None else tuple(key.shape)
    if k_shape is not None and None not in (q_shape[0], k_shape[0]) and q_shape[0] != k_shape[0]:
        raise ValueError("`query` and `value`/`key` must have the same batch size. Received: "
                         f"query.shape={q_shape}, value.shape={k_shape}")
    if attention_mask is None:
        return
    k_len = cache.shape[2] if cache is not None else (None if k_shape is None else k_shape[1])
    expected = (q_shape[0], q_shape[1], k_len)
    m_shape = tuple(attention_mask.shape)
    if any(m not in (None, 1) and e is not None and m != e for m, e in zip(m_shape, expected)):
        raise ValueError("`attention_mask` must be (batch, query length, key length) = "
                         f"{expected} (or 1 to broadcast). Received: attention_mask.shape={m_shape}")
