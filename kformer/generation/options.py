"""The one validation of decoding options, for `generate`, `decode_function` and the SavedModel export.

Each check names the bad value (`"... Received: num_beams=0"`). The
functions take plain values (the model family, vocabulary sizes, the
position limit), not a model, so the in-process decoding loop and the export
options share them.
"""

import math

import numpy as np

STRATEGIES = ("greedy", "beam", "top_k", "top_p")
FAMILIES = ("translator", "causal")
MAX_LENGTH_CAP = 8192  # bound for models without learned positions (sinusoidal, rotary)
# `Translator.translate`'s and the translation export's `max_word_pieces`: a word of the output has at
# most this many WordPiece pieces. Issue 60, measured on the bundled spa-eng sample (transformer_tiny, 20
# epochs, a 1,500-token WordPiece vocabulary): greedy decoding gave 1.6% of 734 test and held-out
# translations a word over 3x the letters of the source's longest ("un poeeeeeeeeeeeeeeeeeeeeeeeee"), 0% at
# every value from 3 to 6, BLEU and chrF unchanged (within 0.15). A value forbids the reference words the
# tokenizer splits into more pieces: 4.7% of them at 3, 1.7% at 4, 0.5% at 5, 0.16% at 6. 5 stops the
# chains and keeps 99.5% of real words writable.
TRANSLATE_MAX_WORD_PIECES = 5
# `Translator.translate`'s and the translation export's `no_repeat_ngram_size`: the recipe's repetition guard
# (issue 60: an undertrained translator looped "no me gusta que no me gusta que ..." without it).
TRANSLATE_NO_REPEAT_NGRAM_SIZE = 3
_USED_BY = {"greedy": (), "beam": ("num_beams", "length_penalty"), "top_k": ("k", "temperature"),
            "top_p": ("p", "temperature")}


