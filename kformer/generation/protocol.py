"""The decoding protocol: what a task that generates tokens implements for `kformer.models.generate`.

Like keras-hub's `call_with_cache`, a generative task runs its own decoder
one step at a time through per-block key/value caches; `generate` owns the
search (greedy, beam, sampling) and calls these methods only. `Translator`
and `CausalLM` implement it; each method is the task's readable computation
through its layers' `call`s.
"""

from keras import ops

from kformer.generation.config import GenerationConfig
from kformer.generation.samplers import NEG_INF  # noqa: F401  (the search reads it here)


class GenerativeTask:
    """The decoding protocol: a mixin for a `kformer.models.Task` that generates tokens through key/value caches.

    Subclasses implement `decoder_parts`, `prefill`, `call_with_cache`,
    `call_without_cache`, `repeat_context` and `generated_tokens`, and set
    `decoding_family` (`"translator"`: a source in, `[START]` first;
    `"causal"`: a prompt continued). `generate` checks its arguments against
    `decoding_limits()`. `generation_config` is the task's default
    `GenerationConfig` (saved with the model when one is set).

    Example:

    >>> from kformer import models
    >>> lm = models.causal_lm(preset="gpt_tiny", vocabulary_size=50)
    >>> isinstance(lm, GenerativeTask), lm.decoding_limits()["vocabulary_size"]
    (True, 50)
    """

    decoding_family = None
    padding_id = 0  # the id that pads token ids; never generated (a `Translator` of a checkpoint may set another)

    @property
    def generation_config(self):
        """The `GenerationConfig` `generate` starts from: the one set (`task.generation_config = ...`, a
        constructor's `generation_config`, a checkpoint's), else `default_generation_config()`."""
        stored = getattr(self, "_generation_config", None)
        return stored if stored is not None else self.default_generation_config()

    @generation_config.setter
    def generation_config(self, config):
        self._set_generation_config(config)

    def _set_generation_config(self, config):
        """Set the task's `GenerationConfig` (a config, its dict, or None: `default_generation_config()`); a
        constructor calls this, not the property (TensorFlow's attribute tracking reads a property first)."""
        if isinstance(config, dict):
            config = GenerationConfig.from_dict(config)
        if config is not None and not isinstance(config, GenerationConfig):
            raise ValueError("`generation_config` must be a `kformer.generation.GenerationConfig`, its dict, or "
                             f"None. Received: generation_config={config!r}")
        self._generation_config = config

    def default_generation_config(self):
        """The task's `GenerationConfig` when none is set (from its preprocessor where it has one)."""
        return GenerationConfig()

    def _config_with(self, config, overrides):
        """`config` (default `self.generation_config`) with `overrides` (`GenerationConfig` fields), as
        `generate`, `translate` and `CausalLM.generate` take them. `max_length=None` keeps the config's
        length: 0.2's spelling of "the default length"."""
        config = self.generation_config if config is None else config
        if "max_length" in overrides and overrides["max_length"] is None:
            overrides = {key: value for key, value in overrides.items() if key != "max_length"}
        return config.replace(**overrides) if overrides else config

    def get_config(self):
        config = super().get_config()
        stored = getattr(self, "_generation_config", None)
        config["generation_config"] = None if stored is None else stored.to_dict()
        return config

    def decoder_parts(self):
        """`(embedding, blocks, final_norm or None, output_projection or None)`: the layers a decoding step runs
        (the output projection is None when it is the embedding's table, transposed)."""
        raise NotImplementedError

    def prefill(self, token_ids, max_length, start_ids, use_cache):
        """The state before the first generated token: `(tokens, prompt, start, cache, context, logits)`.

        `start_ids`: a translator's decoder start token and forced ids (a
        tuple; a language model's is empty: its prompt is `token_ids`).

        `tokens` int `(batch, length)` is the buffer the loop writes, `prompt`
        bool `(batch, length)` marks positions forced to the given tokens,
        `start` the first position to write, `cache` one
        `(batch, 2, length, heads, head_dim)` tensor a block, `context` what
        every step reads (encoder outputs, ...), `logits` `(batch, vocab)` for
        position `start`.
        """
        raise NotImplementedError

    def call_with_cache(self, token_ids, cache, cache_update_index, context, cache_padding_mask=None):
        """`token_ids` `(batch, n)` at positions `cache_update_index..` through the cached decoder:
        `(logits (batch, n, vocab) float32, updated cache)`. `cache_padding_mask` `(batch, length)`:
        cache positions that may be attended (default: every position written so far)."""
        raise NotImplementedError

    def call_without_cache(self, tokens, index, context):
        """The reference without a cache: the decoder over the whole buffer, logits `(batch, vocab)` at `index`."""
        raise NotImplementedError

    def repeat_context(self, context, beams):
        """`context` with each row repeated `beams` times (beam search)."""
        raise NotImplementedError

    def generated_tokens(self, tokens):
        """The part of the final buffer that `generate` returns."""
        raise NotImplementedError

    def decoding_limits(self):
        """`{"vocabulary_size", "source_vocabulary_size", "position_limit", "padding_id"}`: what `generate`
        checks ids and lengths against (`position_limit`: the learned positions, or None)."""
        embedding = self.decoder_parts()[0]
        source = getattr(self, "encoder_embedding", embedding)
        limit = embedding.sequence_length if embedding.position == "learned" else None
        return {"vocabulary_size": embedding.vocabulary_size, "source_vocabulary_size": source.vocabulary_size,
                "position_limit": limit, "padding_id": self.padding_id}

    def empty_cache(self, batch, length, dtype):
        """One zero `(batch, 2, length, heads, head_dim)` cache a decoder block, as a tuple."""
        blocks = self.decoder_parts()[1]
        attention = blocks[0].self_attention
        return tuple(ops.zeros((batch, 2, length, attention.num_heads, attention.key_dim), dtype=dtype)
                     for _ in blocks)

    def logits(self, hidden, output_table=None):
        """Decoder outputs `(batch, n, hidden_dim)` -> float32 logits `(batch, n, vocab)` (the search bans the
        padding id: `kformer.models.generate`). `output_table`: the tied projection's kernel from
        `output_table()`, made once a decoding call (`context["output_table"]`), or None."""
        embedding, _, norm, projection = self.decoder_parts()
        if norm is not None:
            hidden = norm(hidden)
        if projection is None:
            return ops.cast(embedding(hidden, reverse=True, output_table=output_table), "float32")
        return ops.cast(projection(hidden), "float32")

    def output_table(self):
        """The tied output projection's kernel `(hidden_dim, vocab)` for a decoding call's context, or None
        where the projection is its own layer. Made once before the loop: transposed inside it, XLA:CPU
        fused the transpose into each step's matrix-vector product."""
        embedding, _, _, projection = self.decoder_parts()
        return embedding.output_table() if projection is None else None

    def _run_blocks(self, x, cache, cache_update_index, cache_padding_mask=None, **cross):
        """Every decoder block on `x` through its cache: `(x, updated cache)`."""
        updated = []
        for i, block in enumerate(self.decoder_parts()[1]):
            kwargs = {key: value[i] if key == "cross_attention_cache" else value for key, value in cross.items()}
            x, block_cache = block(x, self_attention_cache=cache[i], decoder_padding_mask=cache_padding_mask,
                                   self_attention_cache_update_index=cache_update_index, **kwargs)[:2]
            updated.append(block_cache)
        return x, tuple(updated)


