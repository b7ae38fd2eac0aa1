"""WordPiece vocabulary learning: tensorflow-text's top-down learner, computed with numpy.

tensorflow-text's learner (`wordpiece_tokenizer_learner_lib.learn`, the one
behind keras-hub's `compute_word_piece_vocabulary`) binary-searches a count
threshold. For each threshold it runs 4 rounds; in each, every word is cut at
the starts of its longest-match pieces under the current vocabulary (every
position in round 0), every substring from a start to each end is counted,
and then each token's count is taken off all its prefixes; the tokens left
with at least the threshold are the next vocabulary. Every prefix of a counted
substring is counted from the same start, so what is left of a token's count
is the count of its occurrences that run to the end of the word: a round only
needs one suffix per piece start. Here words, substrings and suffixes are
integer ids, and a round is a handful of numpy operations over all words at
once. The vocabulary is the same, token for token and in the same order
(tests/data/test_wordpiece_learner.py checks it against tensorflow-text),
and faster (docs/decisions.md, "Why vocabularies are learned in numpy").
"""

import numpy as np

JOINER = "##"


def learn_vocabulary(word_counts, vocabulary_size, reserved_tokens, lower_thresh=10, upper_thresh=10**7,
                     num_iterations=4, max_input_tokens=5_000_000, max_token_length=50, max_unique_chars=1000,
                     slack_ratio=0.05):
    """`{word: count}` -> list of tokens: `reserved_tokens`, the characters, then word pieces by count.

    The arguments and the result are those of tensorflow-text's
    `wordpiece_tokenizer_learner_lib.learn` with the `##` joiner (its
    default). The reserved tokens and every allowed character are always
    kept, so the result can be longer than `vocabulary_size`
    (`WordPieceTokenizer.learn` cuts it).

    Args:
        word_counts: dict, word (str) -> count (int >= 1).
        vocabulary_size: int, the target size; the search stops within
            `slack_ratio` below it.
        reserved_tokens: list of str, first in the result (special tokens).
        lower_thresh, upper_thresh: int, the bounds of the count-threshold search.
        num_iterations: int, rounds of splitting and counting per threshold.
        max_input_tokens: int, learn from at most this many most frequent words
            (-1 or None: all).
        max_token_length: int, longer words are left out.
        max_unique_chars: int, the alphabet: words with rarer characters are left out.
        slack_ratio: float, how far below `vocabulary_size` a result may stop.

    Example:

    >>> learn_vocabulary({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 20, ["[PAD]"], lower_thresh=1)
    ['[PAD]', 'd', 'e', 'i', 'l', 'n', 'o', 'r', 's', 't', 'w', 'newest', '##d', '##e', ..., '##w']
    """
    if lower_thresh < 1:
        raise ValueError(f"`lower_thresh` must be >= 1. Received: lower_thresh={lower_thresh!r}")
    items = list(word_counts.items())
    counts = [count for _, count in items]
    if not items or min(counts) < 1:
        raise ValueError("`word_counts` must map at least one word to a count >= 1. "
                         f"Received: {len(items)} words, smallest count {min(counts, default=None)}")
    upper, lower = min(max(counts), upper_thresh), max(min(counts), lower_thresh)
    reserved = set(reserved_tokens)
    words = [(w, c) for w, c in items if len(w) <= max_token_length and w not in reserved]
    words = _allowed_words(words, max_unique_chars, max_input_tokens)
    chars = {char for word, _ in words for char in word}
    words = [(w, c) for w, c in words if w]
    table = _SubstringTable([w for w, _ in words], [c for _, c in words]) if words else None

    while True:  # the binary search over the threshold, as tensorflow-text's learner does it
        thresh = (upper + lower) // 2
        tokens = table.learn(thresh, num_iterations, chars) if table else {}  # no word left: the reserved tokens
        vocabulary = _final_vocabulary(reserved_tokens, chars, tokens)
        size = len(vocabulary)
        if (size <= vocabulary_size and vocabulary_size - size <= max(0.0, slack_ratio * vocabulary_size)) \
                or lower >= upper or thresh <= 1:
            return vocabulary
        if size > vocabulary_size:
            lower = thresh + 1
        else:
            upper = thresh - 1


def _allowed_words(words, max_unique_chars, max_input_tokens):
    """The most frequent words (ties in input order) made only of the `max_unique_chars` most frequent characters."""
    char_counts = {}
    for word, count in words:
        for char in word:
            char_counts[char] = char_counts.get(char, 0) + count
    allowed = {char for char, _ in sorted(char_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:max_unique_chars]}
    kept = []
    for word, count in sorted(words, key=lambda wc: -wc[1]):
        if max_input_tokens not in (None, -1) and len(kept) >= max_input_tokens:
            break
        if all(char in allowed for char in word):
            kept.append((word, count))
    return kept


