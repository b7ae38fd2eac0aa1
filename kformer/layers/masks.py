"""Pure mask functions. Convention: True (1) means "may attend".

Shapes: a padding mask is `(batch, seq)`, an attention mask `(batch, q_len, k_len)`.
"""

from keras import ops


def causal_mask(query_length, key_length, start_index=0):
    """Lower-triangular mask `(1, query_length, key_length)`.

    Query `i` sits at absolute position `start_index + i` and may attend keys
    `j <= start_index + i` (decoding with a cache continues from `start_index`).
    """
    rows = ops.expand_dims(ops.arange(query_length, dtype="int32"), 1) + ops.cast(
        start_index, "int32"
    )
    cols = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    return ops.expand_dims(ops.greater_equal(rows, cols), 0)


def merge_masks(query_mask=None, key_mask=None, attention_mask=None, causal=None):
    """AND together every mask given; returns `(batch, q_len, k_len)` bool or None.

    Args:
        query_mask: `(batch, q_len)` padding mask of the queries, or None.
        key_mask: `(batch, k_len)` padding mask of the keys, or None.
        attention_mask: explicit `(batch, q_len, k_len)` mask, or None.
        causal: `(1, q_len, k_len)` mask from `causal_mask`, or None.
    """
    merged = None
    for mask in (
        None if query_mask is None else ops.expand_dims(query_mask, -1),
        None if key_mask is None else ops.expand_dims(key_mask, -2),
        attention_mask,
        causal,
    ):
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def allow_empty_rows(attention_mask):
    """Open every fully-masked row, so softmax never sees only -inf.

    Queries with no visible key (a padded query, an all-padding example) then
    attend uniformly, exactly as `keras.layers.MultiHeadAttention` does, and no
    backend returns NaN for them.
    """
    has_key = ops.any(attention_mask, axis=-1, keepdims=True)
    return ops.logical_or(attention_mask, ops.logical_not(has_key))
