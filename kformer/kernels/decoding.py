"""A cached decoding step on the weights as plain matrices: a generative task's `call_with_cache`, faster.

`PlainDecoder.step` computes what `task.call_with_cache(tokens, cache, index,
context)` computes for one token a row (the last position's logits), with the
projection kernels read once per decoding call as 2-D matrices (the query,
key and value kernels of a self-attention side by side), one query attended
by products and sums, and no Keras `__call__` per sublayer. `generate` uses
it where it pays (`PAYS`: backend -> model families, from
benchmarks/decode_speed.py, whose `kformer_readable` column times the
readable step) for float weights without a mixed or quantized policy and
without mixture-of-experts blocks; elsewhere it steps through
`call_with_cache`. tests/kernels/test_decoding.py checks it equal to
`call_with_cache` on every backend, where it steps aside too.
"""

import math

import keras
from keras import ops

from kformer.kernels.attention import one_query_attention, per_head_attention
from kformer.kernels.slices import slice_rows, write_slice
from kformer.layers import masks
from kformer.layers.checks import known_index

# Where the plain step pays over the readable one on benchmarks/decode_speed.py (`kformer_plain` against
# `kformer_readable`, 128 new tokens, batch 1 and 16): backend -> the `decoding_family`s it is used for.
# On JAX it pays for the language model at batch 1 (about level at 16: XLA compiles the readable step well
# there) but not for the translator (under 1.2x at batch 1, level at 16); the measured ratios are in
# docs/performance.md (docs/decisions.md#own-decoding).
PAYS = {"tensorflow": ("translator", "causal"), "jax": ("causal",), "torch": ("translator", "causal")}


class PlainDecoder:
    """One decoding call's plain step for a `GenerativeTask` (made inside the call, outside its loop).

    Args:
        task: a `kformer.generation.protocol.GenerativeTask`.
        context: the `context` of `task.prefill` (cross-attention caches and source mask for a translator).
        length: int or scalar tensor. The decoding buffer's length (positions made once for it).

    Example:

    >>> import numpy as np
    >>> from kformer import models
    >>> lm = models.causal_lm(preset="gpt_tiny", vocabulary_size=50)
    >>> plain = PlainDecoder.create(lm, {}, 8)
    >>> logits, cache = plain.step(np.array([[5]]), 0, lm.empty_cache(1, 8, "float32"))
    >>> tuple(logits.shape)
    (1, 50)
    """

    @classmethod
    def create(cls, task, context, length):
        """The plain step where it pays and applies (`PAYS`, `applies`), else None."""
        if task.decoding_family not in PAYS.get(keras.backend.backend(), ()) or not cls.applies(task):
            return None
        return cls(task, context, length)

    @staticmethod
    def applies(task):
        """Whether the plain step can compute `task`'s: float weights without a mixed or quantized policy,
        no mixture-of-experts blocks."""
        embedding, blocks, norm, projection = task.decoder_parts()
        layers = [embedding, *blocks] + [layer for layer in (norm, projection) if layer is not None]
        return all(map(_has_plain_weights, layers)) and not any(block.num_experts for block in blocks)

    def __init__(self, task, context, length):
        self.embedding, self.blocks, self.norm, projection = task.decoder_parts()
        self.weights = [_block_weights(block) for block in self.blocks]
        self.cross = _cross_layout(context.get("cross_attention_cache"))
        self.cross_mask = _source_mask(context.get("source_mask"))
        limit = self.embedding.sequence_length if self.embedding.position == "learned" else None
        # Sinusoids computed inside TensorFlow's XLA loop were fused into the next projections and
        # recomputed per output: a table made once instead.
        self.positions = self.embedding.position_table(length if limit is None else _smaller(length, limit))
        if projection is None:  # tied: the token table transposed once, laid out afresh (contiguous in torch)
            table = ops.transpose(ops.cast(self.embedding.token_embedding.embeddings, self.embedding.compute_dtype))
            bias = self.embedding.logits_bias
            self.output = (ops.reshape(ops.reshape(table, (-1,)), ops.shape(table)),
                           None if bias is None else ops.convert_to_tensor(bias))
        else:
            self.output = (ops.convert_to_tensor(projection.kernel),
                           None if projection.bias is None else ops.convert_to_tensor(projection.bias))

    def repeat(self, beams):
        """This step for each row repeated `beams` times (beam search): a new `PlainDecoder`."""
        repeated = object.__new__(PlainDecoder)
        repeated.__dict__.update(self.__dict__)
        if self.cross is not None:
            repeated.cross = tuple(tuple(ops.repeat(t, beams, axis=0) for t in pair) for pair in self.cross)
        if self.cross_mask is not None:
            repeated.cross_mask = ops.repeat(self.cross_mask, beams, axis=0)
        return repeated

    def step(self, tokens, index, cache):
        """`tokens` `(batch, 1)` at `index` -> `(next-token logits (batch, vocab) float32, updated cache)`."""
        index = _known(index)
        x = self.embedding.token_embedding.call(tokens)
        if self.embedding.scale_by_sqrt_dim:
            x = x * ops.cast(math.sqrt(self.embedding.hidden_dim), x.dtype)
        if self.positions is not None:
            x = x + ops.cast(slice_rows(self.positions, index, 1), x.dtype)
        updated = []
        for i, (block, weights) in enumerate(zip(self.blocks, self.weights)):
            x, block_cache = self._block(block, weights, x, cache[i], index,
                                         None if self.cross is None else self.cross[i])
            updated.append(block_cache)
        if self.norm is not None:
            x = self.norm.call(x)
        return ops.cast(linear(x[:, 0], *self.output), "float32"), tuple(updated)

    def _block(self, block, weights, x, cache, index, cross_cache):
        """`TransformerDecoderBlock.call` for one cached token: `(x, cache)`."""
        def pre(x, norm):
            return norm.call(x) if block.normalize_first else x

        def add(x, out, norm):
            return x + out if block.normalize_first else norm.call(x + out)

        out, cache = _self_attention(block.self_attention, weights["self"], pre(x, block.self_attention_norm),
                                     cache, index)
        x = add(x, out, block.self_attention_norm)
        if cross_cache is not None:
            out = _cross_attention(block.cross_attention, weights["cross"], pre(x, block.cross_attention_norm),
                                   cross_cache, self.cross_mask)
            x = add(x, out, block.cross_attention_norm)
        inner_kernel, inner_bias, outer_kernel, outer_bias = weights["feed_forward"]
        h = block.feed_forward.activation(linear(pre(x, block.feed_forward_norm), inner_kernel, inner_bias))
        return add(x, linear(h, outer_kernel, outer_bias), block.feed_forward_norm), cache


