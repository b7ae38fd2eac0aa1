"""Batched decoding for `Translator` and `CausalLM`: greedy, beam search, top-k and top-p sampling.

The search lives here; the model is the task's own decoding protocol
(`kformer.generation.protocol.GenerativeTask`): `prefill` (the translator
encodes the source and its cross-attention keys/values once; the language
model runs the shared prompt prefix in one pass), then `call_with_cache`, one
token a step through the self-attention caches. Where it applies, the step
runs on the weights as plain matrices (`kformer.kernels.decoding`), the same
numbers. Ragged right-padded prompts: positions inside a row's prompt are
forced to the prompt token, so each row continues exactly as it would alone.
The loop is an `ops.while_loop` inside a Keras model's predict step:
XLA-compiled on TensorFlow and JAX, eager on torch, once per setting.
"""

import collections
import contextlib
import dataclasses
import threading
import weakref

import keras
import numpy as np
from keras import ops

from kformer.generation import batching, streaming
from kformer.generation.config import GenerationConfig
from kformer.generation.protocol import NEG_INF, GenerativeTask
from kformer.kernels.decoding import PlainDecoder
from kformer.kernels.slices import traced_for_xla, write_slice
from kformer.layers.checks import known_index
from kformer.training.safe_state import model_lock



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


# `word_piece_kinds`: what each target id is to the word-piece guard
SPECIAL, WORD_START, CONTINUATION = 0, 1, 2
_KINDS = weakref.WeakKeyDictionary()  # tokenizer -> (its vocabulary list, kinds of its ids)


def word_piece_kinds(model):
    """What each id of `model`'s output vocabulary is to `max_word_pieces`: int32 numpy `(vocab,)`.

    `CONTINUATION` (2) for a WordPiece token that continues a word (`##...`),
    `WORD_START` (1) for one that starts a word (ids past the tokenizer's
    vocabulary, which detokenize as `[UNK]`, too), `SPECIAL` (0) for the
    tokenizer's special tokens (`[PAD]`, `[START]`, `[END]`, ...: no piece of
    a word). Read from the model's preprocessor: a translator's
    `target_tokenizer`, a language model's `tokenizer`; computed once per
    vocabulary. Only WordPiece marks its continuation pieces, so a model
    without a preprocessor, or with another tokenizer (GPT-2's byte-level BPE,
    whose pieces carry no such mark), is a ValueError: the guard could not
    tell where a word ends. A WordPiece vocabulary without `##` pieces gives
    no `CONTINUATION` (the guard then bans nothing: no word has two pieces).

    Example:

    >>> from kformer import models
    >>> from kformer.data.preprocessors import TranslatorPreprocessor
    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["vic", "##tim", "##s"])
    >>> model = models.translator(preset="transformer_tiny", vocabulary_size=12,
    ...                           preprocessor=TranslatorPreprocessor(tokenizer, tokenizer, 8))
    >>> word_piece_kinds(model).tolist()
    [0, 0, 0, 0, 0, 0, 0, 1, 2, 2, 1, 1]
    """
    preprocessor = getattr(model, "preprocessor", None)
    tokenizer = getattr(preprocessor, "target_tokenizer", None) or getattr(preprocessor, "tokenizer", None)
    if tokenizer is not None:  # a preprocessor exists: its tokenizers' module is loaded already
        from kformer.data.wordpiece import WordPieceTokenizer
    if tokenizer is None or not isinstance(tokenizer, WordPieceTokenizer):
        raise ValueError(
            "`max_word_pieces` needs the model's WordPiece tokenizer (its preprocessor's `target_tokenizer` or "
            "`tokenizer`) to tell the pieces that continue a word (`##...`) from those that start one; "
            f"pass `max_word_pieces=None`. Received: a {type(model).__name__} with "
            f"{'no preprocessor' if preprocessor is None else f'a {type(tokenizer).__name__} tokenizer'}")
    cached = _KINDS.get(tokenizer)
    if cached is None or cached[0] is not tokenizer.vocabulary:
        special = set(tokenizer.special_tokens)
        kinds = np.array([SPECIAL if token in special else CONTINUATION if token.startswith("##") else WORD_START
                          for token in tokenizer.vocabulary], "int32")
        cached = _KINDS[tokenizer] = (tokenizer.vocabulary, kinds)
    vocab = model.decoding_limits()["vocabulary_size"]
    kinds = cached[1][:vocab]
    return np.concatenate([kinds, np.full((vocab - len(kinds),), WORD_START, "int32")])


