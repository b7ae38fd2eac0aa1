"""Checks of single decoding values that `GenerationConfig` and the SavedModel export share, and the
translator's guard defaults.

Each check names the bad value (`"... Received: max_word_pieces=True"`).
"""

import math

import numpy as np

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


def is_int(value):
    """Whether `value` is a Python or numpy int (not a bool).

    Example:

    >>> is_int(3), is_int(np.int64(3)), is_int(True), is_int(3.0)
    (True, True, False, False)
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


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
