"""Batched decoding for kformer `Translator`s: greedy, beam search, top-k and top-p sampling.

The encoder runs once; its cross-attention keys/values are computed once per
decoder block; each step feeds one token through the decoder blocks with
their self-attention caches. The loop is an `ops.while_loop` inside a Keras
model's predict step, so it compiles with XLA on TensorFlow and JAX (and runs
eagerly on torch).
"""

import keras
import numpy as np
from keras import ops

STRATEGIES = ("greedy", "beam", "top_k", "top_p")
NEG_INF = -1e9


class TranslatorParts:
    """A `Translator`'s parts (its attributes), callable one decoding step at a time."""

    def __init__(self, model):
        if not all(hasattr(model, a) for a in ("encoder_embedding", "decoder_blocks", "encoder_blocks")):
            raise ValueError("`model` must be a kformer `Translator` (built by `kformer.models.translator` "
                             f"or loaded with `kformer.models.load`). Received: {type(model).__name__}")
        self.encoder_embedding, self.decoder_embedding = model.encoder_embedding, model.decoder_embedding
        self.encoder_blocks, self.decoder_blocks = model.encoder_blocks, model.decoder_blocks
        self.encoder_norm, self.decoder_norm = model.encoder_norm, model.decoder_norm
        self.output_projection = model.output_projection
        self.vocabulary_size = self.decoder_embedding.vocabulary_size
        self.source_vocabulary_size = self.encoder_embedding.vocabulary_size
        attention = self.decoder_blocks[0].self_attention
        self.num_heads, self.head_dim = attention.num_heads, attention.key_dim

    def encode(self, encoder_token_ids):
        """-> encoder outputs `(batch, src_len, hidden)` and padding mask `(batch, src_len)`."""
        mask = ops.not_equal(encoder_token_ids, 0)
        x = self.encoder_embedding(encoder_token_ids)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=mask)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, mask

    def cross_caches(self, encoder_outputs):
        """Stacked cross-attention keys/values `(layers, batch, 2, src_len, heads, head_dim)`."""
        return ops.stack([b.compute_cross_attention_cache(encoder_outputs) for b in self.decoder_blocks])

    def step(self, token, index, self_caches, cross_caches, encoder_mask):
        """One token `(batch, 1)` at position `index` -> float32 logits `(batch, vocab)`, new caches."""
        h = self.decoder_embedding(token, start_index=index)
        updated = []
        for i, block in enumerate(self.decoder_blocks):
            h, cache, _ = block(
                h, encoder_padding_mask=encoder_mask, self_attention_cache=self_caches[i],
                self_attention_cache_update_index=index, cross_attention_cache=cross_caches[i],
            )
            updated.append(cache)
        return _project(self, h)[:, 0], ops.stack(updated)


def _project(parts, h):
    if parts.decoder_norm is not None:
        h = parts.decoder_norm(h)
    if parts.output_projection is not None:
        logits = parts.output_projection(h)
    else:
        logits = parts.decoder_embedding(h, reverse=True)
    logits = ops.cast(logits, "float32")
    # Id 0 is padding: never generated.
    return ops.where(ops.arange(parts.vocabulary_size) == 0, NEG_INF, logits)


def _recompute_step(parts, tokens, index, encoder_outputs, encoder_mask):
    """No cache: the decoder re-runs over the whole buffer; logits at `index`."""
    h = parts.decoder_embedding(tokens)
    for block in parts.decoder_blocks:
        h = block(h, encoder_outputs, encoder_padding_mask=encoder_mask)
    h = ops.take(h, index, axis=1)[:, None]  # (batch, 1, hidden)
    return _project(parts, h)[:, 0]


def filter_logits(logits, strategy, k, p, temperature):
    """Temperature, then keep the top `k` logits or the top-`p` probability mass."""
    logits = logits / temperature
    if strategy == "top_k":
        kth = ops.top_k(logits, k)[0][:, -1:]
        return ops.where(logits < kth, NEG_INF, logits)
    if strategy == "top_p":
        sorted_logits = ops.top_k(logits, ops.shape(logits)[-1])[0]
        probs = ops.softmax(sorted_logits, axis=-1)
        before = ops.cumsum(probs, axis=-1) - probs  # mass strictly above each token
        kept = ops.where(before < p, sorted_logits, 1e9)
        cutoff = ops.min(kept, axis=-1, keepdims=True)
        return ops.where(logits < cutoff, NEG_INF, logits)
    return logits