def ban_long_words(logits, tokens, t, max_pieces, kinds):
    """Logits `(batch, vocab)` for position `t`, minus every continuation piece where the row's word is full.

    A row's current word is the piece before position `t` and the
    continuation pieces right before it, back to the piece that starts it; it
    is full when it has `max_pieces` pieces: the `max_pieces - 1` tokens
    before `t` are continuations and the one before them is a piece (a word
    start or a continuation; not a special token such as `[START]`, nor a
    position before the buffer). Then every `CONTINUATION` id is banned, so
    the row starts a new word or ends. Reads `max_pieces` tokens a step.
    `tokens`: int `(batch, length)`, the decoding buffer; `kinds`: int
    `(vocab,)` from `word_piece_kinds`.
    """
    inside = t - max_pieces >= 0  # a word of max_pieces pieces fits before t
    if isinstance(inside, bool) and not inside:  # torch's eager loop knows t
        return logits
    positions = t - max_pieces + ops.arange(max_pieces)  # t - max_pieces .. t - 1
    window = ops.take(kinds, ops.take(tokens, ops.maximum(positions, 0), axis=1), axis=0)  # (batch, max_pieces)
    full = ops.logical_and(ops.all(ops.equal(window[:, 1:], CONTINUATION), axis=1),
                           ops.not_equal(window[:, 0], SPECIAL))
    if not isinstance(inside, bool):
        full = ops.logical_and(full, inside)
    return ops.where(ops.logical_and(full[:, None], ops.equal(kinds, CONTINUATION)[None, :]), NEG_INF, logits)


def ban_slots(logits, tokens, required, slot, end):
    """Logits `(batch, vocab)` where a row may not end before it holds `required` `slot` tokens, nor hold more.

    While a row lacks slots, `[END]` is banned and its logit goes to `slot`
    (`max` of the two): a row that would end puts its missing slot there
    instead of writing on. Once it has them all, `slot` is banned. So every
    source slot (a copied number) is generated exactly once. `tokens`: int
    `(batch, length)`, the decoding buffer (0 past the current position);
    `required`: int `(batch,)`, the slots in each row's source.
    """
    emitted = ops.sum(ops.cast(ops.equal(tokens, slot), "int32"), axis=1)
    lacking = ops.less(emitted, required)[:, None]
    ids = ops.arange(ops.shape(logits)[-1])[None, :]
    to_slot = ops.maximum(logits[:, slot], logits[:, end])[:, None]
    logits = ops.where(ops.logical_and(lacking, ops.equal(ids, slot)), to_slot, logits)
    banned = ops.logical_or(ops.logical_and(lacking, ops.equal(ids, end)),
                            ops.logical_and(ops.logical_not(lacking), ops.equal(ids, slot)))
    return ops.where(banned, NEG_INF, logits)


def _slots_required(inputs, c):
    """Translator with `slot_token_id`: how many slots each source holds `(batch,)`, else None."""
    if c.slot_token_id is None:
        return None
    return ops.sum(ops.cast(ops.equal(inputs, c.slot_token_id), "int32"), axis=1)


def penalize_repetitions(logits, tokens, t, penalty):
    """Logits `(batch, vocab)` for position `t` with every token already in `tokens[:, :t]` penalized (CTRL,
    transformers' `repetition_penalty`): divided by `penalty` where positive, multiplied where negative."""
    rows = ops.broadcast_to(ops.arange(ops.shape(tokens)[0])[:, None], ops.shape(tokens))
    indices = ops.reshape(ops.stack([rows, tokens], axis=-1), (-1, 2))
    before = ops.broadcast_to(ops.arange(ops.shape(tokens)[1])[None, :] < t, ops.shape(tokens))
    seen = ops.scatter_update(ops.zeros_like(logits), indices, ops.reshape(ops.cast(before, logits.dtype), (-1,)),
                              reduction="add") > 0
    return ops.where(seen, ops.where(logits > 0, logits / penalty, logits * penalty), logits)