def _final_vocabulary(reserved_tokens, chars, token_counts):
    """Reserved tokens, sorted characters, then tokens by count (ties alphabetical), each once."""
    ordered = [*reserved_tokens, *sorted(chars),
               *(token for token, _ in sorted(token_counts.items(), key=lambda kv: (-kv[1], kv[0])))]
    return list(dict.fromkeys(ordered))


class _SubstringTable:
    """Every substring of every word, as ids of the strings the learner looks up.

    Rows are `(word, start, end)` in that order; the string of a row is
    `word[start:end]`, with the joiner in front when `start > 0`. A group is
    one `(word, start)`: its rows are contiguous, its last row is the suffix
    `word[start:]`. Tokens are suffixes, told apart by string and by joiner
    (a word may itself start with `##`).
    """

    def __init__(self, words, counts):
        ids, strings, row_string, row_end = {}, [], [], []
        group_first, group_word, group_joined, word_first_group = [], [], [], []
        for i, word in enumerate(words):
            word_first_group.append(len(group_first))
            for start in range(len(word)):
                group_first.append(len(row_string))
                group_word.append(i)
                group_joined.append(start > 0)
                prefix = JOINER if start else ""
                for end in range(start + 1, len(word) + 1):
                    key = prefix + word[start:end]
                    row_string.append(ids.setdefault(key, len(ids)))
                    if len(strings) < len(ids):
                        strings.append(key)
                    row_end.append(end)
        self.strings = strings
        self.string_ids = ids
        self.row_string = np.asarray(row_string, np.int64)
        self.row_end = np.asarray(row_end, np.int64)
        self.group_first = np.asarray(group_first, np.int64)
        self.group_word = np.asarray(group_word, np.int64)
        self.word_first_group = np.asarray(word_first_group, np.int64)
        self.word_length = np.asarray([len(w) for w in words], np.int64)
        self.word_count = np.asarray(counts, np.int64)
        last_row = np.append(self.group_first[1:], len(self.row_string)) - 1
        joined = np.asarray(group_joined, np.int64)
        self.token_keys, self.group_token = np.unique(self.row_string[last_row] * 2 + joined, return_inverse=True)
        self.round_zero = self._token_counts(np.arange(len(group_first)))  # every start: the same for all thresholds

    def _token_counts(self, groups):
        weights = self.word_count[self.group_word[groups]]
        return np.bincount(self.group_token[groups], weights=weights, minlength=len(self.token_keys)).astype(np.int64)

    def _piece_starts(self, member):
        """The groups where each word's longest-match pieces start; words that cannot be split are left out."""
        ends = np.maximum.reduceat(np.where(member[self.row_string], self.row_end, 0), self.group_first)
        position = np.zeros(len(self.word_length), np.int64)
        whole = np.ones(len(self.word_length), bool)
        starts, owners = [], []
        active = np.arange(len(self.word_length))  # every word is at least one character
        while active.size:
            group = self.word_first_group[active] + position[active]
            end = ends[group]
            whole[active[end == 0]] = False  # no piece starts here: the word is skipped this round
            ok = end > 0
            starts.append(group[ok])
            owners.append(active[ok])
            position[active[ok]] = end[ok]
            active = active[ok][end[ok] < self.word_length[active[ok]]]
        starts, owners = np.concatenate(starts), np.concatenate(owners)
        return starts[whole[owners]]

    def learn(self, thresh, num_iterations, chars):
        """`{token: count}` after `num_iterations` rounds at `thresh` (tensorflow-text's `learn_with_thresh`)."""
        tokens = _with_characters({}, chars)
        for round_ in range(num_iterations):
            if round_:
                member = np.zeros(len(self.strings), bool)
                member[[self.string_ids[t] for t in tokens if t in self.string_ids]] = True
                counts = self._token_counts(self._piece_starts(member))
            else:
                counts = self.round_zero
            passed = np.flatnonzero(counts >= thresh)
            keys = self.token_keys[passed]
            tokens = {}
            # A joined token (`##ab`, suffix `ab`) is shorter than a word spelled `##ab`: it comes later, it wins.
            for joined in (0, 1):
                pick = keys % 2 == joined
                tokens.update(zip((self.strings[s] for s in keys[pick] // 2), counts[passed[pick]].tolist()))
            tokens = _with_characters(tokens, chars)
        return tokens


def _with_characters(tokens, chars):
    """`tokens` with every character, alone and joined, counted 1 where missing."""
    for char in sorted(chars):
        tokens.setdefault(char, 1)
        tokens.setdefault(JOINER + char, 1)
    return tokens
