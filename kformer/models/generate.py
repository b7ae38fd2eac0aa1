"""Batched decoding for `Translator` and `CausalLM`: greedy, beam search, top-k and top-p sampling.

The adapters of `kformer.models.decoders` prefill (the translator encodes the
source and its cross-attention keys/values once; the language model runs the
shared prompt prefix in one pass) and then feed one token a step through
the self-attention caches. Ragged right-padded prompts: positions inside a
row's prompt are forced to the prompt token, so each row continues exactly
as it would alone. The loop is an `ops.while_loop` inside a Keras model's
predict step: XLA-compiled on TensorFlow and JAX, eager on torch, once per
setting.
"""

import contextlib
import math

import keras
import numpy as np
from keras import ops

from kformer.layers.checks import known_index
from kformer.layers.slices import traced_for_xla, write_slice
from kformer.models.decoders import NEG_INF, adapter

STRATEGIES = ("greedy", "beam", "top_k", "top_p")
MAX_LENGTH_CAP = 8192  # bound for models without learned positions (sinusoidal, rotary)
BATCH_MULTIPLE = 16  # compiled loops run batches of 1, 2, 4, 8, 16, then multiples of 16 rows


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


def ban_repeated_ngrams(logits, tokens, t, n):
    """Logits `(batch, vocab)` for position `t`, minus every token that would repeat an n-gram.

    A token is banned when the `n - 1` tokens before position `t` already
    occurred in `tokens[:, :t]` followed by it (`n = 1` bans every earlier
    token). `tokens`: int `(batch, length)`, the decoding buffer.
    """
    windows = tokens.shape[1] - n + 1
    if windows <= 0:
        return logits
    match = ops.broadcast_to(ops.arange(windows)[None, :] <= t - n, ops.shape(tokens[:, :windows]))
    for i in range(n - 1):  # window j holds tokens j .. j + n - 2, then the candidate j + n - 1
        tail = ops.take(tokens, ops.maximum(t - n + 1 + i, 0), axis=1)
        match = ops.logical_and(match, ops.equal(tokens[:, i:i + windows], tail[:, None]))
    following = tokens[:, n - 1:]
    rows = ops.broadcast_to(ops.arange(ops.shape(tokens)[0])[:, None], ops.shape(following))
    indices = ops.reshape(ops.stack([rows, following], axis=-1), (-1, 2))
    counts = ops.scatter_update(ops.zeros_like(logits), indices, ops.reshape(ops.cast(match, logits.dtype), (-1,)),
                                reduction="add")
    return ops.where(counts > 0, NEG_INF, logits)


def sample(logits, uniform):
    """Inverse-CDF draw from softmax(logits) with given uniforms `(batch,)`."""
    cdf = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)
    index = ops.sum(ops.cast(cdf < uniform[:, None], "int32"), axis=-1)
    return ops.minimum(index, ops.shape(logits)[-1] - 1)


def _known(t):
    """The loop position as an int where it is known (torch runs the loop eagerly, and its
    `slice_update` is 4x faster with int indices); traced (TF, JAX), unchanged."""
    index = known_index("t", t)
    return t if index is None else index


def _column(x, t):
    """`x[:, t]` `(batch, ...)`: a plain index where `t` is a known int (torch's eager loop, where
    `ops.take` took 97 us a call against a few for the index), else `ops.take`."""
    return x[:, t] if isinstance(t, int) else ops.take(x, t, axis=1)


def _branch(condition, then, otherwise):
    """`ops.cond`, or a Python `if` where `condition` is known now (torch's eager loop: no `Cond`
    operation built a step)."""
    if isinstance(condition, bool):
        return then() if condition else otherwise()
    return ops.cond(condition, then, otherwise)


def _next_logits(decoder, t, word, tokens, caches, logits, extra, c):
    """Logits for position `t + 1` (skipped after the last position)."""
    more = t + 1 < ops.shape(tokens)[1]
    if not c["use_cache"]:
        return _branch(more, lambda: decoder.recompute(tokens, t, extra), lambda: logits), caches
    return _branch(more, lambda: decoder.step(word[:, None], t, caches, extra), lambda: (logits, caches))


def _row_limits(inputs, c):
    """Translator: the most tokens each row generates, `ratio * source length + offset`, or None (`max_length`)."""
    if c.get("max_length_ratio") is None:
        return None
    source_length = ops.sum(ops.cast(ops.not_equal(inputs, 0), "float32"), axis=1)
    limits = ops.cast(ops.floor(c["max_length_ratio"] * source_length), "int32") + c["max_length_offset"]
    return ops.maximum(limits, 1)  # the first token is always generated


