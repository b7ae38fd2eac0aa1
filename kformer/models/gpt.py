"""Decoder-only causal language model (GPT-2, Radford et al. 2019)."""

import keras
import numpy as np
from keras import ops

from kformer import blocks, layers
from kformer.generation.config import GenerationConfig
from kformer.generation.protocol import GenerativeTask
from kformer.generation.search import generate as generate_ids
from kformer.layers import activations
from kformer.layers.checks import check_positive_ints, check_rates
from kformer.models.registry import builder, register
from kformer.models.task import Task, check_length_fits, check_tokenizer_fits

POSITIONS = ("learned", "rotary")
MOE_METRICS = ("balancing_loss", "dropped_tokens", "dropped_fraction")  # fit's `moe_*` logs
ATTENTION_TYPES = ("global", "local")
GPT2 = dict(vocabulary_size=50257, sequence_length=1024, dropout=0.1)


@keras.saving.register_keras_serializable(package="kformer")
class CausalLM(GenerativeTask, Task):
    """Token ids `(batch, seq)` -> next-token logits `(batch, seq, vocabulary_size)`.

    Token embedding, learned positions (GPT-2) or rotary positions in every
    self-attention (RoPE), `num_layers` pre-norm GELU decoder blocks without
    cross-attention, a final LayerNorm and the output projection tied to the
    token embedding. Id 0 is padding (never generated). `generate` continues
    prompts: token ids in, ids out, or strings in, strings out with a
    `CausalLMPreprocessor`.

    Args:
        vocabulary_size: int. Defaults to `50257` (GPT-2's byte-level BPE).
        sequence_length: int. Longest sequence (learned positions; also the
            generation bound). Defaults to `1024`.
        hidden_dim, num_layers, num_heads, intermediate_dim: ints.
        dropout: float. Embedding, attention-output and MLP-output dropout.
            Defaults to `0.1`.
        position: `"learned"` or `"rotary"`. Defaults to `"learned"`.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        activation: `"gelu"` (exact, erf) or `"gelu_approximate"` (the tanh
            form, GPT-2's `gelu_new`). Defaults to `"gelu"`.
        tie_output_embedding: bool. Defaults to `True`.
        attention_window: int or None. The sliding window of `"local"` layers:
            each position attends the last `attention_window` positions, itself
            included (GPT-Neo). Defaults to `None`.
        attention_types: list of `"global"` / `"local"`, one per layer, or a
            shorter pattern repeated over the layers (`["global", "local"]`
            alternates, as GPT-Neo); GPT-Neo's `[[["global", "local"], 6]]` form
            is read too. Defaults to every layer `"local"` with an
            `attention_window`, else `"global"`.
        attention_scale: float or None. Multiplies the attention scores.
            Defaults to `None` (`1 / sqrt(head_dim)`; GPT-Neo: `1.0`).
        use_qkv_bias: bool. Biases in the query, key and value projections.
            Defaults to `True` (GPT-Neo: `False`).
        num_experts: int. `> 0`: every `moe_every`-th block (the last of each
            group, as in GShard and Switch) has a top-`top_k` `MixtureOfExperts`
            feed-forward instead of the dense one. Defaults to `0` (none).
        moe_every, top_k: ints. Defaults to `2` and `2` (GShard).
        expert_intermediate_dim: int or None. Hidden width of each expert.
            Defaults to `None`: `intermediate_dim` (`intermediate_dim // top_k`
            gives the dense model's feed-forward FLOPs per token).
        capacity_factor: float. Expert capacity over an even split of a
            sequence's token choices; in training, choices over it are dropped
            (the residual passes the token through). Defaults to `1.25`.
        preprocessor: `kformer.data.preprocessors.CausalLMPreprocessor` or None.
        generation_config: `kformer.generation.GenerationConfig` (or its
            dict) or None: `generate`'s defaults. None:
            `default_generation_config()`.

    Attributes: `token_embedding`, `decoder_blocks`, `final_norm`,
    `output_projection` (None when tied), `experts` (the `MixtureOfExperts`
    layers). With experts, `fit` logs
    `moe_balancing_loss` (mean over the expert layers of the unscaled
    balancing loss, 1 = balanced), `moe_dropped_tokens` (token choices over
    capacity per step, all expert layers) and `moe_dropped_fraction`.

    Example:

    >>> import numpy as np
    >>> lm = CausalLM(vocabulary_size=50, sequence_length=16, hidden_dim=16, num_layers=1,
    ...               num_heads=2, intermediate_dim=32)
    >>> tuple(lm(np.ones((2, 5), "int32")).shape)
    (2, 5, 50)
    >>> lm.generate(np.array([[5, 6, 0], [7, 0, 0]]), max_length=6).shape  # right-padded prompts
    (2, 6)
    """

    task_type = "text_generation"
    decoding_family = "causal"

    def __init__(self, vocabulary_size=50257, sequence_length=1024, hidden_dim=768, num_layers=12,
                 num_heads=12, intermediate_dim=3072, dropout=0.1, position="learned",
                 layer_norm_epsilon=1e-5, tie_output_embedding=True, preprocessor=None, activation="gelu",
                 attention_window=None, attention_types=None, attention_scale=None, use_qkv_bias=True,
                 num_experts=0, moe_every=2, top_k=2, expert_intermediate_dim=None, capacity_factor=1.25,
                 generation_config=None, **kwargs):
        check_positive_ints(vocabulary_size=vocabulary_size, sequence_length=sequence_length,
                            hidden_dim=hidden_dim, num_layers=num_layers, num_heads=num_heads,
                            intermediate_dim=intermediate_dim)
        check_rates(dropout=dropout)
        if position not in POSITIONS:
            raise ValueError(f"`position` must be one of {POSITIONS}. Received: position={position!r}")
        activation_fn = activations.get(activation)
        moe = _expert_settings(num_experts, moe_every, top_k, intermediate_dim, expert_intermediate_dim,
                               capacity_factor, num_layers)  # each block's feed-forward arguments
        windows = _layer_windows(attention_types, attention_window, num_layers)
        init = keras.initializers.RandomNormal(stddev=0.02)
        token_embedding = layers.TokenAndPositionEmbedding(
            vocabulary_size, sequence_length, hidden_dim, position="learned" if position == "learned" else "none",
            embeddings_initializer=init, name="embedding")
        decoder_blocks = [blocks.TransformerDecoderBlock(
            num_heads, dropout=dropout, activation=activation_fn, normalize_first=True,
            layer_norm_epsilon=layer_norm_epsilon, kernel_initializer=init,
            rotary_max_wavelength=10000 if position == "rotary" else None, attention_window=windows[i],
            attention_scale=attention_scale, use_qkv_bias=use_qkv_bias, **moe[i], name=f"decoder_{i}")
            for i in range(num_layers)]
        final_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="final_norm")
        output_projection = None if tie_output_embedding else keras.layers.Dense(
            vocabulary_size, use_bias=False, kernel_initializer=init, name="output_projection")

        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        x = keras.layers.Dropout(dropout, name="embedding_dropout")(token_embedding(token_ids))
        for block in decoder_blocks:
            x = block(x)
        x = final_norm(x)
        logits = token_embedding(x, reverse=True) if output_projection is None else output_projection(x)
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(inputs=token_ids, outputs=logits, **kwargs)
        self.token_embedding, self.decoder_blocks, self.final_norm = token_embedding, decoder_blocks, final_norm
        self.output_projection = output_projection
        self.vocabulary_size, self.sequence_length, self.hidden_dim = vocabulary_size, sequence_length, hidden_dim
        self.num_layers, self.num_heads, self.intermediate_dim = num_layers, num_heads, intermediate_dim
        self.dropout, self.position, self.layer_norm_epsilon = dropout, position, layer_norm_epsilon
        self.tie_output_embedding, self.activation = tie_output_embedding, activation
        self.attention_window, self.attention_types = attention_window, attention_types
        self.attention_scale, self.use_qkv_bias = attention_scale, use_qkv_bias
        self.num_experts, self.moe_every, self.top_k = num_experts, moe_every, top_k
        self.expert_intermediate_dim, self.capacity_factor = expert_intermediate_dim, capacity_factor
        self.moe_trackers = [keras.metrics.Mean(name=f"moe_{key}") for key in MOE_METRICS] if num_experts else []
        self._set_preprocessor(preprocessor)
        self._set_generation_config(generation_config)

    @classmethod
    def from_config(cls, config):
        preprocessor = config.get("preprocessor")
        if isinstance(preprocessor, dict) and "GPT2CausalLMPreprocessor" in str(preprocessor.get("registered_name")):
            import kformer.data.bpe  # noqa: F401  (registers the GPT-2 preprocessor; data/ only when asked)
        return super().from_config(config)

    def transformer_blocks(self):
        return self, [], list(self.decoder_blocks)

    @property
    def experts(self):
        """The `MixtureOfExperts` feed-forwards, first block first (empty without experts)."""
        return [block.feed_forward for block in self.decoder_blocks if block.num_experts]

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        self._logging_routing = bool(training) and bool(self.experts)  # read by compute_metrics in this step
        if self._logging_routing:  # the expert layers recorded this batch's routing in their state
            stats = [layer.routing_statistics() for layer in self.experts]
            values = {"balancing_loss": sum(s["balancing_loss"] for s in stats) / len(stats),
                      "dropped_tokens": sum(s["dropped_tokens"] for s in stats)}
            values["dropped_fraction"] = values["dropped_tokens"] / ops.maximum(
                sum(ops.sum(s["routed_tokens"]) for s in stats), 1.0)
            for tracker, key in zip(self.moe_trackers, MOE_METRICS):
                tracker.update_state(values[key])
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        logs = super().compute_metrics(x, y, y_pred, sample_weight)
        if self.experts and not getattr(self, "_logging_routing", False):  # evaluation: no routing recorded
            logs = {k: v for k, v in logs.items() if k not in {t.name for t in self.moe_trackers}}
        return logs

    def input_limits(self):
        return {"token_ids": (self.vocabulary_size, self.sequence_length if self.position == "learned" else None)}

    def label_limits(self):
        return {self.output_names[0]: self.vocabulary_size}

    def validate_preprocessor(self, preprocessor=None):
        preprocessor = self.preprocessor if preprocessor is None else preprocessor
        if preprocessor is not None:
            check_tokenizer_fits(preprocessor, "tokenizer", self.vocabulary_size)
            if self.position == "learned":
                check_length_fits(preprocessor, self.sequence_length)

    # The decoding protocol (`kformer.generation.protocol.GenerativeTask`), called by `generate`.
    def decoder_parts(self):
        return self.token_embedding, self.decoder_blocks, self.final_norm, self.output_projection

    def prefill(self, token_ids, max_length, start_ids, use_cache):
        """Right-padded prompts: the shortest prompt runs in one pass; the longer prompts' remaining tokens
        are then forced one step at a time, so every row continues exactly as it would alone."""
        batch = ops.shape(token_ids)[0]
        tokens = ops.pad(token_ids, [[0, 0], [0, max_length - ops.shape(token_ids)[1]]])
        lengths = ops.sum(ops.cast(ops.not_equal(tokens, 0), "int32"), axis=1)
        prompt = ops.arange(max_length)[None, :] < lengths[:, None]
        start = ops.maximum(ops.min(lengths), 1)
        cache = self.empty_cache(batch, max_length if use_cache else 1, self.token_embedding.compute_dtype)
        context = {"output_table": self.output_table()}
        if not use_cache:
            return tokens, prompt, start, cache, context, self.call_without_cache(tokens, start - 1, context)
        # One pass over the given prompt width (a static shape); keys past `start` are hidden now and
        # overwritten step by step later.
        visible = ops.broadcast_to(ops.arange(max_length)[None, :] < start, (batch, max_length))
        logits, cache = self.call_with_cache(token_ids, cache, 0, context, cache_padding_mask=visible)
        return tokens, prompt, start, cache, context, ops.take(logits, start - 1, axis=1)

    def call_with_cache(self, token_ids, cache, cache_update_index, context, cache_padding_mask=None):
        x = self.token_embedding(token_ids, start_index=cache_update_index)
        x, cache = self._run_blocks(x, cache, cache_update_index, cache_padding_mask)
        return self.logits(x, context.get("output_table")), cache

    def call_without_cache(self, tokens, index, context):
        x = self.token_embedding(tokens)
        for block in self.decoder_blocks:
            x = block(x)
        return self.logits(ops.take(x, index, axis=1)[:, None], context.get("output_table"))[:, 0]

    def repeat_context(self, context, beams):
        return context

    def generated_tokens(self, tokens):
        return tokens

    def default_generation_config(self):
        """Greedy up to the preprocessor's `sequence_length`, stopping at its end token; without a preprocessor
        up to the model's `sequence_length`, with no stop id."""
        if self.preprocessor is None:
            return GenerationConfig(max_length=self.sequence_length)
        return GenerationConfig(max_length=self.preprocessor.sequence_length,
                                stop_token_ids=self.preprocessor.end_token_id)

    def generate(self, prompts, config=None, *, streamer=None, **overrides):
        """Continue prompts: ids in, ids out; or, with a preprocessor, strings in, strings out.

        Args:
            prompts: int token ids `(batch, prompt_len)`, right-padded with 0;
                or a str / list of str (needs the preprocessor).
            config: a `GenerationConfig`. Defaults to `self.generation_config`
                (greedy, `max_length` the preprocessor's `sequence_length`,
                or the model's). A string prompt of `max_length` tokens or
                more (start token included) is a ValueError naming it:
                nothing would be left to generate. (The export keeps a long
                prompt's beginning.)
            streamer: callable or None: as in `kformer.models.generate`
                (each step's token ids `(batch,)` as they come).
            **overrides: `GenerationConfig` fields (`max_length`,
                `sampler=TopPSampler(p=0.9)`, `seed`, `stop_token_ids`,
                `strip_prompt`, ...).

        Returns:
            int32 `(batch * num_return_sequences, max_length)` (the prompt,
            then the generated tokens, then 0) for ids; the prompt +
            continuation text for strings (the continuation alone with
            `strip_prompt=True`).
        """
        config = self._config_with(config, overrides)
        if not self._raw(prompts):
            return generate_ids(self, prompts, config, streamer=streamer)
        preprocessor = self.preprocessor
        single = isinstance(prompts, str)
        max_length = config.max_length
        valid = max_length is not None
        # One token more than fits, so a prompt that leaves no room to generate is seen (and named).
        ids = preprocessor.prompt_ids([prompts] if single else prompts, max_tokens=max_length if valid else None)
        if valid:
            lengths = np.count_nonzero(ids, axis=1)
            too_long = np.flatnonzero(lengths >= max_length)
            if too_long.size:
                i = int(too_long[0])
                raise ValueError(f"`prompts`[{i}] is {max_length} or more tokens long (a start token included), "
                                 f"but `max_length`={max_length} leaves room for {max_length - 1} before the first "
                                 f"generated token ({too_long.size} of {len(ids)} prompts are that long). Raise "
                                 "`max_length` or shorten the prompt.")
        texts = preprocessor.detokenize(generate_ids(self, ids, config, streamer=streamer))
        return texts[0] if single and config.num_return_sequences == 1 else texts