def is_int(value):
    """Whether `value` is a Python or numpy int (not a bool).

    Example:

    >>> is_int(3), is_int(np.int64(3)), is_int(True), is_int(3.0)
    (True, True, False, False)
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_decoding_options(family, token_ids, *, vocabulary_size, source_vocabulary_size=None,
                           position_limit=None, padding_id=0, max_length, start_token_id=None, end_token_id=None,
                           strategy="greedy", num_beams=4, length_penalty=0.6, k=50, p=0.9, temperature=1.0,
                           seed=None, use_cache=True, no_repeat_ngram_size=0, max_length_ratio=None,
                           max_length_offset=10, max_word_pieces=None, slot_token_id=None, end_at_max_length=False):
    """Validate every decoding argument (naming it) -> the decoding loop's config dict.

    Args:
        family: `"translator"` (source ids in, target ids out) or `"causal"`
            (prompts in, prompt + continuation out).
        token_ids: numpy int `(batch, length)`, 0 = padding: the sources or
            the right-padded prompts (a graph passes `np.ones((1, 1))`).
        vocabulary_size: int. The vocabulary generated from (a translator's target).
        source_vocabulary_size: int. A translator's source vocabulary
            (`token_ids` lie below it). Defaults to `vocabulary_size`.
        position_limit: int or None. The longest `max_length` the model's
            learned positions allow (`None`: `MAX_LENGTH_CAP`).
        padding_id: int. The model's padding id (never generated, so never the
            `end_token_id`). Defaults to `0`, which also cannot start a
            translation (the decoder masks it); a checkpoint's other padding
            id may (Marian starts its decoder from it).
        max_length, start_token_id, end_token_id, strategy, num_beams,
            length_penalty, k, p, temperature, seed, use_cache,
            no_repeat_ngram_size, max_length_ratio, max_length_offset,
            max_word_pieces, slot_token_id, end_at_max_length: as in
            `kformer.generation.search.generate`.

    Returns:
        dict of plain Python values: the options the loop reads (`seed`
        and `padding_id` included), those the strategy ignores set to None (one compiled loop
        per setting that matters); `max_word_pieces` None when off (None or 0).

    Example:

    >>> config = check_decoding_options("causal", np.array([[5, 6]]), vocabulary_size=50, max_length=8)
    >>> config["strategy"], config["end_token_id"], config["temperature"]
    ('greedy', -1, None)
    >>> check_decoding_options("causal", np.array([[5]]), vocabulary_size=50, max_length=8, num_beams=0)
    Traceback (most recent call last):
    ...
    ValueError: `num_beams` must be an int >= 1. Received: num_beams=0
    """
    if family not in FAMILIES:
        raise ValueError(f"`family` must be one of {FAMILIES}. Received: family={family!r}")
    translator = family == "translator"
    c = dict(max_length=max_length, start_token_id=start_token_id, end_token_id=end_token_id, strategy=strategy,
             num_beams=num_beams, length_penalty=length_penalty, k=k, p=p, temperature=temperature,
             use_cache=use_cache, seed=seed, no_repeat_ngram_size=no_repeat_ngram_size,
             max_length_ratio=max_length_ratio, max_length_offset=max_length_offset)
    c["max_word_pieces"] = check_max_word_pieces(max_word_pieces)
    if slot_token_id is not None:
        if not translator:
            raise ValueError("`slot_token_id` is for translators (slots counted in the source). "
                             f"Received: slot_token_id={slot_token_id!r}")
        both = min(vocabulary_size, source_vocabulary_size or vocabulary_size)  # an id of both vocabularies
        if not is_int(slot_token_id) or not 0 < slot_token_id < both:
            raise ValueError(f"`slot_token_id` must be None or an int in [1, {both}). "
                             f"Received: slot_token_id={slot_token_id!r}")
    c["slot_token_id"] = slot_token_id
    c["padding_id"] = padding_id
    if not isinstance(end_at_max_length, (bool, np.bool_)):
        raise ValueError("`end_at_max_length` must be True or False. Received: "
                         f"end_at_max_length={end_at_max_length!r}")
    if end_at_max_length and end_token_id is None:
        raise ValueError("`end_at_max_length=True` writes `end_token_id` last, so it needs one. Received: "
                         "end_token_id=None")
    c["end_at_max_length"] = bool(end_at_max_length)
    ids = np.asarray(token_ids)
    if c["strategy"] not in STRATEGIES:
        raise ValueError(f"`strategy` must be one of {STRATEGIES}. Received: strategy={c['strategy']!r}")
    name = "encoder_token_ids" if translator else "token_ids"
    if ids.ndim != 2 or 0 in ids.shape or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"`{name}` must be a non-empty int array (batch, length). Received: "
                         f"shape={ids.shape}, dtype={ids.dtype}")
    vocabulary = (source_vocabulary_size or vocabulary_size) if translator else vocabulary_size
    if ids.min() < 0 or ids.max() >= vocabulary:
        raise ValueError(f"`{name}` must be in [0, {vocabulary}) (0 = padding). Received: values from "
                         f"{ids.min()} to {ids.max()}")
    for key, low in (("max_length", 1), ("num_beams", 1), ("k", 1), ("no_repeat_ngram_size", 0)):
        if not is_int(c[key]) or c[key] < low:
            raise ValueError(f"`{key}` must be an int >= {low}. Received: {key}={c[key]!r}")
    for key in ("length_penalty", "p", "temperature"):
        if isinstance(c[key], bool) or not isinstance(c[key], (int, float, np.floating)) \
                or not math.isfinite(c[key]):
            raise ValueError(f"`{key}` must be a finite number. Received: {key}={c[key]!r}")
    if c["seed"] is not None and (not is_int(c["seed"]) or not 0 <= c["seed"] < 2**63):
        raise ValueError(f"`seed` must be None or an int in [0, 2**63). Received: seed={c['seed']!r}")
    if not 0.0 < c["p"] <= 1.0:
        raise ValueError(f"`p` must be in (0, 1]. Received: p={c['p']}")
    if not c["temperature"] > 0:
        raise ValueError(f"`temperature` must be > 0. Received: temperature={c['temperature']}")
    if position_limit is not None and c["max_length"] > position_limit:
        raise ValueError(f"`max_length` exceeds the model's learned positions (sequence_length={position_limit}). "
                         f"Received: max_length={c['max_length']}")
    if c["max_length"] > MAX_LENGTH_CAP:
        raise ValueError(f"`max_length` must be <= {MAX_LENGTH_CAP}. Received: max_length={c['max_length']}")
    for key in ("start_token_id", "end_token_id"):
        if c[key] is None and not translator:
            continue
        if key == "start_token_id" and not translator:
            raise ValueError("`start_token_id` is for translators; a CausalLM continues its prompt "
                             f"(put any start token in the prompt). Received: start_token_id={c[key]!r}")
        low = 1 if padding_id == 0 else 0
        if not is_int(c[key]) or not low <= c[key] < vocabulary_size:
            raise ValueError(f"`{key}` must be an int in [{low}, {vocabulary_size}). Received: {key}={c[key]!r}")
        if key == "end_token_id" and c[key] == padding_id:
            raise ValueError(f"`end_token_id` is the model's padding id {padding_id}, which is never generated: "
                             f"decoding would never end. Received: end_token_id={c[key]!r}")
    if not translator:
        check_prompts(ids, c["max_length"])
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
        c["k"] = min(int(c["k"]), vocabulary_size)
    if c["strategy"] == "beam" and c["num_beams"] > vocabulary_size:
        raise ValueError(f"`num_beams` must be <= the vocabulary size {vocabulary_size}. "
                         f"Received: num_beams={c['num_beams']}")
    c["use_cache"] = bool(c["use_cache"])
    for key in ("num_beams", "length_penalty", "k", "p", "temperature"):
        if key not in _USED_BY[c["strategy"]]:
            c[key] = None  # one compiled loop per setting that matters (greedy ignores temperature)
    return {key: (float(v) if isinstance(v, (float, np.floating)) else int(v) if is_int(v) else v)
            for key, v in c.items()}


def check_max_word_pieces(max_word_pieces):
    """Validate `max_word_pieces` (naming a bad value) -> an int >= 1, or None (off: None or 0).

    Example:

    >>> check_max_word_pieces(4), check_max_word_pieces(0), check_max_word_pieces(None)
    (4, None, None)
    >>> check_max_word_pieces(True)
    Traceback (most recent call last):
    ...
    ValueError: `max_word_pieces` must be None or an int >= 0 (None or 0: off). Received: max_word_pieces=True
    """
    if max_word_pieces is None:
        return None
    if not is_int(max_word_pieces) or max_word_pieces < 0:
        raise ValueError("`max_word_pieces` must be None or an int >= 0 (None or 0: off). Received: "
                         f"max_word_pieces={max_word_pieces!r}")
    return int(max_word_pieces) or None


def check_length_limit(max_length_ratio, max_length_offset):
    """Validate a translation length limit (naming the bad value) -> `(float ratio, int offset)`.

    Example:

    >>> check_length_limit(1.5, 10)
    (1.5, 10)
    """
    ratio, offset = max_length_ratio, max_length_offset
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.integer, np.floating)) \
            or not math.isfinite(ratio) or ratio <= 0:
        raise ValueError(f"`max_length_ratio` must be a finite number > 0, or None. Received: "
                         f"max_length_ratio={ratio!r}")
    if not is_int(offset) or offset < 0:
        raise ValueError(f"`max_length_offset` must be an int >= 0. Received: max_length_offset={offset!r}")
    return float(ratio), int(offset)


def check_prompts(ids, max_length):
    """A ValueError naming the row of an empty or left-padded prompt, or prompts wider than `max_length`.

    Example:

    >>> check_prompts(np.array([[5, 6], [7, 0]]), 4)
    >>> check_prompts(np.array([[5, 6], [0, 0]]), 4)
    Traceback (most recent call last):
    ...
    ValueError: `token_ids`: every prompt needs at least one token. Received: empty prompt in row 1
    """
    lengths = (ids != 0).sum(axis=1)
    if (lengths == 0).any():
        raise ValueError(f"`token_ids`: every prompt needs at least one token. Received: empty prompt in row "
                         f"{int(np.flatnonzero(lengths == 0)[0])}")
    gaps = (ids[:, 1:] != 0) & (ids[:, :-1] == 0)
    if ids.shape[1] > 1 and gaps.any():
        raise ValueError("`token_ids`: prompts must be right-padded (0 after the tokens, never before). Received: "
                         f"a 0 before a token in row {int(np.flatnonzero(gaps.any(1))[0])}")
    if ids.shape[1] > max_length:
        raise ValueError(f"`max_length` ({max_length}) must be at least the prompt length. Received: "
                         f"prompts of width {ids.shape[1]}, max_length={max_length}")


def check_export_options(task_type, *, sequence_length, position_limit=None, max_length=None, num_beams=4,
                         top_p=0.9, temperature=1.0, no_repeat_ngram_size=None, xla=False, max_length_ratio=None,
                         max_length_offset=10, max_word_pieces=TRANSLATE_MAX_WORD_PIECES):
    """Validate the decoding options of a SavedModel export -> the dict the signatures read.

    Args:
        task_type: str. The task's `task_type` (options other than
            `"translation"` and `"text_generation"` must keep their defaults).
        sequence_length: int. The preprocessor's: the default `max_length`.
        position_limit: int or None. A language model's learned positions
            (`max_length` may not exceed it).
        max_length, num_beams, top_p, temperature, no_repeat_ngram_size,
            xla, max_length_ratio, max_length_offset, max_word_pieces: as in
            `kformer.export.save_for_serving`.

    `no_repeat_ngram_size=None` is the task's default:
    `TRANSLATE_NO_REPEAT_NGRAM_SIZE` (3) for translation, as `translate`'s,
    and 0 (off) for text generation.

    Returns:
        dict: `max_length`, `num_beams` (translation), `max_length_ratio`
        and `max_length_offset` (when a ratio is given), `max_word_pieces`
        (translation, when on), `top_p`, `temperature` (text generation),
        `no_repeat_ngram_size`, `xla` (when true).

    Example:

    >>> check_export_options("translation", sequence_length=40, max_word_pieces=0)
    {'max_length': 40, 'num_beams': 4, 'no_repeat_ngram_size': 3}
    >>> check_export_options("translation", sequence_length=40, max_word_pieces=3)["max_word_pieces"]
    3
    >>> check_export_options("text_classification", sequence_length=40)
    {}
    """
    options = {}
    if task_type == "translation":
        options.update(max_length=max_length or sequence_length, num_beams=num_beams)
        for name in ("max_length", "num_beams"):
            if not isinstance(options[name], int) or options[name] < 1:
                raise ValueError(f"`{name}` must be an int >= 1. Received: {name}={options[name]!r}")
        if max_length_ratio is not None:
            options["max_length_ratio"], options["max_length_offset"] = check_length_limit(max_length_ratio,
                                                                                           max_length_offset)
        pieces = check_max_word_pieces(max_word_pieces)
        if pieces is not None:
            options["max_word_pieces"] = pieces
    elif max_length_ratio is not None:
        raise ValueError(f"`max_length_ratio` is for translation. Received: max_length_ratio={max_length_ratio!r} "
                         f"for a {task_type} task")
    elif max_word_pieces not in (None, 0, TRANSLATE_MAX_WORD_PIECES):  # the default is translation's
        raise ValueError(f"`max_word_pieces` is for translation. Received: max_word_pieces={max_word_pieces!r} "
                         f"for a {task_type} task")
    if task_type == "text_generation":
        options.update(max_length=max_length or sequence_length, top_p=top_p, temperature=temperature)
        if not isinstance(max_length or 2, int) or options["max_length"] < 2 or (
                position_limit and options["max_length"] > position_limit):
            raise ValueError(f"`max_length` must be an int in [2, {position_limit or 'inf'}] (prompt included). "
                             f"Received: max_length={options['max_length']!r}")
        if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
            raise ValueError(f"`top_p` must be a float in (0, 1]. Received: top_p={top_p!r}")
        if not isinstance(temperature, (int, float)) or not 0 < temperature < float("inf"):
            raise ValueError(f"`temperature` must be a finite float > 0. Received: temperature={temperature!r}")
    if task_type in ("translation", "text_generation"):
        if no_repeat_ngram_size is None:
            no_repeat_ngram_size = TRANSLATE_NO_REPEAT_NGRAM_SIZE if task_type == "translation" else 0
        if not isinstance(no_repeat_ngram_size, int) or isinstance(no_repeat_ngram_size, bool) \
                or no_repeat_ngram_size < 0:
            raise ValueError("`no_repeat_ngram_size` must be an int >= 0 (0 = off). Received: "
                             f"no_repeat_ngram_size={no_repeat_ngram_size!r}")
        options["no_repeat_ngram_size"] = no_repeat_ngram_size
    if not isinstance(xla, bool) or (xla and task_type != "translation"):
        raise ValueError(f"`xla` must be a bool, and True only for translation (the `translate_xla` signature). "
                         f"Received: xla={xla!r} for a {task_type} task")
    if xla:
        options["xla"] = True
    return options
