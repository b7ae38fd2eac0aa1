"""Step-by-step views of the two generating families, used by `kformer.models.generate`.

Each adapter turns a task into the same four calls: `prefill` (the first
logits, the token buffer, which positions are prompt, and the caches),
`step` (one token through the cached blocks -> next logits), `recompute` (the
cache-free reference) and `repeat` (copies per beam). Only `keras.ops`.
"""

from keras import ops

from kformer.layers import masks
from kformer.layers.checks import has_plain_weights
from kformer.layers.linear import linear
from kformer.layers.slices import slice_rows

NEG_INF = -1e9


def adapter(model):
    """The decoding adapter of a `Translator` or a `CausalLM`; a ValueError names anything else."""
    if all(hasattr(model, a) for a in ("encoder_embedding", "encoder_blocks", "decoder_blocks")):
        return TranslatorDecoder(model)
    if all(hasattr(model, a) for a in ("token_embedding", "decoder_blocks", "final_norm")):
        return CausalDecoder(model)
    raise ValueError("`model` must be a kformer `Translator` or `CausalLM` (built by `kformer.models` or "
                     f"loaded with `kformer.models.load`). Received: {type(model).__name__}")


def cross_mask(source_mask):
    """The source padding `(batch, source_len)` as the cross-attention mask of every cached step,
    built once per call (`masks.key_padding_mask`), or None where no source token is padding and
    that is known now (torch's eager loop: the cross-attention then runs unmasked)."""
    try:
        if bool(ops.convert_to_numpy(ops.all(source_mask))):
            return None
    except Exception:  # noqa: BLE001 (traced in a compiled loop: TF, JAX)
        pass
    return masks.key_padding_mask(source_mask)


class _Decoder:
    def __init__(self, blocks, embedding, norm, output_projection):
        self.blocks, self.embedding, self.norm = blocks, embedding, norm
        self.output_projection = output_projection
        self.vocabulary_size = embedding.vocabulary_size
        attention = blocks[0].self_attention
        self.num_heads, self.head_dim = attention.num_heads, attention.key_dim
        self.position_limit = embedding.sequence_length if embedding.position == "learned" else None

    def empty_caches(self, batch, length, dtype):
        """One `(batch, 2, length, heads, head_dim)` cache a block, as a tuple: a step updates each
        in place of stacking them anew (a copy of every cache a step in eager torch)."""
        return tuple(ops.zeros((batch, 2, length, self.num_heads, self.head_dim), dtype=dtype)
                     for _ in self.blocks)

    def position_table(self, length):
        """Encodings of positions `[0, length)` (learned: at most the table's rows), made once per
        call; None without position embeddings. Sinusoids computed inside the XLA loop got fused
        into each of the next projections and recomputed per output: TF steps 1.7x slower at batch 1."""
        limit = self.position_limit
        return self.embedding.position_table(length if limit is None else min(length, limit))

    def decoding_weights(self):
        """Each block's `decoding_weights()` (2-D projection kernels), made once per call outside
        the loop; None when a block or the embedding has mixed or quantized weights (then every
        layer decodes through `__call__`)."""
        if not has_plain_weights(self.embedding):
            return None
        weights = [block.decoding_weights() for block in self.blocks]
        return None if any(w is None for w in weights) else weights

    def block_step(self, i, h, caches, index, extra, cross=None):
        """Block `i` on `h` at cache `index` -> `(h, cache)`, by `decode_step` when it applies
        (with the source mask prepared once, `extra["cross_mask"]`)."""
        block, weights = self.blocks[i], extra.get("weights")
        if weights is not None:
            return block.decode_step(h, caches[i], index, weights[i], cross_cache=cross,
                                     encoder_padding_mask=extra.get("cross_mask"))
        kwargs = {} if cross is None else {"cross_attention_cache": cross, "encoder_padding_mask": extra["mask"]}
        return block(h, self_attention_cache=caches[i], self_attention_cache_update_index=index, **kwargs)[:2]

    def embed(self, tokens, index, extra):
        """Token + position embeddings of `tokens` `(batch, n)` at positions `index..`."""
        table = extra.get("positions")
        rows = None if table is None else slice_rows(table, index, ops.shape(tokens)[1])
        if extra.get("weights") is not None:  # plain weights: no `__call__` (0.1 ms a step in eager torch)
            return self.embedding.lookup(tokens, rows)
        return self.embedding(tokens, start_index=index, positions=rows)

    def output_kernel(self):
        """The tied output projection as a `(dim, vocab)` matrix, transposed once per call outside the
        loop (inside TensorFlow's XLA loop the transpose copied the whole table every step), or None."""
        if self.output_projection is not None:
            return None
        # Laid out afresh (a reshape of the transposed view): torch multiplies one token by a
        # transposed 8000 x 256 view about 0.5 ms slower a step than by a contiguous copy.
        table = self.embedding.reverse_table()
        return ops.reshape(ops.reshape(table, (-1,)), ops.shape(table))

    def project(self, h, extra=None):
        """Hidden states `(batch, n, dim)` -> float32 logits `(batch, n, vocab)`; id 0 never chosen."""
        kernel = None if extra is None else extra.get("output_kernel")
        if self.norm is not None:
            plain = extra is not None and extra.get("weights") is not None
            h = self.norm.call(h) if plain else self.norm(h)
        if kernel is not None:
            logits = linear(h, kernel)
        else:
            logits = self.embedding(h, reverse=True) if self.output_projection is None else self.output_projection(h)
        return ops.where(ops.arange(self.vocabulary_size) == 0, NEG_INF, ops.cast(logits, "float32"))

    def step(self, tokens, index, caches, extra):
        """One token a row `(batch, 1)` written at cache `index` (with the cross-attention caches of
        `extra["cross"]`, if any) -> its next-token logits `(batch, vocab)`, the updated caches."""
        h = self.embed(tokens, index, extra)
        cross = extra.get("cross")
        updated = []
        for i in range(len(self.blocks)):
            h, cache = self.block_step(i, h, caches, index, extra, cross=None if cross is None else cross[i])
            updated.append(cache)
        return self.project(h, extra)[:, 0], tuple(updated)