def _expert_settings(num_experts, moe_every, top_k, intermediate_dim, expert_intermediate_dim, capacity_factor,
                     num_layers):
    """Each decoder block's feed-forward arguments: dense, or (every `moe_every`-th) mixture of experts."""
    if not isinstance(num_experts, int) or isinstance(num_experts, bool) or num_experts < 0:
        raise ValueError(f"`num_experts` must be an int >= 0. Received: num_experts={num_experts!r}")
    dense = {"intermediate_dim": intermediate_dim}
    if not num_experts:
        return [dense] * num_layers
    check_positive_ints(moe_every=moe_every)
    if expert_intermediate_dim is not None:
        check_positive_ints(expert_intermediate_dim=expert_intermediate_dim)
    if not isinstance(capacity_factor, (int, float)) or isinstance(capacity_factor, bool) or capacity_factor <= 0:
        raise ValueError(f"`capacity_factor` must be a positive number. Received: capacity_factor={capacity_factor!r}")
    if not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
        raise ValueError(f"`top_k` must be an int in [1, num_experts={num_experts}]. Received: top_k={top_k!r}")
    moe = dict(num_experts=num_experts, top_k=top_k, capacity_factor=capacity_factor,
               intermediate_dim=intermediate_dim if expert_intermediate_dim is None else expert_intermediate_dim)
    return [moe if (i + 1) % moe_every == 0 else dense for i in range(num_layers)]


