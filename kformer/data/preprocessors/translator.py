"""Translation: source (+ target) texts -> teacher-forcing inputs, batched by length buckets."""

import keras
import tensorflow as tf

from kformer.data.buckets import bucketed_dataset
from kformer.data.preprocessors.base import (Preprocessor, as_text_list, check_tokenizer, deserialize_tokenizer,
                                             is_text)
from kformer.data.wordpiece import END, MASK, START, join_pieces

# A number as it is copied: digits, with `.`, `,` or `:` between digit groups ("12", "3.5", "1,000", "12:30").
NUMBER = r"\d+(?:[.,:]\d+)*"
NUMBER_SLOT = MASK  # what a number becomes in the token sequences (a special token every vocabulary holds)


@keras.saving.register_keras_serializable(package="kformer")
class TranslatorPreprocessor(Preprocessor):
    """Source texts (+ target texts) -> teacher-forcing inputs for a `Translator`.

    `call(sources)` gives `{"encoder_token_ids"}`; `call(sources, targets)`
    gives `({"encoder_token_ids", "decoder_token_ids"}, labels)`, all int32
    `(batch, sequence_length)`, 0-padded: decoder inputs `[START] + target`,
    labels `target + [END]`. `dataset` batches by length buckets.

    With `copy_numbers`, every number (`NUMBER`: "12", "3.5", "12:30") on
    either side becomes one `[MASK]` slot before tokenizing, so the model
    learns where a number goes, not how to spell it; `detokenize(ids,
    sources)` fills the slots of each translation with its source's numbers,
    in order (a slot beyond the source's count is dropped), and `translate`
    generates exactly as many slots as the source holds (`generate`'s
    `slot_token_id`). Digits then come
    out exactly as given, however rare they were in training: the fix for
    numbers a word-piece model mangles or drops (issue 60).

    Args:
        source_tokenizer, target_tokenizer: `WordPieceTokenizer`s (the same
            one for a shared vocabulary); the target one holds `[START]`, `[END]`.
        sequence_length: int. Longest source / decoder sequence.
        copy_numbers: bool. Numbers as slots filled from the source (above).
            Defaults to `True`; a preprocessor saved before the option
            existed loads with `False`, as it was trained.

    Example:

    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["hola", "hello"])
    >>> x, labels = TranslatorPreprocessor(tokenizer, tokenizer, 4)(["hello"], ["hola"])
    >>> x["decoder_token_ids"].numpy().tolist(), labels.numpy().tolist()
    ([[5, 7, 0, 0]], [[7, 6, 0, 0]])
    """

    def __init__(self, source_tokenizer, target_tokenizer=None, sequence_length=40, copy_numbers=True, **kwargs):
        super().__init__(sequence_length, **kwargs)
        self.source_tokenizer = check_tokenizer(source_tokenizer, "source_tokenizer")
        self.target_tokenizer = check_tokenizer(target_tokenizer or source_tokenizer, "target_tokenizer")
        if not isinstance(copy_numbers, bool):
            raise ValueError(f"`copy_numbers` must be True or False. Received: copy_numbers={copy_numbers!r}")
        for name, tokenizer in (("source_tokenizer", self.source_tokenizer), ("target_tokenizer", self.target_tokenizer)):
            if copy_numbers and NUMBER_SLOT not in tokenizer.special_tokens:
                raise ValueError(f"`copy_numbers=True` needs {NUMBER_SLOT} among the {name}'s special tokens "
                                 f"(it marks a number). Received: special_tokens={list(tokenizer.special_tokens)}; "
                                 "pass `copy_numbers=False` or a tokenizer that holds it.")
        self.copy_numbers = copy_numbers
        if copy_numbers and all(t.vocabulary is not None for t in (self.source_tokenizer, self.target_tokenizer)):
            self._slot_id()  # checks the ids now; a loaded one gets its vocabularies later

    @property
    def number_slot_id(self):
        """The id of a number slot in both vocabularies with `copy_numbers`, else None (`generate`'s `slot_token_id`)."""
        return self._slot_id() if self.copy_numbers else None

    def _slot_id(self):
        """`NUMBER_SLOT`'s id, the same in both vocabularies, or a ValueError naming the two ids."""
        source, target = (t.token_to_id(NUMBER_SLOT) for t in (self.source_tokenizer, self.target_tokenizer))
        if source != target:
            raise ValueError(f"`copy_numbers=True` needs {NUMBER_SLOT} at the same id in both tokenizers (a source "
                             f"slot is counted to generate as many). Received: ids {source} and {target}; pass "
                             "`copy_numbers=False`.")
        return target

    @property
    def start_token_id(self):
        return self.target_tokenizer.token_to_id(START)

    @property
    def end_token_id(self):
        return self.target_tokenizer.token_to_id(END)

    def is_raw(self, x):
        return is_text(x)

    def prepare(self, texts):
        """tf.string texts -> the texts the tokenizers see: numbers as slots with `copy_numbers`."""
        if not self.copy_numbers:
            return texts
        return tf.strings.regex_replace(texts, NUMBER, f" {NUMBER_SLOT} ")

    def inputs(self, x):
        return {"encoder_token_ids": self.source_tokenizer(self.prepare(x), self.sequence_length)}

    def call(self, x, y=None, sample_weight=None):
        inputs = self.inputs(x)
        if y is None:
            return keras.utils.pack_x_y_sample_weight(inputs, None, sample_weight)
        target = self.target_tokenizer.tokenize(self.prepare(y))[:, : self.sequence_length - 1]
        decoder, labels = self.teacher_forcing(target)
        inputs["decoder_token_ids"] = decoder.to_tensor(0, shape=[None, self.sequence_length])
        return keras.utils.pack_x_y_sample_weight(
            inputs, labels.to_tensor(0, shape=[None, self.sequence_length]), sample_weight)

    def teacher_forcing(self, target):
        """Ragged target ids -> (`[START] + target`, `target + [END]`), ragged."""
        batch = target.nrows()
        start = tf.fill([batch, 1], self.start_token_id)
        end = tf.fill([batch, 1], self.end_token_id)
        return tf.concat([start, target], axis=1), tf.concat([target, end], axis=1)

    def detokenize(self, token_ids, sources=None):
        """Generated target ids `(batch, length)` -> list of str; `sources`: their source texts (numbers)."""
        return [t.decode("utf-8") for t in self.detokenize_tensor(token_ids, sources).numpy()]

    def detokenize_tensor(self, token_ids, sources=None):
        """`detokenize` in TensorFlow ops (the served graph): ids, tf.string sources -> tf.string `[batch]`.

        With `copy_numbers` and `sources`, the k-th `[MASK]` slot of a row
        becomes the k-th number of its source; without `sources` slots are dropped.
        """
        tokenizer = self.target_tokenizer
        if not self.copy_numbers or sources is None:
            return tokenizer.detokenize(token_ids)
        token_ids = tf.cast(token_ids, tf.int32)
        numbers = find_numbers(tf.convert_to_tensor(sources, tf.string))
        numbers = tf.concat([numbers.to_tensor(""), tf.fill([numbers.nrows(), 1], "")], axis=1)  # "" past the last
        slot = token_ids == self.number_slot_id
        rank = tf.cumsum(tf.cast(slot, tf.int32), axis=1, exclusive=True)  # the k-th slot of its row
        filled = tf.gather(numbers, tf.minimum(rank, tf.shape(numbers)[1] - 1), batch_dims=1)
        pieces = tf.where(tokenizer.is_special(token_ids), "", tokenizer.id_to_token(token_ids))
        return join_pieces(tf.where(slot, filled, pieces))

    def dataset(self, x, y=None, sample_weight=None, *, batch_size=32, shuffle=False, seed=0):
        if y is None or isinstance(x, tf.data.Dataset) or sample_weight is not None:
            return super().dataset(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, seed=seed)
        return bucketed_dataset(self, as_text_list(x), as_text_list(y), batch_size, shuffle, seed)

    def get_config(self):
        shared = self.target_tokenizer is self.source_tokenizer
        return {**super().get_config(),
                "source_tokenizer": keras.saving.serialize_keras_object(self.source_tokenizer),
                "target_tokenizer": None if shared else keras.saving.serialize_keras_object(self.target_tokenizer),
                "copy_numbers": self.copy_numbers}

    @classmethod
    def from_config(cls, config):
        target = config.get("target_tokenizer")
        config = {"copy_numbers": False, **config}  # saved before the option: trained without slots
        return cls(**{**config, "source_tokenizer": deserialize_tokenizer(config["source_tokenizer"]),
                      "target_tokenizer": None if target is None else deserialize_tokenizer(target)})


def find_numbers(texts):
    """tf.string `[batch]` -> tf.string RaggedTensor `[batch, (numbers)]`: each text's `NUMBER`s, in order.

    Args:
        texts: tf.string tensor `[batch]`.

    Example:

    >>> find_numbers(tf.constant(["At 12:30, 3.5 km and 2 dogs.", "none"])).to_list()
    [[b'12:30', b'3.5', b'2'], []]
    """
    texts = tf.strings.regex_replace(texts, "\x01", " ")  # the marker below
    parts = tf.strings.split(tf.strings.regex_replace(texts, f"({NUMBER})", "\x01\\1\x01"), "\x01")
    return tf.ragged.boolean_mask(parts, tf.strings.regex_full_match(parts, NUMBER))