def _self_attention(attention, weights, x, cache, index):
    """One query through a self-attention cache: `(output (batch, 1, dim), cache)`."""
    heads, dim = attention.num_heads, attention.key_dim
    qkv = _reshape(linear(x, *weights["query_key_value"]), (-1, 1, 3, heads, dim))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if attention.rotary is not None:
        q, k = attention.rotary.call(q, start_index=index), attention.rotary.call(k, start_index=index)
    cache = write_slice(cache, [0, 0, index, 0, 0], ops.cast(ops.stack([k, v], axis=1), cache.dtype))
    keys, values, mask, window = cache[:, 0], cache[:, 1], None, attention.attention_window
    if isinstance(index, int):  # known now (eager): attend the written keys (in the window) only, no mask
        first = 0 if window is None else max(0, index + 1 - window)
        keys, values = keys[:, first:index + 1], values[:, first:index + 1]
    else:
        mask = masks.causal_mask(1, ops.shape(keys)[1], index, window)
    output = _one_query(q, keys, values, mask, attention.score_scale)
    return linear(_reshape(output, (-1, 1, heads * attention.value_dim)), *weights["output"]), cache


def _cross_layout(caches):
    """Each block's cross-attention cache `(batch, 2, src_len, heads, dim)` -> `(keys, values)` laid out once
    a decoding call for `_one_query`: on torch keys `(batch, heads, dim, src_len)` and values `(batch, heads,
    src_len, dim)`, contiguous (their permuted views were copied at every step: most of a Whisper step);
    elsewhere `(batch, src_len, heads, dim)` each. None stays None."""
    if caches is None:
        return None
    if keras.backend.backend() == "torch":
        return tuple((c[:, 0].permute(0, 2, 3, 1).contiguous(), c[:, 1].transpose(1, 2).contiguous())
                     for c in caches)
    return tuple((c[:, 0], c[:, 1]) for c in caches)


def _cross_attention(attention, weights, x, cross, mask):
    """One query over precomputed cross-attention keys and values (`_cross_layout`): `(batch, 1, dim)`."""
    q = _reshape(linear(x, *weights["query"]), (-1, 1, attention.num_heads, attention.key_dim))
    if attention.rotary is not None:
        q = attention.rotary.call(q)
    if keras.backend.backend() == "torch":
        output = _torch_one_query(q, *cross, mask, attention.score_scale)
    else:
        output = _one_query(q, *cross, mask, attention.score_scale)
    return linear(_reshape(output, (-1, 1, attention.num_heads * attention.value_dim)), *weights["output"])


