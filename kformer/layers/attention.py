"""Multi-head attention ("Attention Is All You Need", section 3.2.2) with masks and a key/value cache."""

import math

import keras
from keras import ops

from kformer.kernels.attention import fast_attention
from kformer.kernels.slices import write_slice
from kformer.layers import masks
from kformer.layers.attention_checks import check_cacheable, check_call
from kformer.layers.checks import check_positive_floats, check_positive_ints, check_rank, check_rates, clone_initializer
from kformer.layers.linear import over_rows
from kformer.layers.lora import LoraEinsumDense
from kformer.layers.position import RotaryEmbedding


@keras.saving.register_keras_serializable(package="kformer")
class MultiHeadAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(key_dim)) V per head, heads concatenated and projected.

    "Attention Is All You Need", section 3.2. The weights are laid out as in
    `keras.layers.MultiHeadAttention` (`query`, `key`, `value`,
    `attention_output` kernels and biases, in that order), so weights move
    between the two with `set_weights(get_weights())`. `call` is the paper's
    computation; where no attention scores are asked for,
    `kformer.kernels.attention.fast_attention` computes the same numbers
    faster (one fused op, flash attention on GPUs; per head on a JAX CPU).

    Args:
        num_heads: int. Number of attention heads.
        key_dim: int. Size of each head for query and key.
        value_dim: int. Size of each head for value. Defaults to `key_dim`.
        dropout: float. Dropout on the attention probabilities. Defaults to `0.0`.
        use_bias: bool. Biases in the projections (see `use_qkv_bias`). Defaults to `True`.
        output_dim: int. Output width. Defaults to the query width.
        kernel_initializer: Initializer for the projection kernels.
        bias_initializer: Initializer for the projection biases.
        rotary_max_wavelength: int or None. Rotate queries and keys by their
            absolute positions (RoPE, Su et al. 2021; `RotaryEmbedding`) after
            projection; keys written to a cache keep their rotation. Defaults
            to `None` (no rotation).
        use_qkv_bias: bool or None. Biases in the query, key and value projections. Defaults to `use_bias`.
        attention_scale: float or None. Multiplies Q K^T. Defaults to `1 / sqrt(key_dim)` (GPT-Neo: `1.0`).
        attention_window: int or None. With `use_causal_mask`, query `i` attends only keys `i - attention_window
            < j <= i` (GPT-Neo's local attention), with a cache too. Defaults to `None`.
        **kwargs: Passed to `keras.layers.Layer` (`name`, `dtype`, ...).

    Call arguments:
        query: `(batch, q_len, query_dim)`.
        value: `(batch, k_len, value_dim)`. `None` only with a precomputed
            `cache` from `compute_cache` (cross-attention reuse).
        key: `(batch, k_len, key_dim)`. Defaults to `value`.
        query_mask, value_mask, key_mask: `(batch, len)` padding masks, filled
            from incoming Keras masks when not given. Keys where `value_mask`
            or `key_mask` is False are never attended; `query_mask` is passed
            on as the output mask (padded queries' outputs are meaningless).
        attention_mask: bool `(batch, q_len, k_len)`, True = may attend.
        use_causal_mask: bool. Query `i` attends keys `<= i` (offset by
            `cache_update_index` when decoding with a cache).
        cache: `(batch, 2, max_len, num_heads, key_dim)` keys and values. While
            writing to a cache, `value_mask`/`key_mask` are ignored (they would
            cover the new tokens only): pass cache padding as `attention_mask`.
        cache_update_index: int or scalar tensor. Position where the keys and
            values of this call's `value`/`key` tokens are written.
        return_attention_scores: bool. Also return `(batch, heads, q_len, k_len)`.
        training: bool. Dropout only when True.

    Returns:
        `(batch, q_len, output_dim)`; with `cache`, `(output, cache)`; with
        scores, the scores are appended last.

    Example:

    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    >>> attention = MultiHeadAttention(num_heads=4, key_dim=4)
    >>> out, scores = attention(x, x, use_causal_mask=True, return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 5, 16), (2, 4, 5, 5))
    >>> local = MultiHeadAttention(num_heads=4, key_dim=4, attention_window=2)  # query 2 sees keys 1 and 2
    >>> (np.asarray(local(x, x, use_causal_mask=True, return_attention_scores=True)[1])[0, 0, 2] > 0).tolist()
    [False, True, True, False, False]
    """

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True, output_dim=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", rotary_max_wavelength=None,
                 use_qkv_bias=None, attention_scale=None, attention_window=None, **kwargs):
        super().__init__(**kwargs)
        check_positive_ints(num_heads=num_heads, key_dim=key_dim)
        if rotary_max_wavelength is not None:
            check_positive_ints(rotary_max_wavelength=rotary_max_wavelength)
            if key_dim % 2:
                raise ValueError(f"Rotary positions need an even `key_dim`. Received: key_dim={key_dim}")
        for name, value in (("value_dim", value_dim), ("output_dim", output_dim),
                            ("attention_window", attention_window)):
            if value is not None:
                check_positive_ints(**{name: value})
        check_rates(dropout=dropout)
        if attention_scale is not None:
            check_positive_floats(attention_scale=attention_scale)
        self.num_heads, self.key_dim, self.value_dim = num_heads, key_dim, value_dim or key_dim
        self.dropout, self.use_bias, self.output_dim = dropout, use_bias, output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.rotary_max_wavelength = rotary_max_wavelength
        self.use_qkv_bias = use_bias if use_qkv_bias is None else use_qkv_bias
        self.attention_scale, self.attention_window = attention_scale, attention_window
        self.score_scale = 1.0 / math.sqrt(key_dim) if attention_scale is None else attention_scale  # times Q K^T
        self.supports_masking = True
        self.rotary = None if rotary_max_wavelength is None else RotaryEmbedding(
            rotary_max_wavelength, dtype=self.dtype_policy, name="rotary")
        qkv = {"bias_axes": "de" if self.use_qkv_bias else None}
        self.query_dense = self._dense("ac,cde->ade", (num_heads, self.key_dim), name="query", **qkv)
        self.key_dense = self._dense("ac,cde->ade", (num_heads, self.key_dim), name="key", **qkv)
        self.value_dense = self._dense("ac,cde->ade", (num_heads, self.value_dim), name="value", **qkv)
        for dense in (self.query_dense, self.key_dense, self.value_dense):
            dense.supports_masking = True  # masks are handled here; no "mask destroyed" warning
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def _dense(self, equation, output_shape, bias_axes, name):
        """A projection applied to rows `(batch * len, ...)` (`_project`); `bias_axes` None: no bias."""
        return LoraEinsumDense(  # an EinsumDense whose LoRA factors are peft's (`kformer.layers.lora`)
            equation, output_shape=output_shape, bias_axes=bias_axes,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer), dtype=self.dtype_policy, name=name)

    def build(self, query_shape, value_shape=None, key_shape=None):
        check_rank("query", query_shape, (3,))
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        self.query_dense.build((None, query_shape[-1]))
        self.key_dense.build((None, key_shape[-1]))
        self.value_dense.build((None, value_shape[-1]))
        self.output_dense = self._dense("acd,cde->ae", (self.output_dim or query_shape[-1],),
                                        "e" if self.use_bias else None, "attention_output")
        self.output_dense.build((None, self.num_heads, self.value_dim))
        self.built = True

    def compute_cache(self, value, key=None):
        """Project keys and values once: `(batch, 2, k_len, num_heads, key_dim)`.

        Pass the result as `cache` with `value=None` to reuse it, e.g. for
        cross-attention over a fixed encoder output while decoding.
        """
        check_cacheable(self)
        k = self._project(self.key_dense, value if key is None else key)
        if self.rotary is not None:
            k = self.rotary(k)
        return ops.stack([k, self._project(self.value_dense, value)], axis=1)

    def call(self, query, value=None, key=None, query_mask=None, value_mask=None, key_mask=None,
             attention_mask=None, use_causal_mask=False, cache=None, cache_update_index=None,
             return_attention_scores=False, training=None):
        writing = cache is not None and value is not None  # new keys/values go into the cache
        if writing or key is value:
            key_mask = None  # writing: the cache's padding comes as `attention_mask`
        if writing:
            value_mask = None
        check_call(self, query, value, key, query_mask, value_mask, key_mask, attention_mask, cache,
                   cache_update_index)
        start = cache_update_index if writing else 0  # absolute position of the first query

        q = self._project(self.query_dense, query)  # (batch, q_len, heads, key_dim)
        if cache is not None and value is None:  # keys and values precomputed (`compute_cache`)
            k, v = cache[:, 0], cache[:, 1]
        else:
            k = self._project(self.key_dense, value if key is None else key)  # (batch, k_len, heads, key_dim)
            v = self._project(self.value_dense, value)  # (batch, k_len, heads, value_dim)
            if self.rotary is not None:
                k = self.rotary(k, start_index=start)
        if self.rotary is not None:
            q = self.rotary(q, start_index=start)
        if writing:
            new = ops.cast(ops.stack([k, v], axis=1), cache.dtype)  # (batch, 2, n, heads, dim)
            cache = write_slice(cache, [0, 0, start, 0, 0], new)
            k, v = cache[:, 0], cache[:, 1]

        mask = self._mask(q, k, value_mask, key_mask, attention_mask, use_causal_mask, writing, start)
        output, scores = self._attend(q, k, v, mask, return_attention_scores, training)
        output = self._project(self.output_dense, output)  # (batch, q_len, output_dim)
        results = (output,) + ((cache,) if cache is not None else ()) + ((scores,) if return_attention_scores else ())
        return results[0] if len(results) == 1 else results

    def _project(self, dense, x):
        """`dense` over the rows of `x` (`over_rows`): `(batch, n, dim)` -> `(batch, n, heads, head_dim)`,
        or for the output projection `(batch, n, heads, value_dim)` -> `(batch, n, output_dim)`."""
        return over_rows(dense, x, feature_axes=len(x.shape) - 2)

    def _mask(self, q, k, value_mask, key_mask, attention_mask, use_causal_mask, writing, start):
        """Which keys each query may attend: bool `(batch, q_len, k_len)`, or None for all."""
        q_len, k_len = ops.shape(q)[1], ops.shape(k)[1]
        causal = None
        if use_causal_mask:
            causal = masks.causal_mask(q_len, k_len, start, self.attention_window)
        elif self.attention_window is not None:
            raise ValueError(f"`attention_window` needs `use_causal_mask`. Received: use_causal_mask={use_causal_mask}")
        elif writing:  # keys past the tokens written so far are never visible
            written = ops.arange(k_len) < ops.cast(start, "int32") + q_len
            causal = ops.broadcast_to(written[None, None, :], (1, q_len, k_len))
        keys = value_mask
        if key_mask is not None:
            keys = key_mask if value_mask is None else ops.logical_and(ops.cast(value_mask, "bool"),
                                                                       ops.cast(key_mask, "bool"))
        # Padded queries are not masked (their outputs are never used; a fully masked row is what
        # makes fused kernels return NaN): `query_mask` only becomes the output's Keras mask.
        merged = masks.merge_masks(None, keys, attention_mask, causal)
        return None if merged is None else masks.allow_empty_rows(merged)

    def _attend(self, q, k, v, mask, return_scores, training):
        """softmax(Q K^T * scale) V over `(batch, len, heads, dim)` tensors: `(output, probabilities
        (batch, heads, q_len, k_len) or None)`. Without scores, `fast_attention` computes the same, faster."""
        scale = self.score_scale
        if not return_scores:
            fast = fast_attention(q, k, v, mask, scale, training, self.dropout_layer)
            if fast is not None:
                return fast, None
        scores = ops.einsum("bqhd,bkhd->bhqk", ops.multiply(q, ops.cast(scale, q.dtype)), k)
        mask = None if mask is None else mask[:, None]  # the same for every head
        probs = ops.cast(ops.softmax(masks.mask_scores(scores, mask), axis=-1), v.dtype)  # float32 softmax
        output = ops.einsum("bhqk,bkhd->bqhd", self.dropout_layer(probs, training=training), v)
        return output, probs

    def compute_output_spec(self, query, value=None, key=None, cache=None, return_attention_scores=False, **kwargs):
        output = keras.KerasTensor(query.shape[:-1] + (self.output_dim or query.shape[-1],), dtype=self.compute_dtype)
        results = (output,)
        if cache is not None:
            results += (keras.KerasTensor(cache.shape, dtype=cache.dtype),)
        if return_attention_scores:
            k_len = (value if value is not None else cache[:, 0]).shape[1]
            results += (keras.KerasTensor((query.shape[0], self.num_heads, query.shape[1], k_len),
                                          dtype=self.compute_dtype),)
        return results[0] if len(results) == 1 else results

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "output_dim": self.output_dim,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "rotary_max_wavelength": self.rotary_max_wavelength,
            "use_qkv_bias": self.use_qkv_bias, "attention_scale": self.attention_scale,
            "attention_window": self.attention_window,
        })
        return config