def _decode_loop(decoder, inputs, noise, c):
    """Greedy or sampling -> token buffer `(batch, length)` (see `decoder.output`)."""
    tokens, prompt, start, caches, extra, logits = decoder.prefill(inputs, c)
    limits = _row_limits(inputs, c)
    length = ops.shape(tokens)[1]

    def cond(t, tokens, caches, logits, done):
        return ops.logical_and(t < length, ops.logical_not(ops.all(done)))

    def body(t, tokens, caches, logits, done):
        t = _known(t)
        if c["no_repeat_ngram_size"]:
            logits = ban_repeated_ngrams(logits, tokens, t, c["no_repeat_ngram_size"])
        if c["strategy"] == "greedy":
            word = ops.cast(ops.argmax(logits, axis=-1), "int32")
        else:
            word = ops.cast(sample(filter_logits(logits, c["strategy"], c["k"], c["p"], c["temperature"]),
                                   _column(noise, t)), "int32")
        forced = _column(prompt, t)
        word = ops.where(forced, _column(tokens, t), word)
        word = ops.where(done, 0, word)
        tokens = write_slice(tokens, [0, t], word[:, None])
        done = ops.logical_or(done, ops.logical_and(ops.logical_not(forced), word == c["end_token_id"]))
        if limits is not None:  # buffer slot t holds generated token t (slot 0 is [START])
            done = ops.logical_or(done, t >= limits)
        logits, caches = _next_logits(decoder, t, word, tokens, caches, logits, extra, c)
        return t + 1, tokens, caches, logits, done

    done = ops.zeros((ops.shape(tokens)[0],), "bool")
    _, tokens, _, _, _ = ops.while_loop(cond, body, (start, tokens, caches, logits, done))
    return decoder.output(tokens)


