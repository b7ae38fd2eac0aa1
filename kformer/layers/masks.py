"""Pure mask functions. Convention: True (1) means "may attend".

Shapes: a padding mask is `(batch, seq)`, an attention mask `(batch, q_len, k_len)`.
"""

from keras import ops

MASKED_SCORE = -1e9  # what a masked key's attention score becomes before a softmax


def causal_mask(query_length, key_length, start_index=0, window=None):
    """Lower-triangular mask `(1, query_length, key_length)`, optionally a sliding window.

    Query `i` sits at absolute position `start_index + i` and may attend keys
    `j <= start_index + i` (decoding with a cache continues from `start_index`).
    With a `window`, only the last `window` of those: `start_index + i - window < j`
    (GPT-Neo's local attention; a cached step sees the last `window` positions).

    Args:
        query_length: int or scalar tensor. Number of queries.
        key_length: int or scalar tensor. Number of keys.
        start_index: int or scalar tensor. Absolute position of query 0. Defaults to `0`.
        window: int or None. Keys each query may attend, itself included. Defaults
            to `None` (every earlier key).

    Returns:
        bool `(1, query_length, key_length)`.

    Example:

    >>> import numpy as np
    >>> np.asarray(causal_mask(3, 3)).astype(int)[0].tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    >>> np.asarray(causal_mask(3, 3, window=2)).astype(int)[0].tolist()
    [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    """
    # Indexing and operators, not `ops.expand_dims`/`ops.greater_equal`: a cached decoding step
    # builds this mask in every layer, and each `keras.ops` call costs 5-25 us in eager torch.
    start = start_index if isinstance(start_index, int) else ops.cast(start_index, "int32")
    rows = ops.arange(query_length, dtype="int32")[:, None] + start
    columns = ops.arange(key_length, dtype="int32")[None, :]
    if window is None:
        return (rows >= columns)[None]
    return ops.logical_and(rows >= columns, rows - columns < window)[None]


def merge_masks(query_mask=None, key_mask=None, attention_mask=None, causal=None):
    """AND together every mask given; returns `(batch, q_len, k_len)` bool or None.

    Args:
        query_mask: `(batch, q_len)` padding mask of the queries, or None.
        key_mask: `(batch, k_len)` padding mask of the keys, or None.
        attention_mask: explicit `(batch, q_len, k_len)` mask, or None.
        causal: `(1, q_len, k_len)` mask from `causal_mask`, or None.

    Example:

    >>> import numpy as np
    >>> merged = merge_masks(key_mask=np.array([[True, True, False]]), causal=causal_mask(3, 3))
    >>> np.asarray(merged).astype(int)[0].tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
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

    Queries with no visible key (a padded query, an all-padding example) may
    then attend every key (uniformly, as in `keras.layers.MultiHeadAttention`),
    and no backend returns NaN for them.

    Args:
        attention_mask: bool `(batch, q_len, k_len)`.

    Returns:
        bool `(batch, q_len, k_len)`: rows with no True become all True.

    Example:

    >>> import numpy as np
    >>> np.asarray(allow_empty_rows(np.array([[[True, False], [False, False]]]))).astype(int).tolist()
    [[[1, 0], [1, 1]]]
    """
    has_key = ops.any(attention_mask, axis=-1, keepdims=True)
    return ops.logical_or(attention_mask, ops.logical_not(has_key))


def key_padding_mask(key_mask):
    """A key padding mask as an attention mask for any query, made once and reused.

    What `MultiHeadAttention.cached_call` builds from a `(batch, k_len)`
    `key_mask` on every call, so a decoding loop can build it once outside
    the loop and pass this as `key_mask` each step.

    Args:
        key_mask: `(batch, k_len)`, True (or nonzero) for keys that may be attended.

    Returns:
        bool `(batch, 1, k_len)`: all-padding rows opened (`allow_empty_rows`).

    Example:

    >>> import numpy as np
    >>> np.asarray(key_padding_mask(np.array([[1, 1, 0], [0, 0, 0]]))).astype(int).tolist()
    [[[1, 1, 0]], [[1, 1, 1]]]
    """
    return allow_empty_rows(ops.cast(key_mask, "bool")[:, None, :])


def mask_scores(scores, mask):
    """Attention scores in float32, those outside `mask` set to -1e9 (before a softmax).

    Args:
        scores: `(..., q_len, k_len)`, any float dtype.
        mask: bool, broadcast to `scores`; True = may attend. None keeps every score.

    Returns:
        float32, the shape of `scores`.

    Example:

    >>> import numpy as np
    >>> np.asarray(mask_scores(np.array([[1.0, 2.0]], "float16"), np.array([[True, False]]))).tolist()
    [[1.0, -1000000000.0]]
    """
    scores = ops.cast(scores, "float32")
    return scores if mask is None else ops.where(mask, scores, ops.cast(MASKED_SCORE, "float32"))
