"""WordPiece subword tokenizer in core TensorFlow string ops.

The same `WordPieceTokenizer` tokenizes the tf.data training pipelines and
runs inside exported SavedModels. It uses only core TensorFlow ops (no
tensorflow-text custom ops), so a plain `tensorflow` process and the stock
TF Serving binary can run the exported graph. Vocabularies are learned with
keras-hub's `compute_word_piece_vocabulary`.

    tokenizer = WordPieceTokenizer.learn(texts, vocabulary_size=8000)
    ids = tokenizer(["A fine film."], sequence_length=16)  # int32 [1, 16]
    tokenizer.save("vocabulary.txt"); WordPieceTokenizer.load("vocabulary.txt")
"""

import collections
import pathlib
import weakref

import numpy as np
import tensorflow as tf

PAD, UNK, CLS, SEP, MASK, START, END = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[START]", "[END]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK, START, END)  # [PAD] = 0
# ASCII symbols and Unicode punctuation become words of their own (as in BERT).
PUNCTUATION = r"[!-/:-@\[-`{-~]|\p{P}"
MAX_CHARS_PER_WORD = 100
_ENCODERS = weakref.WeakKeyDictionary()  # tokenizer -> compiled `encode` functions (not tracked)


def normalize(texts):
    """Lower-case and put spaces around punctuation: tf.string [...] -> same shape.

    "[MASK]" (any case) stays one word, so fill-mask requests can use it.
    """
    texts = tf.strings.lower(texts, encoding="utf-8")
    texts = tf.strings.regex_replace(texts, r"[\p{Cc}\p{Cf}]", " ")  # control/format chars
    texts = tf.strings.regex_replace(texts, f"({PUNCTUATION})", r" \1 ")
    return tf.strings.regex_replace(texts, r"\[ mask \]", MASK)


class WordPieceTokenizer(tf.Module):
    """Greedy longest-match-first WordPiece (BERT's algorithm) over a fixed vocabulary.

    Args:
        vocabulary: list of tokens; continuation pieces start with `##`. Must
            hold every token of `SPECIAL_TOKENS`, with `[PAD]` at id 0.
    """

    def __init__(self, vocabulary, name="wordpiece_tokenizer"):
        super().__init__(name=name)
        vocabulary = list(vocabulary)
        if len(set(vocabulary)) != len(vocabulary):
            raise ValueError("`vocabulary` has duplicate tokens.")
        missing = [t for t in SPECIAL_TOKENS if t not in vocabulary]
        if missing or vocabulary[0] != PAD:
            raise ValueError(
                f"`vocabulary` must start with {PAD!r} and contain {list(SPECIAL_TOKENS)}. "
                f"Missing: {missing}; first token: {vocabulary[0] if vocabulary else None!r}"
            )
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

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    @classmethod
    def learn(cls, texts, vocabulary_size, special_tokens=SPECIAL_TOKENS, max_words=30000):
        """Learn a vocabulary of at most `vocabulary_size` tokens from `texts` (list of str).

        Uses tensorflow-text's WordPiece learner (the one behind keras-hub's
        `compute_word_piece_vocabulary`) on the `max_words` most frequent
        words, which keeps learning on 25k reviews to about a minute.
        """
        from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

        if not texts:
            raise ValueError("`texts` is empty: a vocabulary needs training text.")
        if vocabulary_size <= len(special_tokens):
            raise ValueError(
                f"`vocabulary_size` must exceed the {len(special_tokens)} special tokens. "
                f"Received: vocabulary_size={vocabulary_size}")
        counts = collections.Counter()
        for start in range(0, len(texts), 2000):
            words = tf.strings.split(normalize(tf.constant(texts[start:start + 2000])))
            counts.update(words.flat_values.numpy().tolist())
        counts = {word.decode("utf-8"): n for word, n in counts.most_common(max_words)}
        vocabulary = learner.learn(counts, vocabulary_size, list(special_tokens),
                                   max_input_tokens=max_words, lower_thresh=1)
        return cls(vocabulary[:vocabulary_size])

    def save(self, path):
        pathlib.Path(path).write_text("".join(t + "\n" for t in self.vocabulary), encoding="utf-8")

    @classmethod
    def load(cls, path):
        path = pathlib.Path(path)
        if not path.is_file():
            raise ValueError(f"Vocabulary file not found: {path} (expected one token per line).")
        return cls(path.read_text(encoding="utf-8").splitlines())

    def tokenize(self, texts):
        """tf.string [batch] -> int32 RaggedTensor [batch, (tokens)]."""
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank != 1:
            raise ValueError(f"`texts` must be a 1-D batch of strings. Received shape {texts.shape}")
        words = tf.strings.split(normalize(texts))
        pieces = self._word_pieces(words.flat_values)
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

    def __call__(self, texts, sequence_length, prefix=None, suffix=None):
        """tf.string [batch] -> int32 [batch, sequence_length], 0-padded and truncated.

        `prefix` / `suffix` are special tokens (e.g. "[CLS]", "[END]") added
        around each text; the suffix survives truncation.
        """
        tokens = self.tokenize(texts)
        budget = sequence_length - (prefix is not None) - (suffix is not None)
        if budget < 1:
            raise ValueError(f"`sequence_length` too short for the special tokens: {sequence_length}")
        tokens = tokens[:, :budget]
        batch = tokens.nrows()
        parts = [tokens]
        if prefix is not None:
            parts.insert(0, tf.fill([batch, 1], self.ids[prefix]))
        if suffix is not None:
            parts.append(tf.fill([batch, 1], self.ids[suffix]))
        tokens = tf.concat(parts, axis=1) if len(parts) > 1 else tokens
        return tokens.to_tensor(0, shape=[None, sequence_length])

    def encode(self, texts, sequence_length, prefix=None, suffix=None, chunk_size=2000):
        """list of str -> int32 numpy `(len(texts), sequence_length)`, tokenized in compiled chunks."""
        key = (sequence_length, prefix, suffix)
        compiled = _ENCODERS.setdefault(self, {})
        if key not in compiled:  # one trace per setting, reused across calls
            compiled[key] = tf.function(lambda t: self(t, sequence_length, prefix, suffix),
                                        input_signature=[tf.TensorSpec([None], tf.string)])
        fn = compiled[key]
        chunks = [fn(tf.constant(list(texts[i:i + chunk_size]), tf.string)).numpy()
                  for i in range(0, len(texts), chunk_size)]
        return np.concatenate(chunks) if chunks else np.zeros((0, sequence_length), np.int32)

    def detokenize(self, token_ids):
        """int [batch, length] -> tf.string [batch]: joins pieces, drops special tokens."""
        token_ids = tf.cast(token_ids, tf.int32)
        tokens = self._id_to_token.lookup(token_ids)
        keep = token_ids >= len(SPECIAL_TOKENS)
        tokens = tf.where(keep, tokens, "")
        text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
        text = tf.strings.regex_replace(text, r"(^| )##", "")
        text = tf.strings.regex_replace(text, r"\s+", " ")
        text = tf.strings.regex_replace(text, r" ([.,!?;:%)\]}])", r"\1")
        text = tf.strings.regex_replace(text, r"([¿¡(\[{]) ", r"\1")
        text = tf.strings.regex_replace(text, r"(\w) ' (\w)", r"\1'\2")
        return tf.strings.strip(text)