def _ban(logits, tokens, t, c, rows, required=None):
    """The logits (or log-probabilities) at position `t` after this call's rules, in transformers' order:
    `repetition_penalty`, the banned ids (the padding id, `bad_token_ids`, `suppress_token_ids`: one bias row),
    `begin_suppress_token_ids` at each row's first generated position, `no_repeat_ngram_size`,
    `max_word_pieces`, slots, and `end_at_max_length` (only the end token at the last position, scored 0).
    `rows`: the loop's constants (`_constants`)."""
    if c.repetition_penalty != 1.0:
        logits = penalize_repetitions(logits, tokens, t, c.repetition_penalty)
    logits = logits + rows["ban_bias"]  # NEG_INF at each banned id, else 0
    if c.begin_suppress_token_ids:
        first = ops.equal(rows["first_position"], t)[:, None]  # (batch, 1): the row's first generated token
        logits = logits + ops.where(first, rows["begin_bias"], 0.0)
    if c.no_repeat_ngram_size:
        logits = ban_repeated_ngrams(logits, tokens, t, c.no_repeat_ngram_size)
    if c.max_word_pieces:
        logits = ban_long_words(logits, tokens, t, c.max_word_pieces, rows["word_kinds"])
    if required is not None:
        logits = ban_slots(logits, tokens, required, c.slot_token_id, c.stop_token_ids[0])
    if c.end_at_max_length:
        logits = _branch(t + 1 >= ops.shape(tokens)[1], lambda: ops.zeros_like(logits) + rows["end_only"],
                         lambda: logits)
    return logits


def _stops(word, c):
    """Whether each token of `word` `(...)` is one of the stop ids (bool like `word`)."""
    stopped = ops.zeros_like(word, "bool")
    for stop in c.stop_token_ids:  # a few ids: one compare each
        stopped = ops.logical_or(stopped, ops.equal(word, stop))
    return stopped


def _known(t):
    """The loop position as an int where it is known (torch runs the loop eagerly, and its
    `slice_update` is faster with int indices); traced (TF, JAX), unchanged."""
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


def _next_logits(step, t, word, tokens, caches, logits, c):
    """Logits for position `t + 1` (skipped after the last position)."""
    more = t + 1 < ops.shape(tokens)[1]
    if not c.use_cache:
        return _branch(more, lambda: step.recompute(tokens, t), lambda: logits), caches
    return _branch(more, lambda: step(word[:, None], t, caches), lambda: (logits, caches))


class _Steps:
    """One decoding call's steps: the task's `call_with_cache`, or the same numbers through
    `kformer.kernels.decoding.PlainDecoder` where that applies."""

    def __init__(self, task, context, length):
        self.task, self.context = task, context
        self.plain = PlainDecoder.create(task, context, length)

    def __call__(self, tokens, index, cache):
        """`tokens` `(batch, 1)` at `index` -> `(next-token logits (batch, vocab), updated cache)`."""
        if self.plain is not None:
            return self.plain.step(tokens, index, cache)
        logits, cache = self.task.call_with_cache(tokens, cache, index, self.context)
        return logits[:, -1], cache

    def recompute(self, tokens, index):
        return self.task.call_without_cache(tokens, index, self.context)

    def repeat(self, beams):
        self.context = self.task.repeat_context(self.context, beams)
        if self.plain is not None:
            self.plain = self.plain.repeat(beams)


def _row_limits(task, inputs, c):
    """Translator: the most tokens each row generates, `ratio * source length + offset`, or None (`max_length`)."""
    if c.max_length_ratio is None:
        return None
    source_length = ops.sum(ops.cast(ops.not_equal(inputs, task.padding_id), "float32"), axis=1)
    limits = ops.cast(ops.floor(c.max_length_ratio * source_length), "int32") + c.max_length_offset
    return ops.maximum(limits, 1)  # the first token is always generated