class EncoderDecoderTask(GenerativeTask):
    """The decoding protocol of an encoder-decoder (`Translator`, `SpeechToText`): the source is encoded
    once, then the decoder runs a step at a time, attending to it.

    A subclass has `encode(source) -> (encoder outputs (batch, src_len, hidden_dim), source mask (batch,
    src_len))` and the attributes `decoder_embedding` (a `TokenAndPositionEmbedding`), `decoder_blocks`,
    `decoder_norm` (or None) and `output_projection` (None when tied). `source_dtype` is what the source
    is: `"int32"` token ids, or `"float32"` features (`check_source` then checks them).
    """

    decoding_family = "translator"
    source_dtype = "int32"

    def decoder_parts(self):
        return self.decoder_embedding, self.decoder_blocks, self.decoder_norm, self.output_projection

    def prefill(self, token_ids, max_length, start_ids, use_cache):
        """Encode the source once and its cross-attention keys/values once; the buffer starts with `[START]`
        (`start_ids[0]`), then the forced ids (`start_ids[1:]`, written by the loop)."""
        encoder_outputs, source_mask = self.encode(token_ids)
        cross = tuple(block.compute_cross_attention_cache(encoder_outputs) for block in self.decoder_blocks)
        batch, length = ops.shape(token_ids)[0], max_length + 1
        given = ops.convert_to_tensor([list(start_ids) + [0] * (length - len(start_ids))], "int32")
        tokens = ops.repeat(given, batch, axis=0)
        prompt = ops.broadcast_to(ops.arange(length) < len(start_ids), (batch, length))
        # The position encodings once, sliced a step at a time (`call_with_cache`): sinusoids computed inside
        # TensorFlow's XLA loop were fused into the next projections and recomputed for each of their outputs.
        embedding = self.decoder_embedding
        limit = embedding.sequence_length if embedding.position == "learned" else None
        positions = embedding.position_table(length if limit is None else min(length, limit))
        context = {"cross_attention_cache": cross, "source_mask": source_mask, "encoder_outputs": encoder_outputs,
                   "positions": positions, "output_table": self.output_table()}
        cache = self.empty_cache(batch, length if use_cache else 1, cross[0].dtype)
        if not use_cache:
            return tokens, prompt, 1, cache, context, self.call_without_cache(tokens, 0, context)
        logits, cache = self.call_with_cache(tokens[:, :1], cache, 0, context)
        return tokens, prompt, 1, cache, context, logits[:, -1]

    def call_with_cache(self, token_ids, cache, cache_update_index, context, cache_padding_mask=None):
        positions = context.get("positions")
        if positions is not None:  # the rows of this step's positions
            positions = ops.slice(positions, [cache_update_index, 0],
                                  [ops.shape(token_ids)[1], self.decoder_embedding.hidden_dim])
        x = self.decoder_embedding(token_ids, start_index=cache_update_index, positions=positions)
        x, cache = self._run_blocks(x, cache, cache_update_index, cache_padding_mask,
                                    cross_attention_cache=context["cross_attention_cache"],
                                    encoder_padding_mask=context["source_mask"])
        return self.logits(x, context.get("output_table")), cache

    def call_without_cache(self, tokens, index, context):
        x = self.decoder_embedding(tokens[:, :-1])  # the buffer is [START] + max_length slots
        for block in self.decoder_blocks:
            x = block(x, context["encoder_outputs"], encoder_padding_mask=context["source_mask"])
        return self.logits(ops.take(x, index, axis=1)[:, None], context.get("output_table"))[:, 0]

    def repeat_context(self, context, beams):
        return {"cross_attention_cache": tuple(ops.repeat(c, beams, axis=0) for c in context["cross_attention_cache"]),
                "source_mask": ops.repeat(context["source_mask"], beams, axis=0),
                "encoder_outputs": ops.repeat(context["encoder_outputs"], beams, axis=0),
                "positions": context.get("positions"), "output_table": context.get("output_table")}

    def generated_tokens(self, tokens):
        return tokens[:, 1:]  # without [START]

    def check_source(self, source):
        """A feature source (`source_dtype` float) as numpy, checked (a ValueError naming it); token ids are
        checked by the generation config against the vocabulary instead."""
        raise NotImplementedError
