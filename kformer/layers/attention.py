"""Multi-head attention with padding/causal/explicit masks and a key/value cache."""

import functools
import math

import keras
from keras import ops

from kformer.layers import masks
from kformer.layers.checks import check_positive_ints, check_rank, check_rates, clone_initializer, known_index
from kformer.layers.linear import linear, over_rows, reshape
from kformer.layers.position import RotaryEmbedding
from kformer.layers.slices import write_slice


def _attention_path(q, training, k):
    """Which of four equal computations attends `q` to keys `k`: "fused", "one_query", "per_head" or
    "explicit".

    - "fused" (`ops.dot_product_attention`; flash attention on GPUs) unless:
    - TensorFlow inference with one query (a cached decoding step): "one_query",
      broadcast products and sums instead of einsums over one row. A plain
      TensorFlow graph (TF Serving) ran it 1.5-1.8x faster, XLA 1.2-1.5x
      (docs/BENCHMARKS.md, "One query on TensorFlow").
    - float32 inference with one query and at most 32,768 key elements
      (batch x keys x heads x key_dim) on a torch CPU: "one_query" in the
      tensors' own methods. Eager torch spent 100-250 us a call in
      `ops.dot_product_attention` (argument handling, the flash check)
      against 50-150 us at batch 1; with more keys the copy of the cached
      keys and values that its matmuls need costs more than that saves
      (docs/BENCHMARKS.md, "Torch's eager step: one-query attention").
    - JAX on a CPU: "per_head", one batched attention a head. XLA:CPU ran
      the fused attention (all heads in one dot) 1.4-1.8x slower, forward
      and backward; the medium encoder's step gained 1.08x
      (docs/BENCHMARKS.md, "Attention on a CPU, by backend"). It also
      serves float16, whose fused XLA attention fails to compile on a CPU
      ("F16_F16_F32 is not supported").
    - training on a TensorFlow CPU: "explicit", whose heads-first batched
      matmuls ran 1.16-1.34x faster than TensorFlow's fused-heads einsums,
      forward and backward (the same section). Inference stays fused.
    - bfloat16 training on a torch CPU: "explicit". torch's CPU
      flash-attention backward in bfloat16 took 16.5 ms a call against 1 ms
      for its forward, so `vit_tiny`'s training step ran 5x slower than with
      the explicit path (docs/BENCHMARKS.md, "bfloat16 on this CPU").
      Inference stays fused.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow" and not training and q.shape[1] == 1:
        return "one_query"
    if (backend == "torch" and not training and q.shape[1] == 1 and str(q.device).split(":")[0] == "cpu"
            and keras.backend.standardize_dtype(q.dtype) == "float32"
            and None not in k.shape and math.prod(k.shape) <= 32768):
        return "one_query"
    if backend == "jax" and _first_device_is_cpu():
        return "per_head"
    if backend == "tensorflow" and training and _first_device_is_cpu():
        return "explicit"
    if backend == "torch" and training and keras.backend.standardize_dtype(q.dtype) == "bfloat16":
        return "explicit" if str(q.device).split(":")[0] == "cpu" else "fused"
    return "fused"


@functools.cache
def _first_device_is_cpu():
    return keras.distribution.list_devices()[0].lower().startswith("cpu")


@keras.saving.register_keras_serializable(package="kformer")
class MultiHeadAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(key_dim)) V per head, heads concatenated and projected.

    "Attention Is All You Need", section 3.2. The weights are laid out as in
    `keras.layers.MultiHeadAttention` (`query`, `key`, `value`,
    `attention_output` kernels and biases, in that order), so weights move
    between the two with `set_weights(get_weights())`. Without attention
    scores or attention dropout the fused `ops.dot_product_attention` runs
    (flash attention on GPUs); otherwise an explicit softmax path gives the
    same numbers. On a JAX CPU the heads are attended one at a time, which
    XLA:CPU runs faster; training on a TensorFlow CPU, and in bfloat16 on a
    torch CPU, takes the explicit path, faster there (`_attention_path`).

    Args:
        num_heads: int. Number of attention heads.
        key_dim: int. Size of each head for query and key.
        value_dim: int. Size of each head for value. Defaults to `key_dim`.
        dropout: float. Dropout on the attention probabilities. Defaults to `0.0`.
        use_bias: bool. Biases in the projections. Defaults to `True`.
        output_dim: int. Output width. Defaults to the query width.
        kernel_initializer: Initializer for the projection kernels.
        bias_initializer: Initializer for the projection biases.
        rotary_max_wavelength: int or None. Rotate queries and keys by their
            absolute positions (RoPE, Su et al. 2021; `RotaryEmbedding`) after
            projection; keys written to a cache keep their rotation. Defaults
            to `None` (no rotation).
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
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        rotary_max_wavelength=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_ints(num_heads=num_heads, key_dim=key_dim)
        if rotary_max_wavelength is not None:
            check_positive_ints(rotary_max_wavelength=rotary_max_wavelength)
            if key_dim % 2:
                raise ValueError(f"Rotary positions need an even `key_dim`. Received: key_dim={key_dim}")
        if value_dim is not None:
            check_positive_ints(value_dim=value_dim)
        if output_dim is not None:
            check_positive_ints(output_dim=output_dim)
        check_rates(dropout=dropout)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.rotary_max_wavelength = rotary_max_wavelength
        self.supports_masking = True
        self.rotary = None if rotary_max_wavelength is None else RotaryEmbedding(
            rotary_max_wavelength, dtype=self.dtype_policy, name="rotary")

        def projection(name, heads_dim):
            return keras.layers.EinsumDense(
                "ac,cde->ade",  # over (batch * length, dim): see `_dense`
                output_shape=(num_heads, heads_dim),
                bias_axes="de" if use_bias else None,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                bias_initializer=clone_initializer(self.bias_initializer),
                dtype=self.dtype_policy,
                name=name,
            )

        self.query_dense = projection("query", self.key_dim)
        self.key_dense = projection("key", self.key_dim)
        self.value_dense = projection("value", self.value_dim)
        for dense in (self.query_dense, self.key_dense, self.value_dense):
            dense.supports_masking = True  # masks are handled here; no "mask destroyed" warning
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, query_shape, value_shape=None, key_shape=None):
        check_rank("query", query_shape, (3,))
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        self.query_dense.build((None, query_shape[-1]))
        self.key_dense.build((None, key_shape[-1]))
        self.value_dense.build((None, value_shape[-1]))
        out_dim = self.output_dim or query_shape[-1]
        self.output_dense = keras.layers.EinsumDense(
            "acd,cde->ae",
            output_shape=(out_dim,),
            bias_axes="e" if self.use_bias else None,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="attention_output",
        )
        self.output_dense.build((None, self.num_heads, self.value_dim))
        self.built = True

    def _dense(self, dense, x, call=False):
        """Projection `dense` of `x` `(batch, n, ...)` over `(batch * n, ...)` (`over_rows`):
        `(batch, n, dim)` -> `(batch, n, heads, head_dim)`, or for the output `(batch, n, heads,
        value_dim)` -> `(batch, n, output_dim)`. `call=True` skips `__call__`."""
        return over_rows(dense.call if call else dense, x, feature_axes=len(x.shape) - 2)

    def _check_widths(self, **tensors):
        """ValueError naming the tensor whose last dimension is not the width its projection was built for."""
        for name, tensor in tensors.items():
            dense = getattr(self, f"{name}_dense")
            if tensor is None or not dense.built:
                continue
            width, got = dense.kernel.shape[0], tuple(tensor.shape)
            if len(got) != 3 or got[-1] not in (None, width):
                raise ValueError(f"`{name}` must be (batch, length, {width}): this layer was built for width "
                                 f"{width}. Received: {name}.shape={got}")

    def compute_cache(self, value, key=None):
        """Project keys and values once: `(batch, 2, k_len, num_heads, key_dim)`.

        Pass the result as `cache` with `value=None` to reuse it, e.g. for
        cross-attention over a fixed encoder output while decoding.
        """
        self._check_cacheable()
        key = value if key is None else key
        k = self._dense(self.key_dense, key)
        if self.rotary is not None:
            k = self.rotary(k)
        return ops.stack([k, self._dense(self.value_dense, value)], axis=1)

    def _check_cacheable(self):
        if self.key_dim != self.value_dim:
            raise ValueError(
                "A key/value cache needs `key_dim == value_dim`. "
                f"Received: key_dim={self.key_dim}, value_dim={self.value_dim}"
            )

    def _check_cache_fits(self, cache, value, cache_update_index):
        """The new tokens fit the cache at `cache_update_index`; batch and heads agree."""
        index = known_index("cache_update_index", cache_update_index)
        length, new = cache.shape[2], value.shape[1]
        if index is not None and isinstance(length, int) and isinstance(new, int) and index + new > length:
            raise ValueError(
                f"`cache_update_index` + the {new} new tokens must fit the cache length {length}. "
                f"Received: cache_update_index={index}, cache.shape={tuple(cache.shape)}")
        heads, batch = cache.shape[3], cache.shape[0]
        if heads is not None and heads != self.num_heads:
            raise ValueError(f"`cache` must hold {self.num_heads} heads (axis 3). Received: "
                             f"cache.shape={tuple(cache.shape)}")
        if None not in (batch, value.shape[0]) and batch != value.shape[0]:
            raise ValueError(f"`cache` and `value` must have the same batch size. Received: "
                             f"cache.shape={tuple(cache.shape)}, value.shape={tuple(value.shape)}")

    def call(
        self,
        query,
        value=None,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
    ):
        for name, tensor in (("query", query), ("value", value), ("key", key),
                             ("attention_mask", attention_mask)):
            check_rank(name, None if tensor is None else tensor.shape, (3,))
        if value is None and cache is None:
            raise ValueError("`value` is required unless a precomputed `cache` is passed.")
        if cache is not None:
            self._check_cacheable()
            check_rank("cache", cache.shape, (5,))
            if value is not None and cache_update_index is None:
                raise ValueError(
                    "`cache_update_index` is required when `cache` is passed with new "
                    "`value` tokens. Received: cache_update_index=None. (To reuse a "
                    "precomputed cross-attention cache, call with `value=None`.)"
                )
            if value is not None:
                self._check_cache_fits(cache, value, cache_update_index)
        if key is not None and value is not None and key.shape[1] != value.shape[1]:
            if key.shape[1] is not None and value.shape[1] is not None:
                raise ValueError(
                    "`key` and `value` must have the same length. Received: "
                    f"key.shape={tuple(key.shape)}, value.shape={tuple(value.shape)}"
                )
        key = value if key is None else key
        _check_shapes_agree(query, key, attention_mask, cache)
        self._check_widths(query=query, key=key, value=value)
        if key_mask is None or key is value:
            key_mask = None
        if cache is not None and value is not None:
            # The keys are the cache, not this step's tokens: padding of the
            # cache comes as `attention_mask` (batch, q_len, max_len).
            value_mask = key_mask = None

        q = self._dense(self.query_dense, query)  # (batch, q_len, heads, key_dim)
        start_index = 0
        if cache is None:
            k, v = self._dense(self.key_dense, key), self._dense(self.value_dense, value)  # (batch, k_len, heads, dim)
            if self.rotary is not None:
                q, k = self.rotary(q), self.rotary(k)
        elif value is None:
            k, v = cache[:, 0], cache[:, 1]
            if self.rotary is not None:
                q = self.rotary(q)
        else:
            start_index = cache_update_index
            new_k = self._dense(self.key_dense, key)
            if self.rotary is not None:  # absolute positions start at the cache index
                q = self.rotary(q, start_index=cache_update_index)
                new_k = self.rotary(new_k, start_index=cache_update_index)
            k, v, cache = _write(cache, cache_update_index, new_k, self._dense(self.value_dense, value))

        mask = self._attention_mask(
            q, k, query_mask, value_mask, key_mask, attention_mask,
            use_causal_mask, cache is not None and value is not None, start_index,
        )
        output, scores = self._attend(q, k, v, mask, return_attention_scores, training)
        output = self._dense(self.output_dense, output)  # (batch, q_len, output_dim)

        results = (output,)
        if cache is not None:
            results += (cache,)
        if return_attention_scores:
            results += (scores,)
        return results[0] if len(results) == 1 else results

    def flat_weights(self, fuse_query_key_value=False):
        """The four projections as 2-D matrices for `cached_call(weights=...)`.

        Returns `{"query" | "key" | "value" | "output": (kernel (in, out), bias
        (out,) or None)}`; with `fuse_query_key_value=True` (self-attention:
        one input for all three) also `"query_key_value"`, the three joined
        side by side, so a cached step projects with one matmul. Make them once
        per decoding call, outside the loop: inside TensorFlow's XLA loop, an
        `EinsumDense` kernel reshaped every step compiles to an unvectorized
        loop (about 60 us against 4 us for a 256 x 256 projection of one token).
        """
        def flat(dense, rows):
            bias = None if dense.bias is None else ops.reshape(dense.bias, (-1,))
            return ops.reshape(dense.kernel, (rows, -1)), bias

        heads_in = self.num_heads * self.value_dim
        weights = {name: flat(getattr(self, f"{name}_dense"), getattr(self, f"{name}_dense").kernel.shape[0])
                   for name in ("query", "key", "value")}
        weights["output"] = flat(self.output_dense, heads_in)
        if fuse_query_key_value:
            parts = [weights[name] for name in ("query", "key", "value")]
            if len({kernel.shape[0] for kernel, _ in parts}) != 1:
                raise ValueError("`fuse_query_key_value=True` needs one input width for the query, key and value "
                                 f"projections. Received widths {[int(k.shape[0]) for k, _ in parts]}")
            bias = None if parts[0][1] is None else ops.concatenate([b for _, b in parts])
            weights["query_key_value"] = (ops.concatenate([k for k, _ in parts], axis=1), bias)
        return weights

    def _project(self, name, x, weights):
        """`x` `(batch, n, in)` through projection `name`: `(batch, n, heads, dim)`, or
        `(batch, n, output_dim)` for "output" (whose `x` is `(batch, n, heads, value_dim)`)."""
        if weights is None:
            return self._dense(getattr(self, "output_dense" if name == "output" else f"{name}_dense"), x, call=True)
        kernel, bias = weights[name]
        n = ops.shape(x)[1]  # static where known, so TensorFlow keeps the head sizes
        if name == "output":
            x = reshape(x, (-1, n, self.num_heads * self.value_dim))
        y = linear(x, kernel, bias)
        if name == "output":
            return y
        return reshape(y, (-1, n, self.num_heads, self.value_dim if name == "value" else self.key_dim))

    def cached_call(self, query, cache, cache_update_index=None, key_mask=None, weights=None):
        """Inference-only attention through a cache: the decoding fast path.

        The numbers of `call(query, query, cache=..., cache_update_index=...,
        use_causal_mask=True)` (self-attention) or `call(query, cache=cache)`
        (cross-attention), without dropout, scores, argument checks, mask
        merging or sublayer `__call__`s: one decoding step runs a few tensor
        ops, which matters where each op runs eagerly (torch). Callers check
        their inputs; `TransformerDecoderBlock` takes this path while decoding.

        Args:
            query: `(batch, q_len, query_dim)`.
            cache: `(batch, 2, max_len, num_heads, key_dim)`.
            cache_update_index: int or scalar tensor: write this query's keys
                and values there and attend causally (query `i` sees keys
                `<= cache_update_index + i`). `None`: attend the whole cache
                (cross-attention over `compute_cache`'s keys and values).
            key_mask: bool `(batch, max_len)` or None: keys that may be attended;
                or `masks.key_padding_mask(key_mask)` `(batch, 1, max_len)`,
                made once outside a decoding loop and used as it is.
            weights: `flat_weights()` made once per decoding call, or None
                (each projection's own kernel).

        Returns:
            `((batch, q_len, output_dim), cache)`, the cache updated when
            `cache_update_index` is given.
        """
        mask, index = None, None
        joined = cache_update_index is not None and weights is not None and "query_key_value" in weights
        if joined:  # self-attention: one matmul for the three projections
            q, new_k, new_v = self._project_query_key_value(query, weights["query_key_value"])
        else:
            q = self._project("query", query, weights)  # (batch, q_len, heads, key_dim)
        if cache_update_index is not None:
            index = known_index("cache_update_index", cache_update_index)  # eager: an int, 5x faster in torch
            cache_update_index = cache_update_index if index is None else index
            if not joined:
                new_k, new_v = self._project("key", query, weights), self._project("value", query, weights)
            if self.rotary is not None:
                q = self.rotary.call(q, start_index=cache_update_index)
                new_k = self.rotary.call(new_k, start_index=cache_update_index)
            cache = _write(cache, cache_update_index, new_k, new_v)[2]
        elif self.rotary is not None:
            q = self.rotary.call(q)
        k, v, q_len = cache[:, 0], cache[:, 1], ops.shape(q)[1]
        if cache_update_index is not None:
            cut = index is not None and isinstance(q_len, int)  # known now (eager): attend the written keys only
            if cut:
                k, v = k[:, : index + q_len], v[:, : index + q_len]
                key_mask = None if key_mask is None else key_mask[..., : index + q_len]
            if not (cut and q_len == 1):  # one new token sees every written key: no mask
                mask = masks.causal_mask(q_len, ops.shape(k)[1], cache_update_index)
        if key_mask is not None and len(key_mask.shape) == 3 and mask is None:
            mask = key_mask  # prepared by masks.key_padding_mask: no mask ops a step
        elif key_mask is not None:
            keys = key_mask if len(key_mask.shape) == 3 else ops.cast(key_mask, "bool")[:, None, :]
            mask = masks.allow_empty_rows(keys if mask is None else ops.logical_and(mask, keys))
        output, _ = self._attend(q, k, v, mask, False, False)
        return self._project("output", output, weights), cache

    def _project_query_key_value(self, x, weights):
        """`x` `(batch, n, in)` through the joined kernel of `flat_weights(fuse_query_key_value=True)`:
        `(q, k, v)`, each `(batch, n, heads, key_dim)` (a cache needs `key_dim == value_dim`)."""
        y = linear(x, *weights)
        y = reshape(y, (-1, ops.shape(x)[1], 3, self.num_heads, self.key_dim))  # one reshape, then views
        return y[:, :, 0], y[:, :, 1], y[:, :, 2]

    def _attention_mask(
        self, q, k, query_mask, value_mask, key_mask, attention_mask,
        use_causal_mask, decoding, start_index,
    ):
        q_len, k_len = ops.shape(q)[1], ops.shape(k)[1]
        if attention_mask is not None:
            expected = (q.shape[0], q.shape[1], k.shape[1])
            for got, want in zip(attention_mask.shape, expected):
                if got is not None and want is not None and got != want and got != 1:
                    raise ValueError(
                        "`attention_mask` must have shape (batch, q_len, k_len) = "
                        f"{expected}. Received: attention_mask.shape="
                        f"{tuple(attention_mask.shape)}"
                    )
        causal = None
        if use_causal_mask or decoding:
            # With a cache, keys past the tokens written so far are never visible.
            causal = masks.causal_mask(q_len, k_len, start_index)
            if not use_causal_mask:
                written = ops.arange(k_len) < ops.cast(start_index, "int32") + q_len
                causal = ops.broadcast_to(written[None, None, :], (1, q_len, k_len))
        for name, mask, length in (
            ("query_mask", query_mask, q.shape[1]),
            ("value_mask", value_mask, k.shape[1]),
            ("key_mask", key_mask, k.shape[1]),
        ):
            if mask is not None and (
                len(mask.shape) != 2
                or (None not in (mask.shape[1], length) and mask.shape[1] != length)
            ):
                raise ValueError(
                    f"`{name}` must have shape (batch, {length}). "
                    f"Received: {name}.shape={tuple(mask.shape)}"
                )
        key_padding = value_mask
        if key_mask is not None:
            key_padding = key_mask if value_mask is None else ops.logical_and(
                ops.cast(value_mask, "bool"), ops.cast(key_mask, "bool")
            )
        # Padded queries are not masked out: their outputs are never used, and a
        # fully masked row is what makes fused kernels return NaN. `query_mask`
        # only becomes the output's Keras mask (as `keras.layers.MultiHeadAttention`
        # does with an explicit `query_mask`).
        merged = masks.merge_masks(None, key_padding, attention_mask, causal)
        return None if merged is None else masks.allow_empty_rows(merged)

    def _attend(self, q, k, v, mask, return_scores, training):
        scale = 1.0 / math.sqrt(self.key_dim)
        if return_scores:
            return self._explicit(q, k, v, mask, scale, training)
        path = _attention_path(q, training, k)
        if path == "per_head":
            return self._per_head(q, k, v, mask, scale, training), None
        if path == "one_query":
            return self._one_query(q, k, v, mask, scale), None
        if path == "explicit" or (self.dropout > 0 and training) or self.key_dim != self.value_dim:
            return self._explicit(q, k, v, mask, scale, training)[0], None
        output = ops.dot_product_attention(q, k, v, mask=None if mask is None else mask[:, None], scale=scale)
        return output, None

    def _explicit(self, q, k, v, mask, scale, training):
        """Softmax attention with the heads moved first: `(output (batch, q_len, heads, value_dim),
        probabilities (batch, heads, q_len, k_len))`."""
        q, k, v = (ops.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))  # (batch, heads, len, dim)
        q = ops.multiply(q, ops.cast(scale, q.dtype))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
        probs, dropped = self._probabilities(scores, None if mask is None else mask[:, None], v.dtype, training)
        return ops.transpose(ops.matmul(dropped, v), (0, 2, 1, 3)), probs

    def _one_query(self, q, k, v, mask, scale):
        """Inference for one query, `q` `(batch, 1, heads, key_dim)`: `(batch, 1, heads, value_dim)`
        from scores `(batch, k_len, heads, 1)`, a product and a sum each way, in float32 (no dropout)."""
        if k.shape[1] == 1:  # one key (the first cached step): its value, softmax's only weight being 1
            return v
        if keras.backend.backend() == "torch":  # float32 (`_attention_path`): torch's own matmuls
            scores = (q.transpose(1, 2) * scale) @ k.permute(0, 2, 3, 1)  # (batch, heads, 1, k_len)
            if mask is not None:
                scores = scores.masked_fill(~mask[:, None], masks.MASKED_SCORE)
            return (scores.softmax(-1) @ v.transpose(1, 2)).transpose(1, 2)
        q, k, values = (ops.cast(x, "float32") for x in (q, k, v))  # no op for float32
        scores = ops.sum(ops.multiply(ops.multiply(q, scale), k), axis=-1, keepdims=True)
        probs = ops.softmax(masks.mask_scores(scores, None if mask is None else mask[:, 0, :, None, None]), axis=1)
        return ops.cast(ops.sum(ops.multiply(probs, values), axis=1, keepdims=True), v.dtype)

    def _per_head(self, q, k, v, mask, scale, training):
        """`_explicit`'s output, one head at a time: `(batch, q_len, heads, value_dim)`.

        The softmax is normalized after the values are summed, on `(q_len,
        value_dim)` instead of `(q_len, k_len)`: the same numbers, and XLA:CPU
        ran the heads' forward and backward 1.37x faster (docs/BENCHMARKS.md,
        "Projections over one batch axis"). The row maximum, a shift that
        cancels, is held out of the gradient; the row sum is at least 1 (the
        maximum's own term) unless there are no keys, whose output stays 0.
        """
        q = ops.multiply(q, ops.cast(scale, q.dtype))
        outputs = []
        for head in range(self.num_heads):
            scores = masks.mask_scores(ops.einsum("bqd,bkd->bqk", q[:, :, head], k[:, :, head]), mask)
            row_max = ops.max(scores, axis=-1, keepdims=True, initial=-float("inf"))  # no keys: -inf
            weights = ops.exp(scores - ops.stop_gradient(row_max))
            total = ops.maximum(ops.sum(weights, axis=-1, keepdims=True), 1.0)  # >= 1 unless no keys
            weights = self.dropout_layer(ops.cast(weights, v.dtype), training=training)
            summed = ops.cast(ops.einsum("bqk,bkd->bqd", weights, v[:, :, head]), "float32")
            outputs.append(ops.cast(summed / total, v.dtype))
        return ops.stack(outputs, axis=2)

    def _probabilities(self, scores, mask, dtype, training):
        """Scores `(..., q_len, k_len)` -> `(probabilities, the same after attention dropout)`, in
        `dtype`: a float32 softmax, keys outside `mask` (broadcast to the scores) at -1e9."""
        probs = ops.cast(ops.softmax(masks.mask_scores(scores, mask), axis=-1), dtype)
        return probs, self.dropout_layer(probs, training=training)

    def compute_output_spec(self, query, value=None, key=None, cache=None,
                            return_attention_scores=False, **kwargs):
        out_dim = self.output_dim or query.shape[-1]
        output = keras.KerasTensor(query.shape[:-1] + (out_dim,), dtype=self.compute_dtype)
        results = (output,)
        if cache is not None:
            results += (keras.KerasTensor(cache.shape, dtype=cache.dtype),)
        if return_attention_scores:
            k_len = (value if value is not None else cache[:, 0]).shape[1]
            results += (
                keras.KerasTensor(
                    (query.shape[0], self.num_heads, query.shape[1], k_len),
                    dtype=self.compute_dtype,
                ),
            )
        return results[0] if len(results) == 1 else results

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "rotary_max_wavelength": self.rotary_max_wavelength,
            }
        )
        return config


def _write(cache, index, new_k, new_v):
    """New keys and values `(batch, n, heads, dim)` written into `cache` at `index`: `(k, v, cache)`.

    One update of the whole cache: eager torch copies the tensor it updates, and
    writing keys and values apart, then stacking them, copied the cache three times.
    """
    new = ops.cast(ops.stack([new_k, new_v], axis=1), cache.dtype)  # (batch, 2, n, heads, dim)
    cache = write_slice(cache, [0, 0, index, 0, 0], new)
    return cache[:, 0], cache[:, 1], cache


def _check_shapes_agree(query, key, attention_mask, cache):
    """ValueError naming the tensors when known (static or eager) batch or length dimensions disagree.

    `attention_mask` is `(batch, q_len, k_len)`, each dimension equal to the
    query's/key's or 1 (broadcast); with a cache, `k_len` is the cache length.
    """
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
