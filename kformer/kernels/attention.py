"""Faster computations of `MultiHeadAttention`'s explicit softmax attention, each giving its numbers."""

import functools

import keras
from keras import ops



def fast_attention(q, k, v, mask, scale, training, dropout):
    """softmax(Q K^T * scale) V as the layer's explicit path computes it, faster; None where that path runs.

    - JAX on a CPU: `per_head_attention` (XLA:CPU ran it faster than one
      fused op; it also serves float16, whose fused attention XLA:CPU does
      not compile), with attention dropout in training.
    - TensorFlow on a CPU, one query (a decoding step), without attention
      dropout in training: `one_query_attention` (XLA:CPU copied the cached
      keys and values into the layouts of the fused op's two matrix
      products at every step).
    - elsewhere, without attention dropout in training and with equal key
      and value sizes: `ops.dot_product_attention` (flash attention on GPUs),
      except bfloat16 training on a torch CPU (its fused backward ran a
      `vit_tiny` training step slower: docs/decisions.md, "Why bfloat16 is off by default").

    Args:
        q, k, v: `(batch, len, heads, dim)` queries, keys and values.
        mask: bool `(batch, q_len, k_len)` (True = may attend; no row all False) or None.
        scale: float. Multiplies the scores (`1 / sqrt(key_dim)`).
        training: bool or None.
        dropout: the layer's `keras.layers.Dropout` on the attention probabilities.

    Returns:
        `(batch, q_len, heads, dim)`, or None.

    Example:

    >>> import numpy as np
    >>> q = np.ones((1, 2, 2, 4), "float32")
    >>> tuple(fast_attention(q, q, q, None, 0.5, False, keras.layers.Dropout(0.0)).shape)
    (1, 2, 2, 4)
    """
    backend, dtype = keras.backend.backend(), keras.backend.standardize_dtype(q.dtype)
    if backend == "jax" and _first_device_is_cpu():
        return per_head_attention(q, k, v, mask, scale, dropout, training)
    if training and dropout.rate:
        return None
    if backend == "tensorflow" and q.shape[1] == 1 and _first_device_is_cpu():
        return one_query_attention(q, k, v, mask, scale)
    if q.shape[-1] != v.shape[-1]:
        return None
    if backend == "torch" and training and dtype == "bfloat16" and str(q.device).startswith("cpu"):
        return None
    return ops.dot_product_attention(q, k, v, mask=None if mask is None else mask[:, None], scale=scale)


QUERY_BLOCK = 512  # queries a block in `per_head_attention`: a block's scores stay in the CPU's caches


def per_head_attention(q, k, v, mask, scale, dropout, training):
    """The explicit path one head at a time, the softmax normalized after the values are summed.

    The same numbers: the normalization divides `(q_len, dim)` instead of
    `(q_len, k_len)`. The row maximum, a shift that cancels, is held out of the
    gradient; the row sum is at least 1 (the maximum's own term) unless there
    are no keys, whose output stays 0. Dropout drops unnormalized weights,
    which is dropping probabilities (`dropout` None: none). More than
    `QUERY_BLOCK` queries (a length known when traced) attend `QUERY_BLOCK` at
    a time: each query's row is computed alone either way.

    Example:

    >>> import numpy as np
    >>> q = np.ones((1, 2, 2, 4), "float32")
    >>> tuple(per_head_attention(q, q, q, None, 0.5, keras.layers.Dropout(0.0), False).shape)
    (1, 2, 2, 4)
    """
    from kformer.layers import masks  # here, not on import: `kformer.layers` imports this module

    q = ops.multiply(q, ops.cast(scale, q.dtype))
    length = q.shape[1]
    starts = range(0, length, QUERY_BLOCK) if isinstance(length, int) and length > QUERY_BLOCK else [None]

    def attend(q, k, v, mask):
        scores = masks.mask_scores(ops.einsum("bqd,bkd->bqk", q, k), mask)
        row_max = ops.max(scores, axis=-1, keepdims=True, initial=-float("inf"))  # no keys: -inf
        weights = ops.exp(scores - ops.stop_gradient(row_max))
        total = ops.maximum(ops.sum(weights, axis=-1, keepdims=True), 1.0)
        weights = ops.cast(weights, v.dtype)
        if dropout is not None:
            weights = dropout(weights, training=training)
        return ops.cast(ops.cast(ops.einsum("bqk,bkd->bqd", weights, v), "float32") / total, v.dtype)

    def rows(x, start):
        return x if start is None or x is None or x.shape[1] == 1 else x[:, start:start + QUERY_BLOCK]

    outputs = []
    for head in range(q.shape[2]):
        blocks = [attend(rows(q[:, :, head], start), k[:, :, head], v[:, :, head], rows(mask, start))
                  for start in starts]
        outputs.append(blocks[0] if len(blocks) == 1 else ops.concatenate(blocks, axis=1))
    return ops.stack(outputs, axis=2)


def one_query_attention(q, k, v, mask, scale):
    """The explicit path for one query `(batch, 1, heads, dim)`: a product and a sum each way, in float32,
    over the keys and values `(batch, k_len, heads, dim)` as they are laid out (no transposed copies).
    `mask`: bool `(batch or 1, 1, k_len)` (no row all False) or None.

    Example:

    >>> import numpy as np
    >>> q, k = np.ones((1, 1, 2, 4), "float32"), np.ones((1, 3, 2, 4), "float32")
    >>> tuple(one_query_attention(q, k, k, None, 0.5).shape)
    (1, 1, 2, 4)
    """
    from kformer.layers import masks  # here, not on import: `kformer.layers` imports this module

    q, k, values = (ops.cast(x, "float32") for x in (q, k, v))
    scores = ops.sum(ops.multiply(ops.multiply(q, scale), k), axis=-1, keepdims=True)  # (batch, k_len, heads, 1)
    probs = ops.softmax(masks.mask_scores(scores, None if mask is None else mask[:, 0, :, None, None]), axis=1)
    return ops.cast(ops.sum(ops.multiply(probs, values), axis=1, keepdims=True), v.dtype)


@functools.cache
def _first_device_is_cpu():
    return keras.distribution.list_devices()[0].lower().startswith("cpu")
