"""Fused attention: the numbers of `MultiHeadAttention`'s explicit softmax path in one op."""

import functools

import keras
from keras import ops


def fused_attention(q, k, v, mask, scale, training):
    """`ops.dot_product_attention` (flash attention on GPUs), or None where it does not apply.

    Applies everywhere except two places where the explicit softmax is kept:
    float16 on a JAX CPU (XLA:CPU does not compile its fused attention:
    "F16_F16_F32 is not supported") and bfloat16 training on a torch CPU (its
    fused backward ran a `vit_tiny` training step about 5x slower).

    Args:
        q, k, v: `(batch, len, heads, dim)` queries, keys and values.
        mask: bool `(batch, q_len, k_len)` (True = may attend; no row all False) or None.
        scale: float. Multiplies the scores (`1 / sqrt(key_dim)`).
        training: bool or None.

    Returns:
        `(batch, q_len, heads, dim)`, or None.

    Example:

    >>> import numpy as np
    >>> q = np.ones((1, 2, 2, 4), "float32")
    >>> tuple(fused_attention(q, q, q, None, 0.5, False).shape)
    (1, 2, 2, 4)
    """
    backend, dtype = keras.backend.backend(), keras.backend.standardize_dtype(q.dtype)
    if backend == "jax" and dtype == "float16" and _first_device_is_cpu():
        return None
    if backend == "torch" and training and dtype == "bfloat16" and str(q.device).startswith("cpu"):
        return None
    return ops.dot_product_attention(q, k, v, mask=None if mask is None else mask[:, None], scale=scale)


@functools.cache
def _first_device_is_cpu():
    return keras.distribution.list_devices()[0].lower().startswith("cpu")
