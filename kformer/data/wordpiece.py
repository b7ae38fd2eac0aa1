"""WordPiece subword tokenizer in core TensorFlow string ops, saved inside `.keras` files.

The same `WordPieceTokenizer` tokenizes the tf.data training pipelines, runs
inside the task preprocessors (`kformer.data.preprocessors`) and inside
exported SavedModels. It uses only core TensorFlow ops (no tensorflow-text
custom ops), so a plain `tensorflow` process and the stock TF Serving binary
run the exported graph. It is a Keras layer: a task's `.keras` file stores
its vocabulary as an asset (`vocabulary.txt`), as keras-hub tokenizers do.
Vocabularies are learned with tensorflow-text's WordPiece algorithm, run in
numpy (`kformer.data.wordpiece_learner`).
"""

import collections
import functools
import pathlib
import unicodedata
import weakref

import keras
import numpy as np
import tensorflow as tf

PAD, UNK, CLS, SEP, MASK, START, END = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[START]", "[END]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK, START, END)  # [PAD] = 0
# ASCII symbols and Unicode punctuation become words of their own (as in BERT).
PUNCTUATION = r"[!-/:-@\[-`{-~]|\p{P}"
MAX_CHARS_PER_WORD = 100
VOCABULARY_FILE = "vocabulary.txt"
_ENCODERS = weakref.WeakKeyDictionary()  # tokenizer -> compiled `encode` functions (not tracked)
BERT_SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # a published BERT vocabulary's (ids its own)
# "kformer": `normalize`. "bert_uncased" / "bert_cased": Hugging Face's BertNormalizer and
# BertPreTokenizer (`bert_normalize`), with and without lower-casing + accent stripping.
NORMALIZERS = ("kformer", "bert_uncased", "bert_cased")
# CJK ideographs get spaces around them (the ranges of Hugging Face tokenizers' `is_chinese_char`)
_CJK = (r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}"
        r"\x{2B920}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")


TRUNCATIONS = ("head", "tail", "head_tail")


def check_truncation(truncation):
    """Return `truncation` if it is one of `TRUNCATIONS`, else raise a `ValueError` naming it.

    Args:
        truncation: str.

    Example:

    >>> check_truncation("head_tail")
    'head_tail'
    """
    if truncation not in TRUNCATIONS:
        raise ValueError(f"`truncation` must be one of {TRUNCATIONS}. Received: truncation={truncation!r}")
    return truncation


def truncate(tokens, budget, truncation="head"):
    """Ragged `[batch, (tokens)]` -> at most `budget` tokens a row: the head, the tail, or both.

    Args:
        tokens: int RaggedTensor `[batch, (tokens)]`.
        budget: int >= 1, the most tokens a row keeps.
        truncation: `"head"` (the first `budget`), `"tail"` (the last) or
            `"head_tail"` (the first `budget // 4` and the last
            `budget - budget // 4`, Sun et al. 2019). Defaults to `"head"`.

    Example:

    >>> truncate(tf.ragged.constant([[1, 2, 3, 4, 5, 6, 7, 8], [1, 2]]), 4, "head_tail").to_list()
    [[1, 6, 7, 8], [1, 2]]
    """
    check_truncation(truncation)
    if truncation == "head":
        return tokens[:, :budget]
    lengths = tokens.row_lengths()
    positions = tf.ragged.range(lengths)
    head = 0 if truncation == "tail" else budget // 4
    tail_start = tf.expand_dims(lengths - (budget - head), 1)
    return tf.ragged.boolean_mask(tokens, (positions < head) | (positions >= tail_start))