def _beam_loop(decoder, inputs, c):
    """Beam search, GNMT length penalty ((5 + len) / 6)^alpha over generated tokens."""
    beams, vocab = c["num_beams"], decoder.vocabulary_size
    tokens, prompt, start, caches, extra, logits = decoder.prefill(inputs, c)
    batch, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    flat = batch * beams
    limits = _row_limits(inputs, c)
    limits = None if limits is None else ops.repeat(limits, beams, axis=0)  # a row's beams share its limit
    tokens, prompt, logits = (ops.repeat(x, beams, axis=0) for x in (tokens, prompt, logits))
    caches, extra = tuple(ops.repeat(cache, beams, axis=0) for cache in caches), decoder.repeat(extra, beams)
    # Only beam 0 is alive at first, so the first free step does not pick duplicates.
    scores = ops.concatenate([ops.zeros((batch, 1)), ops.full((batch, beams - 1), NEG_INF)], axis=1)
    pad_only = ops.where(ops.arange(vocab)[None, :] == 0, 0.0, NEG_INF)  # finished beams

    def cond(t, tokens, caches, logits, scores, done, lengths):
        return ops.logical_and(t < length, ops.logical_not(ops.all(done)))

    def body(t, tokens, caches, logits, scores, done, lengths):
        t = _known(t)
        if c["no_repeat_ngram_size"]:
            logits = ban_repeated_ngrams(logits, tokens, t, c["no_repeat_ngram_size"])
        forced = _column(prompt, t)
        prompt_token = ops.where(ops.arange(vocab)[None, :] == _column(tokens, t)[:, None], 0.0, NEG_INF)
        log_probs = ops.where(forced[:, None], prompt_token, ops.log_softmax(logits, axis=-1))
        log_probs = ops.where(done[:, None], pad_only, log_probs)
        candidates = ops.reshape(ops.reshape(scores, (flat, 1)) + log_probs, (batch, beams * vocab))
        scores, best = ops.top_k(candidates, beams)  # (batch, beams)
        origin = ops.reshape(ops.arange(batch)[:, None] * beams + best // vocab, (flat,))
        word = ops.cast(ops.reshape(best % vocab, (flat,)), "int32")
        tokens, done, lengths = (ops.take(x, origin, axis=0) for x in (tokens, done, lengths))
        caches = tuple(ops.take(cache, origin, axis=0) for cache in caches)
        tokens = write_slice(tokens, [0, t], word[:, None])
        lengths = ops.where(ops.logical_or(done, forced), lengths, lengths + 1)
        done = ops.logical_or(done, ops.logical_and(ops.logical_not(forced), word == c["end_token_id"]))
        if limits is not None:
            done = ops.logical_or(done, t >= limits)
        logits, caches = _next_logits(decoder, t, word, tokens, caches, logits, extra, c)
        return t + 1, tokens, caches, logits, scores, done, lengths

    state = (start, tokens, caches, logits, scores, ops.zeros((flat,), "bool"), ops.zeros((flat,), "int32"))
    _, tokens, _, _, scores, _, lengths = ops.while_loop(cond, body, state)
    penalty = ops.power((5.0 + ops.cast(ops.reshape(lengths, (batch, beams)), "float32")) / 6.0,
                        c["length_penalty"])
    best = ops.argmax(scores / penalty, axis=-1)  # (batch,)
    return decoder.output(ops.take(tokens, ops.arange(batch) * beams + ops.cast(best, "int32"), axis=0))


class _Generator(keras.Model):
    """Wraps the loop in a Keras model so `predict_on_batch` compiles it (XLA on TF/JAX)."""

    def __init__(self, task, config):
        super().__init__(name="generator")
        self.task = task
        self.config = config
        self.decoder = adapter(task)

    def call(self, inputs):
        return _run(self.decoder, inputs["token_ids"], inputs["noise"], self.config, xla=self.jit_compile)


def _run(decoder, token_ids, noise, c, xla):
    """The strategy's loop; `xla`: it will be compiled by XLA (cache writes in place, `traced_for_xla`)."""
    token_ids = ops.cast(token_ids, "int32")
    with traced_for_xla() if xla else contextlib.nullcontext():
        if c["strategy"] == "beam":
            return _beam_loop(decoder, token_ids, c)
        return _decode_loop(decoder, token_ids, noise, c)


_COMPILED = {}


def generate(model, token_ids, *, max_length, start_token_id=None, end_token_id=None, strategy="greedy",
             num_beams=4, length_penalty=0.6, k=50, p=0.9, temperature=1.0, seed=None, use_cache=True,
             no_repeat_ngram_size=0, max_length_ratio=None, max_length_offset=10, pad_batch=True):
    """Decode with a `Translator` (source ids in) or a `CausalLM` (prompt ids in).

    Translator: returns the generated tokens after `start_token_id`, through
    the first `end_token_id`, then 0. CausalLM: `token_ids` are prompts,
    right-padded with 0 (ragged prompts continue exactly as each would
    alone); returns the prompt followed by the generated tokens, through the
    first `end_token_id` (if any), then 0. Decoding stops early once every
    row has ended. The loop is compiled once per setting (XLA on TensorFlow
    and JAX) and reused; there XLA also compiles once per shape, so a batch
    runs at `batch_bucket(batch)` rows (its last row repeated) and sources
    at a multiple of 16 tokens: 3 sentences, then 4, compile once.

    Args:
        model: a `Translator` or a `CausalLM`.
        token_ids: int `(batch, length)`, 0 = padding: the source (translator)
            or the prompts (language model).
        max_length: int. Most generated tokens (translator) or the total
            length, prompt included (language model).
        start_token_id: int. The target `[START]` id (translator only).
        end_token_id: int or None. Decoding of a row stops after it (required
            for the translator).
        strategy: `"greedy"`, `"beam"`, `"top_k"` or `"top_p"`. Defaults to `"greedy"`.
        num_beams: int. Beam width. Defaults to `4`.
        length_penalty: float. GNMT alpha: scores / ((5 + len) / 6)^alpha. Defaults to `0.6`.
        k: int. Top-k sampling. Defaults to `50`.
        p: float. Top-p (nucleus) mass. Defaults to `0.9`.
        temperature: float. Sampling temperature. Defaults to `1.0`.
        seed: int. Sampling uniforms are drawn with numpy from it, so the same
            seed samples the same tokens on every backend.
        use_cache: bool. `False` re-runs the decoder over the whole buffer
            each step (the slow reference; not with beam search).
        no_repeat_ngram_size: int. `n > 0` never generates an n-gram that the
            row (prompt included) already holds, as in Hugging Face's
            `no_repeat_ngram_size`; stops "y las dos y las dos" loops. `0`
            (default) turns it off.
        max_length_ratio: float or None. Translator only: row `i` generates
            at most `floor(max_length_ratio * n_i) + max_length_offset`
            tokens (at least 1), `n_i` its source length without padding
            (fairseq's `max_len_a` / `max_len_b`), and never more than `max_length`.
            A batch of short sources stops sooner, and a row caught in a
            loop stops near its source's length. `None` (default): `max_length`.
        max_length_offset: int >= 0. See `max_length_ratio`. Defaults to `10`.
        pad_batch: bool. `True` (default): on TensorFlow and JAX run the
            batch at `batch_bucket(batch)` rows, a few compiles for any batch
            sizes. `False`: at its own size, one compile per size, and no
            copied rows' work (9 rows run as 16 cost up to 1.5x a call here):
            for a caller who decodes one odd batch size many times. Torch
            pads nothing either way.

    Returns:
        int32 numpy: `(batch, max_length)`.

    Example:

    >>> import numpy as np
    >>> from kformer import models
    >>> model = models.translator(preset="transformer_tiny", vocabulary_size=50)
    >>> generate(model, np.array([[5, 6, 7]]), max_length=4, start_token_id=1, end_token_id=2).shape
    (1, 4)
    """
    decoder = adapter(model)
    if not isinstance(pad_batch, (bool, np.bool_)):
        raise ValueError(f"`pad_batch` must be True or False. Received: pad_batch={pad_batch!r}")
    ids = np.asarray(ops.convert_to_numpy(token_ids))
    config = _check(decoder, ids, dict(
        max_length=max_length, start_token_id=start_token_id, end_token_id=end_token_id, strategy=strategy,
        num_beams=num_beams, length_penalty=length_penalty, k=k, p=p, temperature=temperature,
        use_cache=use_cache, seed=seed, no_repeat_ngram_size=no_repeat_ngram_size,
        max_length_ratio=max_length_ratio, max_length_offset=max_length_offset))
    seed = config.pop("seed")
    if decoder.family == "translator":  # drop all-padding columns: a batch of short sources encodes short
        ids = _pad_width(ids[:, :max(1, np.flatnonzero(ids.any(axis=0)).max(initial=0) + 1)], None)
    else:
        ids = _pad_width(ids, config["max_length"])
    key = (id(model), tuple(sorted(config.items())))
    xla = keras.backend.backend() != "torch"
    if key not in _COMPILED:
        generator = _Generator(model, config)
        generator.compile(jit_compile=xla)
        _COMPILED.clear()  # one compiled loop at a time keeps memory bounded
        _COMPILED[key] = (model, generator)
    width = config["max_length"] + (decoder.family == "translator")
    rows = len(ids)
    noise = np.random.default_rng(seed).random((rows, width)).astype("float32")
    if xla and pad_batch:  # XLA compiles once per batch size: a few sizes, not every one
        ids, noise = (repeat_last_row(a, batch_bucket(rows)) for a in (ids, noise))
    out = _COMPILED[key][1].predict_on_batch({"token_ids": ids.astype("int32"), "noise": noise})
    return np.asarray(ops.convert_to_numpy(out), "int32")[:rows]


def decode_function(model, *, max_length, start_token_id=None, end_token_id=None, strategy="greedy",
                    num_beams=4, length_penalty=0.6, k=50, p=0.9, temperature=1.0, no_repeat_ngram_size=0,
                    max_length_ratio=None, max_length_offset=10, xla=False):
    """For graphs (SavedModel export): `fn(token_ids, noise=None) -> ids`, the loop of `generate`.

    In `keras.ops` with no numpy, so it traces into a `tf.function`. Sampling
    strategies take `noise`, uniforms `(batch, length)` (the caller draws them,
    e.g. from a seed input).

    Args:
        model: a `Translator` or a `CausalLM`.
        max_length, start_token_id, end_token_id, strategy, num_beams,
            length_penalty, k, p, temperature, no_repeat_ngram_size,
            max_length_ratio, max_length_offset: as in `generate`.
        xla: bool. `True` when `fn` will be traced inside a
            `tf.function(jit_compile=True)`: its cache writes are then XLA's
            in-place update. `False` (default): core TensorFlow ops only, which
            the stock TF Serving binary runs with XLA compilation off.

    Example:

    >>> from kformer import models
    >>> decode = decode_function(models.causal_lm(preset="gpt_tiny", vocabulary_size=50), max_length=8)
    >>> import numpy as np
    >>> tuple(decode(np.array([[5, 6]])).shape)
    (1, 8)
    """
    decoder = adapter(model)
    config = _check(decoder, np.ones((1, 1), "int32"), dict(
        max_length=max_length, start_token_id=start_token_id, end_token_id=end_token_id, strategy=strategy,
        num_beams=num_beams, length_penalty=length_penalty, k=k, p=p, temperature=temperature,
        use_cache=True, seed=None, no_repeat_ngram_size=no_repeat_ngram_size,
        max_length_ratio=max_length_ratio, max_length_offset=max_length_offset))
    config.pop("seed")
    return lambda token_ids, noise=None: _run(decoder, token_ids, noise, config, xla=bool(xla))


def batch_bucket(rows, multiple=BATCH_MULTIPLE):
    """The batch size a compiled loop runs `rows` rows at: the next power of two up to `multiple`,
    then the next multiple of it (20 sizes, so at most 20 compiles, up to 256 rows).

    Args:
        rows: int >= 0. The rows asked for.
        multiple: int. A power of two. Defaults to `16`.

    Returns:
        int >= `rows`.

    Example:

    >>> [batch_bucket(n) for n in (1, 3, 5, 16, 17, 40)]
    [1, 4, 8, 16, 32, 48]
    """
    if rows <= multiple:
        return 1 << max(rows - 1, 0).bit_length()
    return -(-rows // multiple) * multiple


def repeat_last_row(array, rows):
    """`array` `(n, ...)` with its last row repeated up to `rows` rows.

    A copied row decodes and ends as its original does, so padding a batch
    this way never makes the decoding loop run longer (a row of zeros could).

    Args:
        array: numpy `(n, ...)`, `n >= 1`.
        rows: int. Rows wanted; `array` is returned as is when it has as many.

    Returns:
        numpy `(max(n, rows), ...)`.

    Example:

    >>> repeat_last_row(np.array([[1, 2], [3, 4]]), 3).tolist()
    [[1, 2], [3, 4], [3, 4]]
    """
    extra = rows - len(array)
    return np.concatenate([array, np.repeat(array[-1:], extra, axis=0)]) if extra > 0 else array


def _pad_width(ids, limit, multiple=16):
    """Right-pad columns with 0 to a multiple of 16 (at most `limit`): fewer shapes, fewer compiles."""
    width = -(-ids.shape[1] // multiple) * multiple
    width = width if limit is None else min(width, limit)
    return np.pad(ids, [(0, 0), (0, width - ids.shape[1])]) if width > ids.shape[1] else ids


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


_USED_BY = {"greedy": (), "beam": ("num_beams", "length_penalty"), "top_k": ("k", "temperature"),
            "top_p": ("p", "temperature")}


def _check(decoder, ids, c):
    """Validate every argument (naming it); returns the loop's config."""
    translator = decoder.family == "translator"
    if c["strategy"] not in STRATEGIES:
        raise ValueError(f"`strategy` must be one of {STRATEGIES}. Received: strategy={c['strategy']!r}")
    name = "encoder_token_ids" if translator else "token_ids"
    if ids.ndim != 2 or 0 in ids.shape or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"`{name}` must be a non-empty int array (batch, length). Received: "
                         f"shape={ids.shape}, dtype={ids.dtype}")
    vocabulary = decoder.source_vocabulary_size if translator else decoder.vocabulary_size
    if ids.min() < 0 or ids.max() >= vocabulary:
        raise ValueError(f"`{name}` must be in [0, {vocabulary}) (0 = padding). Received: values from "
                         f"{ids.min()} to {ids.max()}")
    for key, low in (("max_length", 1), ("num_beams", 1), ("k", 1), ("no_repeat_ngram_size", 0)):
        if not _is_int(c[key]) or c[key] < low:
            raise ValueError(f"`{key}` must be an int >= {low}. Received: {key}={c[key]!r}")
    for key in ("length_penalty", "p", "temperature"):
        if isinstance(c[key], bool) or not isinstance(c[key], (int, float, np.floating)) \
                or not math.isfinite(c[key]):
            raise ValueError(f"`{key}` must be a finite number. Received: {key}={c[key]!r}")
    if c["seed"] is not None and (not _is_int(c["seed"]) or not 0 <= c["seed"] < 2**63):
        raise ValueError(f"`seed` must be None or an int in [0, 2**63). Received: seed={c['seed']!r}")
    if not 0.0 < c["p"] <= 1.0:
        raise ValueError(f"`p` must be in (0, 1]. Received: p={c['p']}")
    if not c["temperature"] > 0:
        raise ValueError(f"`temperature` must be > 0. Received: temperature={c['temperature']}")
    limit = decoder.position_limit
    if limit is not None and c["max_length"] > limit:
        raise ValueError(f"`max_length` exceeds the model's learned positions (sequence_length={limit}). "
                         f"Received: max_length={c['max_length']}")
    if c["max_length"] > MAX_LENGTH_CAP:
        raise ValueError(f"`max_length` must be <= {MAX_LENGTH_CAP}. Received: max_length={c['max_length']}")
    for key in ("start_token_id", "end_token_id"):
        required = translator
        if c[key] is None and not required:
            continue
        if key == "start_token_id" and not translator:
            raise ValueError("`start_token_id` is for translators; a CausalLM continues its prompt "
                             f"(put any start token in the prompt). Received: start_token_id={c[key]!r}")
        if not _is_int(c[key]) or not 0 < c[key] < decoder.vocabulary_size:
            raise ValueError(f"`{key}` must be an int in [1, {decoder.vocabulary_size}). Received: {key}={c[key]!r}")
    if not translator:
        _check_prompts(ids, c["max_length"])
        c["start_token_id"] = 0
        c["end_token_id"] = -1 if c["end_token_id"] is None else c["end_token_id"]
    if c["max_length_ratio"] is None:
        c["max_length_offset"] = None  # unused: one compiled loop
    elif not translator:
        raise ValueError("`max_length_ratio` is for translators (a limit from the source length); a CausalLM "
                         f"stops at `max_length`. Received: max_length_ratio={c['max_length_ratio']!r}")
    else:
        c["max_length_ratio"], c["max_length_offset"] = check_length_limit(c["max_length_ratio"],
                                                                           c["max_length_offset"])
    if c["strategy"] == "beam" and not c["use_cache"]:
        raise ValueError("Beam search always uses the cache. Received: use_cache=False")
    if c["strategy"] == "top_k":
        c["k"] = min(int(c["k"]), decoder.vocabulary_size)
    if c["strategy"] == "beam" and c["num_beams"] > decoder.vocabulary_size:
        raise ValueError(f"`num_beams` must be <= the vocabulary size {decoder.vocabulary_size}. "
                         f"Received: num_beams={c['num_beams']}")
    c["use_cache"] = bool(c["use_cache"])
    for key in ("num_beams", "length_penalty", "k", "p", "temperature"):
        if key not in _USED_BY[c["strategy"]]:
            c[key] = None  # one compiled loop per setting that matters (greedy ignores temperature)
    return {key: (float(v) if isinstance(v, (float, np.floating)) else int(v) if _is_int(v) else v)
            for key, v in c.items()}


def check_length_limit(max_length_ratio, max_length_offset):
    """Validate a translation length limit (naming the bad value) -> `(float ratio, int offset)`."""
    ratio, offset = max_length_ratio, max_length_offset
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.integer, np.floating)) \
            or not math.isfinite(ratio) or ratio <= 0:
        raise ValueError(f"`max_length_ratio` must be a finite number > 0, or None. Received: "
                         f"max_length_ratio={ratio!r}")
    if not _is_int(offset) or offset < 0:
        raise ValueError(f"`max_length_offset` must be an int >= 0. Received: max_length_offset={offset!r}")
    return float(ratio), int(offset)


def _check_prompts(ids, max_length):
    lengths = (ids != 0).sum(axis=1)
    if (lengths == 0).any():
        raise ValueError(f"`token_ids`: every prompt needs at least one token. Received: empty prompt in row "
                         f"{int(np.flatnonzero(lengths == 0)[0])}")
    if ids.shape[1] > 1 and ((ids[:, 1:] != 0) & (ids[:, :-1] == 0)).any():
        raise ValueError("`token_ids`: prompts must be right-padded (0 after the tokens, never before). Received: "
                         f"a 0 before a token in row {int(np.flatnonzero(((ids[:, 1:] != 0) & (ids[:, :-1] == 0)).any(1))[0])}")
    if ids.shape[1] > max_length:
        raise ValueError(f"`max_length` ({max_length}) must be at least the prompt length. Received: "
                         f"prompts of width {ids.shape[1]}, max_length={max_length}")