def _layer_windows(attention_types, attention_window, num_layers):
    """Each layer's `attention_window` (None for a global layer) from `CausalLM`'s arguments."""
    if attention_window is not None:
        check_positive_ints(attention_window=attention_window)
    if attention_types is None:
        return [attention_window] * num_layers
    types = attention_types
    if isinstance(types, (list, tuple)) and types and all(isinstance(t, (list, tuple)) for t in types):
        try:  # GPT-Neo's [[types, repeats], ...]
            types = [kind for pattern, repeats in types for _ in range(repeats) for kind in pattern]
        except (TypeError, ValueError):
            types = None
    if not isinstance(types, (list, tuple)) or not types or num_layers % len(types) \
            or any(kind not in ATTENTION_TYPES for kind in types):
        raise ValueError(f"`attention_types` must be a list of {ATTENTION_TYPES} whose length divides "
                         f"`num_layers`={num_layers} (or GPT-Neo's [[types, repeats], ...]). "
                         f"Received: attention_types={attention_types!r}")
    if "local" in types and attention_window is None:
        raise ValueError("`attention_types` has \"local\" layers: they need an `attention_window`. "
                         "Received: attention_window=None")
    return [attention_window if kind == "local" else None for kind in list(types) * (num_layers // len(types))]


@register("gpt_neo_125m", vocabulary_size=50257, sequence_length=2048, hidden_dim=768, num_layers=12, num_heads=12,
          intermediate_dim=3072, dropout=0.0, activation="gelu_approximate", attention_window=256,
          attention_types=("global", "local"), attention_scale=1.0, use_qkv_bias=False)
@register("gpt2_small", **GPT2, hidden_dim=768, num_layers=12, num_heads=12, intermediate_dim=3072)
@register("gpt_mini", vocabulary_size=16000, sequence_length=256, hidden_dim=256, num_layers=4, num_heads=4,
          intermediate_dim=1024)
@register("gpt_tiny", vocabulary_size=8000, sequence_length=128, hidden_dim=128, num_layers=2, num_heads=2,
          intermediate_dim=512)
@register("gpt_moe_tiny", vocabulary_size=8000, sequence_length=128, hidden_dim=128, num_layers=2, num_heads=2,
          intermediate_dim=512, num_experts=8, moe_every=2, top_k=2, expert_intermediate_dim=256)
@builder(sizes=lambda preprocessor: {"vocabulary_size": preprocessor.tokenizer.vocabulary_size})
def causal_lm(**kwargs):
    """Build a `CausalLM`: `causal_lm(preset="gpt_tiny", vocabulary_size=8000)`.

    Args:
        preset: str. `"gpt_tiny"` (CPU demo), `"gpt_moe_tiny"` (`gpt_tiny` whose
            second block has 8 experts, top-2, each half as wide: the dense
            feed-forward's FLOPs per token), `"gpt_mini"`, `"gpt2_small"`
            (GPT-2 124M: 12 layers, 768 wide, 12 heads, 1024 positions, 50257 tokens)
            or `"gpt_neo_125m"` (GPT-Neo 125M: the same widths, 2048 positions, global
            and local (window 256) layers alternating, unscaled scores, no query, key
            and value biases).
        **kwargs: `CausalLM` arguments; they replace the preset's. With a
            `preprocessor` and no `vocabulary_size`, its tokenizer's size.

    Example:

    >>> causal_lm(preset="gpt_tiny", vocabulary_size=100).output.shape
    (None, None, 100)
    """
    return CausalLM(**kwargs)