def sample(logits, uniform):
    """Inverse-CDF draw from softmax(logits) with given uniforms `(batch,)`."""
    cdf = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)
    index = ops.sum(ops.cast(cdf < uniform[:, None], "int32"), axis=-1)
    return ops.minimum(index, ops.shape(logits)[-1] - 1)


def _decode_loop(parts, source, noise, c):
    """Greedy or sampling: `(batch, src_len)` -> generated ids `(batch, max_length)`."""
    encoder_outputs, mask = parts.encode(source)
    cross = parts.cross_caches(encoder_outputs)
    batch = ops.shape(source)[0]
    cache_length = c["max_length"] if c["use_cache"] else 1  # unused without a cache
    caches = ops.zeros((len(parts.decoder_blocks), batch, 2, cache_length, parts.num_heads,
                        parts.head_dim), dtype=cross.dtype)
    tokens = ops.concatenate([ops.full((batch, 1), c["start_token_id"], "int32"),
                              ops.zeros((batch, c["max_length"]), "int32")], axis=1)

    def cond(t, tokens, caches, done):
        return ops.logical_and(t < c["max_length"], ops.logical_not(ops.all(done)))

    def body(t, tokens, caches, done):
        if c["use_cache"]:
            token = ops.slice(tokens, [0, t], [batch, 1])
            logits, caches = parts.step(token, t, caches, cross, mask)
        else:
            logits = _recompute_step(parts, tokens[:, :-1], t, encoder_outputs, mask)
        if c["strategy"] == "greedy":
            word = ops.cast(ops.argmax(logits, axis=-1), "int32")
        else:
            logits = filter_logits(logits, c["strategy"], c["k"], c["p"], c["temperature"])
            word = sample(logits, ops.take(noise, t, axis=1))
        word = ops.where(done, 0, word)
        tokens = ops.slice_update(tokens, [0, t + 1], word[:, None])
        return t + 1, tokens, caches, ops.logical_or(done, ops.equal(word, c["end_token_id"]))

    done = ops.zeros((batch,), "bool")
    _, tokens, _, _ = ops.while_loop(cond, body, (ops.convert_to_tensor(0), tokens, caches, done))
    return tokens[:, 1:]