def _one_query(q, k, v, mask, scale):
    """Attention of one query `(batch, 1, heads, dim)` to keys `(batch, k_len, heads, dim)`: `(batch, 1, heads,
    dim)`, a product and a sum each way in float32. `mask`: bool `(batch or 1, 1, k_len)` or None."""
    if k.shape[1] == 1:  # one key: its value (softmax's only weight is 1)
        return v
    if keras.backend.backend() == "jax":  # as the layer attends on a JAX CPU (faster there than the sums below)
        return per_head_attention(q, k, v, mask, scale, None, False)
    if keras.backend.backend() == "torch":
        return _torch_one_query(q, k.permute(0, 2, 3, 1), v.transpose(1, 2), mask, scale)
    return one_query_attention(q, k, v, mask, scale)


def _torch_one_query(q, keys, values, mask, scale):
    """`_one_query` on torch with the tensors' own matmuls (no `keras.ops` dispatch a call): keys `(batch,
    heads, dim, k_len)`, values `(batch, heads, k_len, dim)`."""
    scores = (q.transpose(1, 2) * scale) @ keys  # (batch, heads, 1, k_len)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None], masks.MASKED_SCORE)
    return (scores.softmax(-1) @ values).transpose(1, 2)


def _reshape(x, shape):
    """`ops.reshape`; on torch the tensor's own `.reshape` (eager `ops.reshape` searches `shape` for symbolic
    tensors on every call, a dozen calls a step)."""
    return x.reshape(shape) if keras.backend.backend() == "torch" else ops.reshape(x, shape)


def linear(x, kernel, bias=None):
    """`x` `(..., in)` times `kernel` `(in, out)`, plus `bias` `(out,)` if given: `(..., out)`.

    On torch the `@` operator (no `keras.ops` dispatch); elsewhere `ops.matmul`.

    Example:

    >>> import numpy as np
    >>> tuple(linear(np.ones((2, 3, 4), "float32"), np.ones((4, 5), "float32"), np.zeros(5, "float32")).shape)
    (2, 3, 5)
    """
    if keras.backend.backend() == "torch":
        x, kernel = (t if ops.is_tensor(t) else ops.convert_to_tensor(t) for t in (x, kernel))
        y = x @ kernel
    else:
        y = ops.matmul(x, kernel)
    return y if bias is None else y + bias


def _block_weights(block):
    """A decoder block's projections as 2-D matrices: self-attention's query, key and value side by side."""
    def flat(dense):
        kernel = ops.convert_to_tensor(dense.kernel)
        bias = None if dense.bias is None else ops.reshape(dense.bias, (-1,))
        return ops.reshape(kernel, (kernel.shape[0], -1)), bias

    def attention(layer):
        weights = {name: flat(getattr(layer, f"{name}_dense")) for name in ("query", "key", "value")}
        kernel, bias = flat(layer.output_dense)
        weights["output"] = (ops.reshape(kernel, (layer.num_heads * layer.value_dim, -1)), bias)
        parts = [weights[name] for name in ("query", "key", "value")]
        weights["query_key_value"] = (ops.concatenate([k for k, _ in parts], axis=1),
                                      None if parts[0][1] is None else ops.concatenate([b for _, b in parts]))
        return weights

    feed_forward = []
    for dense in (block.feed_forward.inner, block.feed_forward.outer):
        feed_forward += [ops.convert_to_tensor(dense.kernel),
                         None if dense.bias is None else ops.convert_to_tensor(dense.bias)]
    return {"self": attention(block.self_attention), "feed_forward": tuple(feed_forward),
            "cross": None if block.cross_attention is None else attention(block.cross_attention)}


def _source_mask(source_mask):
    """The source padding `(batch, source_len)` as the cross-attention mask of every step `(batch, 1,
    source_len)`, made once; None where no source token is padding and that is known now (eager torch)."""
    if source_mask is None:
        return None
    try:
        if bool(ops.convert_to_numpy(ops.all(source_mask))):
            return None
    except Exception:  # noqa: BLE001 (traced in a compiled loop: TF, JAX)
        pass
    return masks.key_padding_mask(source_mask)


def _smaller(a, b):
    return min(a, b) if isinstance(a, int) else ops.minimum(a, b)


def _known(index):
    """The step's position as an int where it is known now (torch's eager loop), else unchanged."""
    known = known_index("index", index)
    return index if known is None else known


def _has_plain_weights(layer):
    """Float weights in the compute dtype (no mixed or quantized policy) in `layer` and its sublayers."""
    if layer.compute_dtype != layer.variable_dtype:
        return False
    return all(sub.dtype_policy.quantization_mode is None for sub in layer._flatten_layers())