def normalize(texts):
    """Lower-case, turn every space into " " and put spaces around punctuation: tf.string [...] -> same shape.

    "[MASK]" (any case) stays one word, so fill-mask requests can use it.

    Args:
        texts: tf.string tensor (any shape) or str.

    Example:

    >>> normalize("Great, [mask]!").numpy().decode().split()
    ['great', ',', '[MASK]', '!']
    """
    texts = tf.strings.lower(texts, encoding="utf-8")
    # control and format characters, and every Unicode space (no-break, thin, ideographic, line
    # separator): tf.strings.split splits on ASCII whitespace only
    texts = tf.strings.regex_replace(texts, r"[\p{Cc}\p{Cf}\p{Z}]", " ")
    texts = tf.strings.regex_replace(texts, f"({PUNCTUATION})", r" \1 ")
    return tf.strings.regex_replace(texts, r"\[ mask \]", MASK)


@functools.cache
def _uncased_map():
    """{char: lower(strip_accents(char))} for every code point it changes: BertNormalizer's NFD,
    dropping of nonspacing marks (Mn), then lower-casing, one character at a time."""
    table = {}
    # nothing past plane 2 decomposes or has a case, but plane 14's variation selectors are marks
    for code in (*range(0xD800), *range(0xE000, 0x30000), *range(0xE0000, 0xE1000)):
        char = chr(code)
        out = "".join(c for c in unicodedata.normalize("NFD", char) if unicodedata.category(c) != "Mn").lower()
        if out != char:
            table[char] = out
    return table


def uncased_table():
    """A `tf.lookup.StaticHashTable` of `_uncased_map` (absent characters give "\\x00").

    Example:

    >>> uncased_table().lookup(tf.constant(["É", "x"])).numpy().tolist()
    [b'e', b'\\x00']
    """
    table = _uncased_map()
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(list(table)), tf.constant(list(table.values()))), "\x00")


def bert_normalize(texts, lowercase=True, special_tokens=BERT_SPECIAL_TOKENS, char_table=None):
    """Hugging Face's BERT text normalization and pre-tokenization, words space-separated.

    In order: the special tokens written in the text (exact case) are kept whole; control,
    format, private-use characters, NUL and U+FFFD are removed; every Unicode space becomes
    " "; CJK ideographs get spaces around them; with `lowercase`, each character is NFD-decomposed,
    its nonspacing marks dropped and the rest lower-cased (`char_table`, a StaticHashTable made
    by `WordPieceTokenizer`); punctuation becomes words of its own.

    Args:
        texts: tf.string tensor (any shape) or str.
        lowercase: bool. Strip accents and lower-case (uncased checkpoints).
        special_tokens: tokens kept whole where written (at most 8).
        char_table: the lower-casing table (`uncased_table()`); made here when None.

    Example:

    >>> bert_normalize("Déjà [MASK] vu,中文!").numpy().decode().split()
    ['deja', '[MASK]', 'vu', ',', '中', '文', '!']
    >>> bert_normalize("Déjà [MASK]", lowercase=False).numpy().decode().split()
    ['Déjà', '[MASK]']
    """
    texts = tf.strings.regex_replace(texts, r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\p{Cf}\p{Co}\x{FFFD}]", "")
    texts = tf.strings.regex_replace(texts, r"[\t\n\r\p{Z}]", " ")
    for i, token in enumerate(special_tokens):  # placeholders \x01..\x08: none survives the line above
        texts = tf.strings.regex_replace(texts, _re_escape(token), f" {chr(1 + i)} ")
    texts = tf.strings.regex_replace(texts, f"({_CJK})", r" \1 ")
    if lowercase:
        char_table = uncased_table() if char_table is None else char_table
        chars = tf.strings.unicode_split(tf.reshape(texts, [-1]), "UTF-8")  # [texts, (chars)]
        flat = chars.flat_values
        mapped = char_table.lookup(flat)
        joined = tf.strings.reduce_join(chars.with_flat_values(tf.where(mapped == "\x00", flat, mapped)), axis=-1)
        texts = tf.reshape(joined, tf.shape(texts))
    texts = tf.strings.regex_replace(texts, f"({PUNCTUATION})", r" \1 ")
    for i, token in enumerate(special_tokens):
        texts = tf.strings.regex_replace(texts, chr(1 + i), token.replace("\\", "\\\\"))
    return texts


def _re_escape(token):
    return "".join(f"\\{c}" if c in "\\^$.|?*+()[]{}-" else c for c in token)