def _beam_loop(parts, source, c):
    """Beam search with GNMT length penalty ((5 + len) / 6)^alpha -> `(batch, max_length)`."""
    beams, vocab, length = c["num_beams"], parts.vocabulary_size, c["max_length"]
    batch = ops.shape(source)[0]
    encoder_outputs, mask = parts.encode(source)
    encoder_outputs = ops.repeat(encoder_outputs, beams, axis=0)  # (batch * beams, src, hidden)
    mask = ops.repeat(mask, beams, axis=0)
    cross = parts.cross_caches(encoder_outputs)
    flat = batch * beams
    caches = ops.zeros((len(parts.decoder_blocks), flat, 2, length, parts.num_heads,
                        parts.head_dim), dtype=cross.dtype)
    tokens = ops.concatenate([ops.full((flat, 1), c["start_token_id"], "int32"),
                              ops.zeros((flat, length), "int32")], axis=1)
    # Only beam 0 is alive at first, so the first step does not pick duplicates.
    scores = ops.concatenate([ops.zeros((batch, 1)), ops.full((batch, beams - 1), NEG_INF)], axis=1)
    pad_only = ops.where(ops.arange(vocab)[None, :] == 0, 0.0, NEG_INF)  # finished beams

    def cond(t, tokens, caches, scores, done, lengths):
        return ops.logical_and(t < length, ops.logical_not(ops.all(done)))

    def body(t, tokens, caches, scores, done, lengths):
        token = ops.slice(tokens, [0, t], [flat, 1])
        logits, caches = parts.step(token, t, caches, cross, mask)
        log_probs = ops.where(done[:, None], pad_only, ops.log_softmax(logits, axis=-1))
        candidates = ops.reshape(ops.reshape(scores, (flat, 1)) + log_probs, (batch, beams * vocab))
        scores, best = ops.top_k(candidates, beams)  # (batch, beams)
        origin = ops.reshape(ops.arange(batch)[:, None] * beams + best // vocab, (flat,))
        word = ops.cast(ops.reshape(best % vocab, (flat,)), "int32")
        tokens, done, lengths = (ops.take(x, origin, axis=0) for x in (tokens, done, lengths))
        caches = ops.take(caches, origin, axis=1)
        tokens = ops.slice_update(tokens, [0, t + 1], word[:, None])
        lengths = ops.where(done, lengths, lengths + 1)
        return t + 1, tokens, caches, scores, ops.logical_or(done, word == c["end_token_id"]), lengths

    state = (ops.convert_to_tensor(0), tokens, caches, scores, ops.zeros((flat,), "bool"),
             ops.zeros((flat,), "int32"))
    _, tokens, _, scores, _, lengths = ops.while_loop(cond, body, state)
    penalty = ops.power((5.0 + ops.cast(ops.reshape(lengths, (batch, beams)), "float32")) / 6.0,
                        c["length_penalty"])
    best = ops.argmax(scores / penalty, axis=-1)  # (batch,)
    return ops.take(tokens, ops.arange(batch) * beams + ops.cast(best, "int32"), axis=0)[:, 1:]


class _Generator(keras.Model):
    """Wraps the loop in a Keras model so `predict_on_batch` compiles it (XLA on TF/JAX)."""

    def __init__(self, translator, config):
        super().__init__(name="generator")
        self.translator = translator
        self.config = config
        self.parts = TranslatorParts(translator)

    def call(self, inputs):
        source = ops.cast(inputs["encoder_token_ids"], "int32")
        if self.config["strategy"] == "beam":
            return _beam_loop(self.parts, source, self.config)
        return _decode_loop(self.parts, source, inputs["noise"], self.config)


_COMPILED = {}


def generate(
    model,
    encoder_token_ids,
    *,
    max_length,
    start_token_id,
    end_token_id,
    strategy="greedy",
    num_beams=4,
    length_penalty=0.6,
    k=50,
    p=0.9,
    temperature=1.0,
    seed=None,
    use_cache=True,
):
    """Translate a batch: source ids `(batch, src_len)` (0 = padding) -> ids `(batch, max_length)`.

    Each row holds the generated tokens after `start_token_id`, through the
    first `end_token_id`, then 0 (padding). Decoding stops early once every
    row has ended. The loop is compiled once per setting (XLA on TensorFlow
    and JAX) and reused.

    Args:
        model: a `Translator`.
        encoder_token_ids: int `(batch, src_len)`, 0 = padding.
        max_length: int. Most generated tokens.
        start_token_id, end_token_id: ints. The target `[START]` / `[END]` ids.
        strategy: `"greedy"`, `"beam"`, `"top_k"` or `"top_p"`. Defaults to `"greedy"`.
        num_beams: int. Beam width. Defaults to `4`.
        length_penalty: float. GNMT alpha: scores / ((5 + len) / 6)^alpha. Defaults to `0.6`.
        k: int. Top-k sampling. Defaults to `50`.
        p: float. Top-p (nucleus) mass. Defaults to `0.9`.
        temperature: float. Sampling temperature. Defaults to `1.0`.
        seed: int. Sampling uniforms are drawn with numpy from it, so the same
            seed samples the same tokens on every backend.
        use_cache: bool. `False` re-runs the decoder over the whole output
            buffer each step (the slow reference; not with beam search).

    Returns:
        int32 numpy `(batch, max_length)`.

    Example:

    >>> import numpy as np
    >>> from kformer import models
    >>> model = models.translator(preset="transformer_tiny", vocabulary_size=50)
    >>> generate(model, np.array([[5, 6, 7]]), max_length=4, start_token_id=1, end_token_id=2).shape
    (1, 4)
    """
    parts = TranslatorParts(model)
    source = np.asarray(ops.convert_to_numpy(encoder_token_ids))
    config = _check(parts, source, dict(
        max_length=max_length, start_token_id=start_token_id, end_token_id=end_token_id,
        strategy=strategy, num_beams=num_beams, length_penalty=length_penalty, k=k, p=p,
        temperature=temperature, use_cache=bool(use_cache),
    ))
    key = (id(model), tuple(sorted(config.items())))
    if key not in _COMPILED:
        generator = _Generator(model, config)
        generator.compile(jit_compile=keras.backend.backend() != "torch")
        _COMPILED.clear()  # one compiled loop at a time keeps memory bounded
        _COMPILED[key] = (model, generator)
    generator = _COMPILED[key][1]
    noise = np.random.default_rng(seed).random((len(source), max_length)).astype("float32")
    out = generator.predict_on_batch({"encoder_token_ids": source.astype("int32"), "noise": noise})
    return np.asarray(ops.convert_to_numpy(out), "int32")


def decode_function(model, *, max_length, start_token_id, end_token_id, strategy="greedy",
                    num_beams=4, length_penalty=0.6):
    """For graphs (SavedModel export): returns `fn(encoder_token_ids) -> ids (batch, max_length)`.

    The same loop as `generate`, in `keras.ops` with no numpy, so it can be
    traced into a `tf.function`; `strategy` is "greedy" or "beam".
    """
    if strategy not in ("greedy", "beam"):
        raise ValueError(f"`strategy` must be 'greedy' or 'beam' in a graph. Received: strategy={strategy!r}")
    parts = TranslatorParts(model)
    config = _check(parts, np.ones((1, 1), "int32"), dict(
        max_length=max_length, start_token_id=start_token_id, end_token_id=end_token_id,
        strategy=strategy, num_beams=num_beams, length_penalty=length_penalty, k=1, p=1.0,
        temperature=1.0, use_cache=True,
    ))
    if strategy == "beam":
        return lambda source: _beam_loop(parts, ops.cast(source, "int32"), config)
    return lambda source: _decode_loop(parts, ops.cast(source, "int32"), None, config)


def _check(parts, source, c):
    if c["strategy"] not in STRATEGIES:
        raise ValueError(f"`strategy` must be one of {STRATEGIES}. Received: strategy={c['strategy']!r}")
    if source.ndim != 2 or source.shape[1] < 1 or not np.issubdtype(source.dtype, np.integer):
        raise ValueError("`encoder_token_ids` must be int token ids (batch, src_len). Received: "
                         f"encoder_token_ids.shape={source.shape}, dtype={source.dtype}")
    if source.size and (source.min() < 0 or source.max() >= parts.source_vocabulary_size):
        raise ValueError(
            f"`encoder_token_ids` must be in [0, {parts.source_vocabulary_size}). Received: "
            f"values from {source.min()} to {source.max()}")
    for name in ("start_token_id", "end_token_id"):
        if not 0 < int(c[name]) < parts.vocabulary_size:
            raise ValueError(f"`{name}` must be in [1, {parts.vocabulary_size}). Received: {name}={c[name]}")
    for name, low in (("max_length", 1), ("num_beams", 1), ("k", 1)):
        if not isinstance(c[name], (int, np.integer)) or c[name] < low:
            raise ValueError(f"`{name}` must be an int >= {low}. Received: {name}={c[name]}")
    limit = parts.decoder_embedding.sequence_length
    if parts.decoder_embedding.position == "learned" and c["max_length"] > limit:
        raise ValueError(f"`max_length` exceeds the model's sequence_length={limit}. "
                         f"Received: max_length={c['max_length']}")
    if not 0.0 < c["p"] <= 1.0:
        raise ValueError(f"`p` must be in (0, 1]. Received: p={c['p']}")
    if not c["temperature"] > 0:
        raise ValueError(f"`temperature` must be > 0. Received: temperature={c['temperature']}")
    if c["strategy"] == "beam" and not c["use_cache"]:
        raise ValueError("Beam search always uses the cache. Received: use_cache=False")
    if c["strategy"] == "top_k":
        c["k"] = min(int(c["k"]), parts.vocabulary_size)
    if c["strategy"] == "beam" and c["num_beams"] > parts.vocabulary_size:
        raise ValueError(f"`num_beams` must be <= the vocabulary size {parts.vocabulary_size}. "
                         f"Received: num_beams={c['num_beams']}")
    return {k: (float(v) if isinstance(v, float) else v) for k, v in c.items()}