def _prefill(task, inputs, c):
    """`task.prefill` with this call's settings, and the steps that follow it."""
    tokens, prompt, start, caches, context, logits = task.prefill(inputs, c.length, c.start_ids, c.use_cache)
    return tokens, prompt, start, caches, _Steps(task, context, ops.shape(tokens)[1]), logits


def _decode_loop(task, inputs, noise, c, rows, emit=None):
    """Greedy or sampling -> the tokens `task.generated_tokens` keeps of the buffer `(batch, length)`.
    `emit`: called with each step's tokens `(batch,)` as they are decided (streaming), or None."""
    tokens, prompt, start, caches, step, logits = _prefill(task, inputs, c)
    rows = _with_first_positions(rows, prompt, c)
    limits = _row_limits(task, inputs, c)
    required = _slots_required(inputs, c)
    length = ops.shape(tokens)[1]

    def cond(t, tokens, caches, logits, done):
        return ops.logical_and(t < length, ops.logical_not(ops.all(done)))

    def body(t, tokens, caches, logits, done):
        t = _known(t)
        logits = _ban(logits, tokens, t, c, rows, required)
        word = c.sampler.next_tokens(logits, None if noise is None else _column(noise, t))
        forced = _column(prompt, t)
        word = ops.where(forced, _column(tokens, t), ops.cast(word, "int32"))
        word = ops.where(done, 0, word)
        if emit is not None:
            word = emit(word)
        tokens = write_slice(tokens, [0, t], word[:, None])
        done = ops.logical_or(done, ops.logical_and(ops.logical_not(forced), _stops(word, c)))
        if limits is not None:  # buffer slot t holds generated token t (slot 0 is [START])
            done = ops.logical_or(done, t >= limits)
        logits, caches = _next_logits(step, t, word, tokens, caches, logits, c)
        return t + 1, tokens, caches, logits, done

    done = ops.zeros((ops.shape(tokens)[0],), "bool")
    _, tokens, _, _, _ = ops.while_loop(cond, body, (start, tokens, caches, logits, done))
    return task.generated_tokens(tokens)


def _with_first_positions(rows, prompt, c):
    """`rows` plus each row's first generated position `(batch,)` where `begin_suppress_token_ids` needs it."""
    if not c.begin_suppress_token_ids:
        return rows
    return {**rows, "first_position": ops.sum(ops.cast(prompt, "int32"), axis=1)}