def count_words(texts, max_words=None, verbose=0):
    """The `max_words` most frequent words of `texts` after `normalize`, as `{word: count}`, most frequent first.

    Args:
        texts: list of str.
        max_words: int, or None for every word. Ties keep the order words were first seen in.
        verbose: 0, or 1 / 2 for a `keras.utils.Progbar` over the texts.

    Example:

    >>> count_words(["The cat, the hat.", "A cat"])
    {'the': 2, 'cat': 2, ',': 1, 'hat': 1, '.': 1, 'a': 1}
    """
    counts = collections.Counter()
    progress = keras.utils.Progbar(len(texts), verbose=verbose, unit_name="text") if verbose else None
    for start in range(0, len(texts), 2000):
        words = tf.strings.split(normalize(tf.constant(texts[start:start + 2000])))
        counts.update(words.flat_values.numpy().tolist())
        if progress:
            progress.update(min(start + 2000, len(texts)))
    return {word.decode("utf-8"): n for word, n in counts.most_common(max_words)}


@keras.saving.register_keras_serializable(package="kformer")
class WordPieceTokenizer(keras.layers.Layer):
    """Greedy longest-match-first WordPiece (BERT's algorithm) over a fixed vocabulary.

    Args:
        vocabulary: list of str, or None to set it later (`.keras` loading
            restores it from the `vocabulary.txt` asset). Continuation pieces
            start with `##`. Must hold every token of `special_tokens`, with
            `[PAD]` at id 0.
        special_tokens: the special tokens the vocabulary must hold, at any
            ids. Defaults to `SPECIAL_TOKENS`; a published BERT vocabulary
            uses `BERT_SPECIAL_TOKENS` (its own ids: [UNK] 100, [CLS] 101, ...).
        normalizer: `"kformer"` (`normalize`, the default), or `"bert_uncased"`
            / `"bert_cased"` (Hugging Face's BERT normalization, `bert_normalize`).
        **kwargs: Passed to `keras.layers.Layer` (`name`, ...).

    Call arguments:
        texts: tf.string `[batch]`.
        sequence_length: int. Output width: ids are truncated and 0-padded.
        prefix, suffix: optional special tokens (e.g. `"[CLS]"`, `"[END]"`)
            around each text; the suffix survives truncation.

    Returns:
        int32 `(batch, sequence_length)`.

    Example:

    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["a", "fine", "film", "##s", "."])
    >>> tokenizer.encode(["A fine films."], sequence_length=8).tolist()
    [[7, 8, 9, 10, 11, 0, 0, 0]]
    >>> tokenizer.detokenize([[7, 8, 9, 10, 11, 0]]).numpy()[0].decode()
    'a fine films.'
    """

    def __init__(self, vocabulary=None, special_tokens=None, normalizer="kformer", **kwargs):
        super().__init__(**kwargs)
        if normalizer not in NORMALIZERS:
            raise ValueError(f"`normalizer` must be one of {NORMALIZERS}. Received: normalizer={normalizer!r}")
        special_tokens = SPECIAL_TOKENS if special_tokens is None else tuple(special_tokens)
        if PAD not in special_tokens or not all(isinstance(t, str) and t for t in special_tokens):
            raise ValueError(f"`special_tokens` must be non-empty strings including {PAD!r}. "
                             f"Received: special_tokens={special_tokens!r}")
        if normalizer != "kformer" and len(special_tokens) > 8:
            raise ValueError(f"normalizer={normalizer!r} keeps at most 8 special tokens whole. "
                             f"Received: special_tokens={special_tokens!r}")
        self.special_tokens, self.normalizer = special_tokens, normalizer
        self._char_table = uncased_table() if normalizer == "bert_uncased" else None
        self.vocabulary = None
        self.built = True  # no weights
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)

    def set_vocabulary(self, vocabulary):
        """Check `vocabulary` (list of str) and build the lookup tables."""
        vocabulary = list(vocabulary)
        if not all(isinstance(t, str) and t and t == t.strip() for t in vocabulary):
            bad = next(t for t in vocabulary if not (isinstance(t, str) and t and t == t.strip()))
            raise ValueError(f"`vocabulary` tokens must be non-empty strings without surrounding "
                             f"whitespace. Received: token {bad!r}")
        if len(set(vocabulary)) != len(vocabulary):
            duplicate = next(t for t, n in collections.Counter(vocabulary).items() if n > 1)
            raise ValueError(f"`vocabulary` has duplicate tokens. Received: {duplicate!r} twice or more")
        missing = [t for t in self.special_tokens if t not in vocabulary]
        if missing or vocabulary[0] != PAD:
            raise ValueError(
                f"`vocabulary` must start with {PAD!r} and contain {list(self.special_tokens)}. "
                f"Missing: {missing}; first token: {vocabulary[0] if vocabulary else None!r}")
        self.vocabulary = vocabulary
        self.ids = {token: i for i, token in enumerate(vocabulary)}
        pieces = [t[2:] if t.startswith("##") else t for t in vocabulary]
        self._max_piece_chars = max(len(p) for p in pieces)
        self._token_to_id = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(vocabulary), tf.range(len(vocabulary), dtype=tf.int32)), -1)
        self._id_to_token = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.range(len(vocabulary), dtype=tf.int32), tf.constant(vocabulary)), UNK)
        _ENCODERS.pop(self, None)

    @property
    def vocabulary_size(self):
        self._check_vocabulary()
        return len(self.vocabulary)

    def _check_vocabulary(self):
        if self.vocabulary is None:
            raise ValueError("This tokenizer has no vocabulary yet: call `set_vocabulary(...)`, "
                             "`WordPieceTokenizer.learn(...)` or `WordPieceTokenizer.load(path)`.")

    def token_to_id(self, token):
        """The id of `token` (str); a ValueError names a token not in the vocabulary."""
        self._check_vocabulary()
        if token not in self.ids:
            raise ValueError(f"`token` is not in the vocabulary. Received: token={token!r}")
        return self.ids[token]

    def id_to_token(self, token_ids):
        """int tensor `[...]` -> tf.string tensor `[...]` (`[UNK]` for ids outside the vocabulary)."""
        return self._id_to_token.lookup(tf.cast(token_ids, tf.int32))

    @classmethod
    def learn(cls, texts, vocabulary_size, special_tokens=SPECIAL_TOKENS, max_words=30000, verbose=0):
        """Learn a vocabulary of at most `vocabulary_size` tokens from `texts` (list of str).

        Learns on the `max_words` most frequent words with tensorflow-text's
        WordPiece algorithm (the one behind keras-hub's
        `compute_word_piece_vocabulary`), computed in numpy by
        `kformer.data.wordpiece_learner`: the same vocabulary, about a second
        for 30,000 words. `verbose=1` or `2` shows a `keras.utils.Progbar` over
        the word count, then says when the learner starts.
        """
        from kformer.data.wordpiece_learner import learn_vocabulary

        if not texts:
            raise ValueError("`texts` is empty: a vocabulary needs training text.")
        if not isinstance(vocabulary_size, int) or vocabulary_size <= len(special_tokens):
            raise ValueError(
                f"`vocabulary_size` must be an int above the {len(special_tokens)} special tokens. "
                f"Received: vocabulary_size={vocabulary_size!r}")
        counts = count_words(texts, max_words, verbose)
        if verbose:
            print(f"learning {vocabulary_size} word pieces from the {len(counts)} most frequent words", flush=True)
        vocabulary = learn_vocabulary(counts, vocabulary_size, list(special_tokens), max_input_tokens=max_words,
                                      lower_thresh=1)
        return cls(vocabulary[:vocabulary_size], special_tokens=special_tokens)

    def save(self, path):
        """Write the vocabulary to `path`, one token a line (UTF-8)."""
        self._check_vocabulary()
        pathlib.Path(path).write_text("".join(t + "\n" for t in self.vocabulary), encoding="utf-8")

    @classmethod
    def load(cls, path, **kwargs):
        """A tokenizer from a vocabulary file written by `save` (`kwargs`: the constructor's)."""
        path = pathlib.Path(path)
        if not path.is_file():
            raise ValueError(f"Vocabulary file not found: {path} (expected one token per line).")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise ValueError(f"Vocabulary file {path} is not UTF-8 text ({err}).") from err
        blank = [i + 1 for i, line in enumerate(lines) if not line.strip()]
        if blank:
            raise ValueError(f"Vocabulary file {path} has blank lines (line {blank[0]}); expected "
                             "one token per line.")
        return cls(lines, **kwargs)

    def save_assets(self, dir_path):
        self.save(pathlib.Path(dir_path) / VOCABULARY_FILE)

    def load_assets(self, dir_path):
        self.set_vocabulary(type(self).load(pathlib.Path(dir_path) / VOCABULARY_FILE,
                                            special_tokens=self.special_tokens).vocabulary)

    def get_config(self):
        return {**super().get_config(), "vocabulary": None,  # saved as an asset
                "special_tokens": list(self.special_tokens), "normalizer": self.normalizer}

    def tokenize(self, texts):
        """tf.string [batch] -> int32 RaggedTensor [batch, (tokens)]."""
        self._check_vocabulary()
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank != 1:
            raise ValueError(f"`texts` must be a 1-D batch of strings. Received shape {texts.shape}")
        if self.normalizer == "kformer":
            words = tf.strings.split(normalize(texts))
        else:
            words = tf.strings.split(bert_normalize(texts, self.normalizer == "bert_uncased", self.special_tokens,
                                                    self._char_table))
        distinct, index = tf.unique(words.flat_values)  # each distinct word is split once
        pieces = tf.gather(self._word_pieces(distinct), index)
        return words.with_flat_values(pieces).merge_dims(1, 2)

    def _word_pieces(self, words):
        """tf.string [words] -> int32 RaggedTensor [words, (pieces)]."""
        chars = tf.strings.length(words, unit="UTF8_CHAR")
        lengths = tf.range(self._max_piece_chars, 0, -1)  # longest match first
        num_words = tf.shape(words)[0]
        grid = lambda x: tf.broadcast_to(x, [num_words, self._max_piece_chars])  # noqa: E731

        def step(start, failed):
            active = (start < chars) & ~failed
            pieces = tf.strings.substr(grid(words[:, None]), grid(start[:, None]),
                                       grid(lengths[None, :]), unit="UTF8_CHAR")
            pieces = tf.where(grid(start[:, None] > 0), "##" + pieces, pieces)
            ids = self._token_to_id.lookup(pieces)
            found = (ids >= 0) & (start[:, None] + lengths[None, :] <= chars[:, None])
            best = tf.argmax(tf.cast(found, tf.int32), axis=1, output_type=tf.int32)
            emit = active & tf.reduce_any(found, axis=1)
            token = tf.where(emit, tf.gather(ids, best, batch_dims=1), -1)
            start = tf.where(emit, start + tf.gather(lengths, best), start)
            return start, failed | (active & ~emit), token

        failed = chars > MAX_CHARS_PER_WORD
        start, failed, token = step(tf.zeros_like(chars), failed)
        tokens = tf.TensorArray(tf.int32, size=0, dynamic_size=True).write(0, token)

        def body(i, start, failed, tokens):
            start, failed, token = step(start, failed)
            return i + 1, start, failed, tokens.write(i, token)

        _, _, failed, tokens = tf.while_loop(
            lambda i, start, failed, tokens: tf.reduce_any((start < chars) & ~failed),
            body, [1, start, failed, tokens])
        ids = tf.transpose(tokens.stack())  # [words, steps], -1 after the last piece
        unk_row = tf.concat([[self.ids[UNK]], -tf.ones([tf.shape(ids)[1] - 1], tf.int32)], 0)
        ids = tf.where(failed[:, None], unk_row[None, :], ids)  # an unsplittable word is one [UNK]
        return tf.RaggedTensor.from_tensor(ids, padding=-1)

    def __call__(self, texts, sequence_length, prefix=None, suffix=None, truncation="head"):
        # A string op, not a Keras computation: bypass Layer.__call__ (backend conversion, masks).
        return self.call(texts, sequence_length, prefix, suffix, truncation)

    def call(self, texts, sequence_length, prefix=None, suffix=None, truncation="head"):
        """tf.string `[batch]` -> int32 `[batch, sequence_length]`, 0-padded.

        A text longer than the budget (`sequence_length` minus the special
        tokens) keeps its first tokens (`truncation="head"`), its last
        (`"tail"`), or its first quarter and last three quarters of the
        budget (`"head_tail"`, Sun et al. 2019, "How to Fine-Tune BERT for
        Text Classification?").
        """
        budget = sequence_length - (prefix is not None) - (suffix is not None)
        if budget < 1:
            raise ValueError("`sequence_length` is too short for the special tokens. Received: "
                             f"sequence_length={sequence_length}, prefix={prefix!r}, suffix={suffix!r}")
        tokens = truncate(self.tokenize(texts), budget, truncation)
        batch = tokens.nrows()
        parts = [tokens]
        if prefix is not None:
            parts.insert(0, tf.fill([batch, 1], self.token_to_id(prefix)))
        if suffix is not None:
            parts.append(tf.fill([batch, 1], self.token_to_id(suffix)))
        tokens = tf.concat(parts, axis=1) if len(parts) > 1 else tokens
        return tokens.to_tensor(0, shape=[None, sequence_length])

    def encode(self, texts, sequence_length, prefix=None, suffix=None, chunk_size=2000, truncation="head"):
        """list of str -> int32 numpy `(len(texts), sequence_length)`, tokenized in compiled chunks."""
        key = (sequence_length, prefix, suffix, truncation)
        compiled = _ENCODERS.setdefault(self, {})
        if key not in compiled:  # one trace per setting, reused across calls
            compiled[key] = tf.function(lambda t: self(t, sequence_length, prefix, suffix, truncation),
                                        input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
        fn = compiled[key]
        texts = list(texts)
        chunks = [fn(tf.constant(texts[i:i + chunk_size], tf.string)).numpy()
                  for i in range(0, len(texts), chunk_size)]
        return np.concatenate(chunks) if chunks else np.zeros((0, sequence_length), np.int32)

    def detokenize(self, token_ids):
        """int [batch, length] -> tf.string [batch]: joins pieces, drops special tokens."""
        token_ids = tf.cast(token_ids, tf.int32)
        return join_pieces(tf.where(self.is_special(token_ids), "", self.id_to_token(token_ids)))

    def is_special(self, token_ids):
        """int32 ids -> bool, same shape: which are special tokens (`[PAD]`, `[START]`, ...)."""
        if self.special_tokens == SPECIAL_TOKENS:
            return token_ids < len(SPECIAL_TOKENS)
        special = tf.constant([self.ids[t] for t in self.special_tokens], tf.int32)
        return tf.reduce_any(token_ids[..., None] == special, axis=-1)


def join_pieces(tokens):
    """tf.string `[batch, length]` word pieces (`""` for none) -> tf.string `[batch]` text.

    Pieces join into words (`##` continues the word before), words with single
    spaces, and punctuation goes back against its word.

    Args:
        tokens: tf.string tensor `[batch, length]`.

    Example:

    >>> join_pieces(tf.constant([["the", "film", "##s", "", "!"]])).numpy().tolist()
    [b'the films!']
    """
    text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    text = tf.strings.regex_replace(text, r"(^| )##", "")
    text = tf.strings.regex_replace(text, r"\s+", " ")
    text = tf.strings.regex_replace(text, r" ([.,!?;:%)\]}])", r"\1")
    text = tf.strings.regex_replace(text, r"([¿¡(\[{]) ", r"\1")
    text = tf.strings.regex_replace(text, r"(\w) ' (\w)", r"\1'\2")
    return tf.strings.strip(text)