class TranslatorDecoder(_Decoder):
    """Encoder once, cross-attention keys/values once; the buffer starts with `[START]`."""

    family = "translator"

    def __init__(self, model):
        super().__init__(model.decoder_blocks, model.decoder_embedding, model.decoder_norm,
                         model.output_projection)
        self.model = model
        self.source_vocabulary_size = model.encoder_embedding.vocabulary_size

    def encode(self, source):
        mask = ops.not_equal(source, 0)
        x = self.model.encoder_embedding(source)
        for block in self.model.encoder_blocks:
            x = block(x, padding_mask=mask)
        if self.model.encoder_norm is not None:
            x = self.model.encoder_norm(x)
        return x, mask

    def prefill(self, source, c):
        encoder_outputs, mask = self.encode(source)
        cross = tuple(b.compute_cross_attention_cache(encoder_outputs) for b in self.blocks)
        batch, length = ops.shape(source)[0], c["max_length"] + 1
        tokens = ops.concatenate([ops.full((batch, 1), c["start_token_id"], "int32"),
                                  ops.zeros((batch, length - 1), "int32")], axis=1)
        prompt = ops.broadcast_to(ops.arange(length) < 1, (batch, length))
        extra = {"cross": cross, "mask": mask, "cross_mask": cross_mask(mask), "encoder_outputs": encoder_outputs,
                 "positions": self.position_table(length), "weights": self.decoding_weights(),
                 "output_kernel": self.output_kernel()}
        caches = self.empty_caches(batch, length if c["use_cache"] else 1, cross[0].dtype)
        if not c["use_cache"]:
            return tokens, prompt, 1, caches, extra, self.recompute(tokens, 0, extra)
        logits, caches = self.step(tokens[:, :1], 0, caches, extra)
        return tokens, prompt, 1, caches, extra, logits

    def recompute(self, tokens, index, extra):
        h = self.embedding(tokens[:, :-1])  # the buffer is [START] + max_length slots
        for block in self.blocks:
            h = block(h, extra["encoder_outputs"], encoder_padding_mask=extra["mask"])
        return self.project(ops.take(h, index, axis=1)[:, None])[:, 0]

    def repeat(self, extra, beams):
        return {**extra, "cross": tuple(ops.repeat(cross, beams, axis=0) for cross in extra["cross"]),
                "mask": ops.repeat(extra["mask"], beams, axis=0),
                "cross_mask": None if extra["cross_mask"] is None else ops.repeat(extra["cross_mask"], beams, axis=0),
                "encoder_outputs": ops.repeat(extra["encoder_outputs"], beams, axis=0)}

    def output(self, tokens):
        return tokens[:, 1:]  # drop [START]


class CausalDecoder(_Decoder):
    """Right-padded prompts: the shortest prompt is processed in one pass; longer prompts'
    remaining tokens are then fed (forced) one step at a time, so every row continues exactly
    as it would alone."""

    family = "causal"

    def __init__(self, model):
        super().__init__(model.decoder_blocks, model.token_embedding, model.final_norm, model.output_projection)

    def prefill(self, prompt, c):
        batch, length = ops.shape(prompt)[0], c["max_length"]
        tokens = ops.pad(prompt, [[0, 0], [0, length - ops.shape(prompt)[1]]])
        lengths = ops.sum(ops.cast(ops.not_equal(tokens, 0), "int32"), axis=1)
        prompt_mask = ops.arange(length)[None, :] < lengths[:, None]
        start = ops.maximum(ops.min(lengths), 1)  # the shortest prompt is prefilled in one pass
        caches = self.empty_caches(batch, length if c["use_cache"] else 1, self.embedding.compute_dtype)
        if not c["use_cache"]:
            return tokens, prompt_mask, start, caches, {}, self.recompute(tokens, start - 1, {})
        # One pass over the given prompt width (a static shape); keys past `start` are hidden now
        # and overwritten step by step later.
        h = self.embedding(prompt)
        visible = ops.broadcast_to(ops.arange(length)[None, :] < start, (batch, length))
        updated = []
        for i, block in enumerate(self.blocks):
            h, cache = block(h, self_attention_cache=caches[i], self_attention_cache_update_index=0,
                             decoder_padding_mask=visible)
            updated.append(cache)
        logits = self.project(ops.take(h, start - 1, axis=1)[:, None])[:, 0]
        extra = {"positions": self.position_table(length), "weights": self.decoding_weights(),
                 "output_kernel": self.output_kernel()}
        return tokens, prompt_mask, start, tuple(updated), extra, logits

    def recompute(self, tokens, index, extra):
        h = self.embedding(tokens)
        for block in self.blocks:
            h = block(h)
        return self.project(ops.take(h, index, axis=1)[:, None])[:, 0]

    def repeat(self, extra, beams):
        return extra

    def output(self, tokens):
        return tokens