def _beam_loop(task, inputs, c, rows):
    """Beam search as transformers' (`generate(num_beams=...)`, its default `early_stopping=False`).

    Each step takes the `2 * beams` best continuations of a row's running
    beams (log-softmax first, then the bans). A continuation that ends (its
    stop ids, or the last position) and ranks among the first `beams`
    joins the row's finished translations, scored `log p / length **
    length_penalty` (`length`: generated tokens, the end included); the best
    `beams` that did not end run on. A row stops once its finished
    translations are `beams` and the best running beam, scored at its
    current length, would not beat the worst of them. Returns each row's
    best finished translations (`num_return_sequences` of them, best first).
    """
    beams, vocab = c.beams, task.decoding_limits()["vocabulary_size"]
    keep = 2 * beams  # continuations a step: `beams` run on even when `beams` of them end
    tokens, prompt, start, caches, step, logits = _prefill(task, inputs, c)
    batch, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    prompt_length = ops.sum(ops.cast(prompt, "int32"), axis=1)  # a row's forced positions
    prompted = task.decoding_family == "causal" or len(c.start_ids) > 1  # forced tokens after `start`
    last = length - 1 if (limits := _row_limits(task, inputs, c)) is None else ops.minimum(limits, length - 1)
    required = _slots_required(inputs, c)
    required = None if required is None else ops.repeat(required, beams, axis=0)
    tokens, prompt, logits = (ops.repeat(x, beams, axis=0) for x in (tokens, prompt, logits))
    rows = _with_first_positions(rows, prompt, c)
    caches = tuple(ops.repeat(cache, beams, axis=0) for cache in caches)
    step.repeat(beams)
    # Only beam 0 is alive at first, so the first step does not pick the same continuation `beams` times.
    running = ops.concatenate([ops.zeros((batch, 1)), ops.full((batch, beams - 1), NEG_INF)], axis=1)
    first_beams = ops.arange(keep)[None, :] < beams

    def gather(x, index):  # rows of `x` by `index` (batch, n): flat row numbers
        return ops.take(x, ops.reshape(index, (-1,)), axis=0)

    def cond(t, tokens, caches, logits, running, finished, finished_scores, filled, open_rows):
        return ops.logical_and(t < length, ops.any(open_rows))

    def body(t, tokens, caches, logits, running, finished, finished_scores, filled, open_rows):
        t = _known(t)
        forced = _column(prompt, t)
        log_probs = _ban(ops.log_softmax(logits, axis=-1), tokens, t, c, rows, required)
        if prompted:  # inside a row's prompt, its token scores 0 and every other NEG_INF
            prompt_token = ops.where(ops.arange(vocab)[None, :] == _column(tokens, t)[:, None], 0.0, NEG_INF)
            log_probs = ops.where(forced[:, None], prompt_token, log_probs)
        candidates = ops.reshape(ops.reshape(running, (-1, 1)) + log_probs, (batch, beams * vocab))
        scores, best = ops.top_k(candidates, keep)  # (batch, keep), best first
        origin = ops.arange(batch)[:, None] * beams + best // vocab  # the beam each continues
        word = ops.cast(best % vocab, "int32")
        grown = write_slice(gather(tokens, origin), [0, t], ops.reshape(word, (-1, 1)))  # (batch * keep, length)
        in_prompt = ops.reshape(forced, (batch, beams))[:, :1]  # a row's beams share its prompt
        ended = ops.logical_and(ops.logical_not(in_prompt), ops.logical_or(
            _stops(word, c), ops.reshape(t >= last, (-1, 1))))
        # The beams that run on: the best `beams` continuations that did not end.
        running, pick = ops.top_k(scores + ops.cast(ended, "float32") * NEG_INF, beams)
        picked = ops.arange(batch)[:, None] * keep + pick
        tokens = gather(grown, picked)
        caches = tuple(gather(cache, ops.take(ops.reshape(origin, (-1,)), ops.reshape(picked, (-1,))))
                       for cache in caches)
        # The finished translations: the best `beams` of those kept and those that ended now among the first `beams`.
        generated = ops.cast(ops.maximum(t + 1 - prompt_length, 1), "float32")[:, None]  # (batch, 1)
        penalty = ops.power(generated, c.sampler.length_penalty)
        new = ops.logical_and(ended, first_beams)
        now = (scores / penalty + ops.cast(ops.logical_not(open_rows), "float32")[:, None] * NEG_INF
               + ops.cast(ops.logical_not(new), "float32") * NEG_INF)
        finished_scores, pick = ops.top_k(ops.concatenate([finished_scores, now], axis=1), beams)
        merged = ops.concatenate([ops.reshape(finished, (batch, beams, length)),
                                  ops.reshape(grown, (batch, keep, length))], axis=1)
        finished = gather(ops.reshape(merged, (batch * (beams + keep), length)),
                          ops.arange(batch)[:, None] * (beams + keep) + pick)
        filled = ops.take_along_axis(ops.concatenate([filled, new], axis=1), pick, axis=1)
        # A row stays open while a running beam at its current length would beat its worst finished one.
        worst = ops.where(filled, ops.min(finished_scores, axis=1, keepdims=True), NEG_INF)
        open_rows = ops.logical_and(open_rows, ops.any(running[:, :1] / penalty > worst, axis=1))
        open_rows = ops.logical_and(open_rows, t < last)
        logits, caches = _next_logits(step, t, _column(tokens, t), tokens, caches, logits, c)
        return t + 1, tokens, caches, logits, running, finished, finished_scores, filled, open_rows

    state = (start, tokens, caches, logits, running, tokens, ops.full((batch, beams), NEG_INF),
             ops.zeros((batch, beams), "bool"), ops.ones((batch,), "bool"))
    finished = ops.while_loop(cond, body, state)[5]  # (batch * beams, length), each row's best first
    best = ops.reshape(ops.arange(batch)[:, None] * beams + ops.arange(c.num_return_sequences)[None, :], (-1,))
    return task.generated_tokens(ops.take(finished, best, axis=0))


