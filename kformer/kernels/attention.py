"""Faster computations of `MultiHeadAttention`'s explicit softmax attention, each giving its numbers."""

import functools

import keras
from keras import ops



def fast_attention(q, k, v, mask, scale, training, dropout):
    """softmax(Q K^T * scale) V as the layer's explicit path computes it, faster; None where that path runs.

    - JAX on a CPU: `per_head_attention` (XLA:CPU ran it faster than one
      fused op; it also serves float16, whose fused attention XLA:CPU does
      not compile), with attention dropout in training.
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
    if (training and dropout.rate) or q.shape[-1] != v.shape[-1]:
        return None
    if backend == "torch" and training and dtype == "bfloat16" and str(q.device).startswith("cpu"):
        return None
    return ops.dot_product_attention(q, k, v, mask=None if mask is None else mask[:, None], scale=scale)


def per_head_attention(q, k, v, mask, scale, dropout, training):
    """The explicit path one head at a time, the softmax normalized after the values are summed.

    The same numbers: the normalization divides `(q_len, dim)` instead of
    `(q_len, k_len)`. The row maximum, a shift that cancels, is held out of the
    gradient; the row sum is at least 1 (the maximum's own term) unless there
    are no keys, whose output stays 0. Dropout drops unnormalized weights,
    which is dropping probabilities (`dropout` None: none).

    Example:

    >>> import numpy as np
    >>> q = np.ones((1, 2, 2, 4), "float32")
    >>> tuple(per_head_attention(q, q, q, None, 0.5, keras.layers.Dropout(0.0), False).shape)
    (1, 2, 2, 4)
    """
    from kformer.layers import masks  # here, not on import: `kformer.layers` imports this module

    q = ops.multiply(q, ops.cast(scale, q.dtype))
    outputs = []
    for head in range(q.shape[2]):
        scores = masks.mask_scores(ops.einsum("bqd,bkd->bqk", q[:, :, head], k[:, :, head]), mask)
        row_max = ops.max(scores, axis=-1, keepdims=True, initial=-float("inf"))  # no keys: -inf
        weights = ops.exp(scores - ops.stop_gradient(row_max))
        total = ops.maximum(ops.sum(weights, axis=-1, keepdims=True), 1.0)
        weights = ops.cast(weights, v.dtype)
        if dropout is not None:
            weights = dropout(weights, training=training)
        summed = ops.cast(ops.einsum("bqk,bkd->bqd", weights, v[:, :, head]), "float32")
        outputs.append(ops.cast(summed / total, v.dtype))
    return ops.stack(outputs, axis=2)


@functools.cache
def _first_device_is_cpu():
    return keras.distribution.list_devices()[0].lower().startswith("cpu")