class _Generator(keras.Model):
    """Wraps the loop in a Keras model so `predict_on_batch` compiles it (XLA on TF/JAX).

    `streaming`: the loop hands each step's tokens to `self.streamer` (set per call, under the model's lock)."""

    def __init__(self, task, plan, word_kinds=None, streaming=False):
        super().__init__(name="generator")
        self.task = task
        self.plan = plan
        self.word_kinds = word_kinds
        self.streaming = streaming
        self.streamer = None
        # It owns no weights. Built, it is not run eagerly once before compiling (Keras's JAX
        # `predict_on_batch` builds unbuilt models that way: a second, uncompiled run of the whole loop).
        self.built = all(layer.built for layer in task._flatten_layers())

    def call(self, inputs):
        emit = streaming.emitter(lambda tokens: self.streamer(tokens)) if self.streaming else None
        return _run(self.task, inputs["token_ids"], inputs["noise"], self.plan, xla=self.jit_compile,
                    word_kinds=self.word_kinds, emit=emit)


def _constants(task, c, word_kinds):
    """The rows a loop adds to the logits, made once per loop: `ban_bias` (NEG_INF at the banned ids),
    `begin_bias` (at `begin_suppress_token_ids`), `end_only` (`end_at_max_length`'s last position), and
    `word_kinds` where `max_word_pieces` is set."""
    ids = ops.arange(task.decoding_limits()["vocabulary_size"])[None, :]

    def bias(banned):
        hit = ops.zeros_like(ids, "bool")
        for token in banned:
            hit = ops.logical_or(hit, ids == token)
        return ops.where(hit, NEG_INF, 0.0)

    rows = {"ban_bias": bias(c.banned_ids), "begin_bias": bias(c.begin_suppress_token_ids)}
    if c.end_at_max_length:
        rows["end_only"] = ops.where(ids == c.stop_token_ids[0], 0.0, NEG_INF)
    if c.max_word_pieces:
        rows["word_kinds"] = ops.convert_to_tensor(word_kinds, "int32")
    return rows


def _run(task, token_ids, noise, c, xla, word_kinds=None, emit=None):
    """The plan's loop; `xla`: it will be compiled by XLA (cache writes in place, `traced_for_xla`).
    `word_kinds`: `word_piece_kinds(task)` where `c.max_word_pieces` is set (a constant of the graph)."""
    token_ids = ops.cast(token_ids, getattr(task, "source_dtype", "int32"))  # ids, or a speech task's features
    rows = _constants(task, c, word_kinds)
    with traced_for_xla() if xla else contextlib.nullcontext():
        if c.beams:
            return _beam_loop(task, token_ids, c, rows)
        return _decode_loop(task, token_ids, noise, c, rows, emit)


# The compiled loops of the last few (model, decoding plan), most recent last: a model that alternates
# settings, or models that take turns (a translator and a language model in one service), reuse their
# loops. Each entry holds its model, so the few kept bound the memory they keep alive.
_COMPILED = collections.OrderedDict()
_MAX_COMPILED = 4
_COMPILED_GUARD = threading.Lock()


def generate(model, token_ids, config=None, *, streamer=None, pad_batch=True, **overrides):
    """Decode with a `Translator` (source ids in) or a `CausalLM` (prompt ids in).

    Translator: returns the generated tokens after the start token, through
    the first stop id, then 0. CausalLM: `token_ids` are prompts,
    right-padded with 0 (ragged prompts continue exactly as each would
    alone); returns the prompt followed by the generated tokens, through the
    first stop id (if any), then 0 (`strip_prompt=True`: the generated
    tokens alone). Decoding stops early once every row has ended. The loop
    is compiled once per setting (XLA on TensorFlow and JAX) and reused;
    there XLA also compiles once per shape, so a batch runs at
    `batching.batch_bucket(batch)` rows (its last row repeated) and sources
    at a multiple of 16 tokens: 3 sentences, then 4, compile once.

    Args:
        model: a `Translator` or a `CausalLM`.
        token_ids: int `(batch, length)`, 0 = padding: the source (translator)
            or the prompts (language model).
        config: a `GenerationConfig`. Defaults to `GenerationConfig()`
            (greedy; `task.generate` starts from `task.generation_config`).
        streamer: callable or None. Called at each step, as soon as the
            step's tokens are decided, with an int32 numpy array `(batch,)`:
            each row's token at that position (a longer prompt's own
            tokens while it is forced; 0 once a row has ended). Joined, the
            calls give the returned tokens from the first generated position
            on. Not with beam search (whose beams change their past).
        pad_batch: bool. `True` (default): on TensorFlow and JAX run the
            batch at `batching.batch_bucket(batch)` rows, a few compiles for
            any batch sizes. `False`: at its own size, one compile per size,
            and no copied rows' work (docs/decisions.md, "Why batches are
            padded"). Torch pads nothing either way.
        **overrides: `GenerationConfig` fields that replace the config's
            (`max_length=20`, `sampler=TopPSampler(p=0.9)`, `end_token_id=2`
            for `stop_token_ids=(2,)`; 0.2's `strategy`, `num_beams`, `k`, `p`,
            ... with a DeprecationWarning).

    Returns:
        int32 numpy: `(batch * num_return_sequences, max_length)`.

    Example:

    >>> import numpy as np
    >>> from kformer import models
    >>> model = models.translator(preset="transformer_tiny", vocabulary_size=50)
    >>> generate(model, np.array([[5, 6, 7]]), max_length=4, start_token_id=1, end_token_id=2).shape
    (1, 4)
    """
    _check_model(model)
    if not isinstance(pad_batch, (bool, np.bool_)):
        raise ValueError(f"`pad_batch` must be True or False. Received: pad_batch={pad_batch!r}")
    if streamer is not None and not callable(streamer):
        raise ValueError(f"`streamer` must be a callable or None. Received: streamer={streamer!r}")
    config = _config(config, overrides)
    source_dtype = getattr(model, "source_dtype", "int32")
    features = source_dtype != "int32"  # a speech task's log-mel frames, not token ids
    source = model.check_source(token_ids) if features else None
    ids = np.ones((len(source), 1), "int32") if features else np.asarray(ops.convert_to_numpy(token_ids))
    plan = config.resolve(model.decoding_family, ids, **model.decoding_limits())
    if features and (plan.max_length_ratio is not None or plan.slot_token_id is not None):
        raise ValueError("`max_length_ratio` and `slot_token_id` count a source's tokens; this model's source is "
                         f"{source_dtype} features. Received: max_length_ratio={plan.max_length_ratio!r}, "
                         f"slot_token_id={plan.slot_token_id!r}")
    if streamer is not None and plan.beams:
        raise ValueError(f"`streamer` needs one token a row a step: not with beam search. Received: "
                         f"sampler={plan.sampler!r}")
    kinds = word_piece_kinds(model) if plan.max_word_pieces else None
    translator = model.decoding_family == "translator"
    if features:
        ids = source
    elif translator:  # drop all-padding columns: a batch of short sources encodes short
        ids = batching.pad_width(batching.trim_width(ids, model.padding_id), padding_id=model.padding_id)
    else:
        ids = batching.pad_width(ids, plan.length)
    ids = np.asarray(ops.convert_to_numpy(ids), source_dtype)
    prompts = ids
    if plan.num_return_sequences > 1 and not plan.beams:  # samples: each row repeated, its own uniforms
        ids = np.repeat(ids, plan.num_return_sequences, axis=0)
        plan = dataclasses.replace(plan, num_return_sequences=1)
    # the model's variables in the key: after `quantize` or `enable_lora` (variables replaced or added) the
    # loop is traced again, not run with the weights it captured before
    variables = hash(tuple(id(v) for v in model.weights))
    key = (id(model), variables, plan, None if kinds is None else kinds.tobytes(), streamer is not None)
    backend = keras.backend.backend()
    xla = backend != "torch" and not (streamer is not None and backend == "tensorflow")  # TF streams from a graph
    with _COMPILED_GUARD:  # threads decoding at once each keep the loop they looked up
        if key not in _COMPILED:
            generator = _Generator(model, plan, kinds, streaming=streamer is not None)
            generator.compile(jit_compile=xla)
            _COMPILED[key] = (model, generator)
            while len(_COMPILED) > _MAX_COMPILED:
                _COMPILED.popitem(last=False)
        _COMPILED.move_to_end(key)
        generator = _COMPILED[key][1]
    width = plan.length + len(plan.start_ids)
    rows = len(ids)
    noise = np.random.default_rng(config.seed).random((rows, width)).astype("float32")
    if xla and pad_batch:  # XLA compiles once per batch size: a few sizes, not every one
        bucket = int(batching.batch_bucket(rows))
        ids, noise = (np.asarray(ops.convert_to_numpy(batching.repeat_last_row(a, bucket))) for a in (ids, noise))
    with model_lock(model):  # on JAX the loop takes the task's variables out while it runs
        generator.streamer = None if streamer is None else (lambda tokens: streamer(np.asarray(tokens)[:rows]))
        try:
            out = generator.predict_on_batch({"token_ids": ids, "noise": noise})
        finally:
            generator.streamer = None
    out = np.asarray(ops.convert_to_numpy(out), "int32")[:rows * (plan.num_return_sequences if plan.beams else 1)]
    if plan.strip_prompt and not translator:
        out = _generated_only(out, np.repeat(prompts, len(out) // len(prompts), axis=0))
    return out


def _generated_only(tokens, prompts):
    """Each row's tokens after its prompt, moved to the row's start (0 after)."""
    lengths = np.count_nonzero(prompts, axis=1)
    out = np.zeros_like(tokens)
    for row, n in enumerate(lengths):
        out[row, :tokens.shape[1] - n] = tokens[row, n:]
    return out


def _config(config, overrides):
    """`config` (default `GenerationConfig()`) with `overrides`, checked."""
    if config is None:
        config = GenerationConfig()
    elif not isinstance(config, GenerationConfig):
        raise ValueError(f"`config` must be a `kformer.generation.GenerationConfig` or None. Received: "
                         f"config={config!r}")
    return config.replace(**overrides) if overrides else config


def decode_function(model, config=None, *, xla=False, **overrides):
    """For graphs (SavedModel export): `fn(token_ids, noise=None) -> ids`, the loop of `generate`.

    In `keras.ops` with no numpy, so it traces into a `tf.function`. Samplers
    take `noise`, uniforms `(batch * num_return_sequences, length)` (the
    caller draws them, e.g. from a seed input).

    Args:
        model: a `Translator` or a `CausalLM`.
        config: a `GenerationConfig` (as in `generate`; `seed`, `strip_prompt`
            and streaming are the caller's).
        xla: bool. `True` when `fn` will be traced inside a
            `tf.function(jit_compile=True)`: its cache writes are then XLA's
            in-place update. `False` (default): core TensorFlow ops only, which
            the stock TF Serving binary runs with XLA compilation off.
        **overrides: `GenerationConfig` fields, as in `generate`.

    Example:

    >>> from kformer import models
    >>> decode = decode_function(models.causal_lm(preset="gpt_tiny", vocabulary_size=50), max_length=8)
    >>> import numpy as np
    >>> tuple(decode(np.array([[5, 6]])).shape)
    (1, 8)
    """
    _check_model(model)
    config = _config(config, overrides)
    plan = config.resolve(model.decoding_family, np.ones((1, 1), "int32"), **model.decoding_limits())
    kinds = word_piece_kinds(model) if plan.max_word_pieces else None
    repeats = plan.num_return_sequences if not plan.beams else 1
    plan = plan if plan.beams else dataclasses.replace(plan, num_return_sequences=1)

    def decode(token_ids, noise=None):
        if repeats > 1:
            token_ids = ops.repeat(token_ids, repeats, axis=0)
        return _run(model, token_ids, noise, plan, xla=bool(xla), word_kinds=kinds)

    return decode


def _check_model(model):
    """A ValueError naming anything that is not a generative kformer task."""
    if not isinstance(model, GenerativeTask):
        raise ValueError("`model` must be a kformer `Translator` or `CausalLM` (built by `kformer.models` or "
                         f"loaded with `kformer.models.load`). Received: {type(model).__name__}")
