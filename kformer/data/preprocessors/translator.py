"""Translation: source (+ target) texts -> teacher-forcing inputs, batched by length buckets."""

import keras
import tensorflow as tf

from kformer.data.buckets import bucketed_dataset
from kformer.data.preprocessors.base import (Preprocessor, as_text_list, check_tokenizer, deserialize_tokenizer,
                                             is_text)
from kformer.data.wordpiece import END, START


@keras.saving.register_keras_serializable(package="kformer")
class TranslatorPreprocessor(Preprocessor):
    """Source texts (+ target texts) -> teacher-forcing inputs for a `Translator`.

    `call(sources)` gives `{"encoder_token_ids"}`; `call(sources, targets)`
    gives `({"encoder_token_ids", "decoder_token_ids"}, labels)`, all int32
    `(batch, sequence_length)`, 0-padded: decoder inputs `[START] + target`,
    labels `target + [END]`. `dataset` batches by length buckets.

    Args:
        source_tokenizer, target_tokenizer: `WordPieceTokenizer`s (the same
            one for a shared vocabulary); the target one holds `[START]`, `[END]`.
        sequence_length: int. Longest source / decoder sequence.

    Example:

    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["hola", "hello"])
    >>> x, labels = TranslatorPreprocessor(tokenizer, tokenizer, 4)(["hello"], ["hola"])
    >>> x["decoder_token_ids"].numpy().tolist(), labels.numpy().tolist()
    ([[5, 7, 0, 0]], [[7, 6, 0, 0]])
    """

    def __init__(self, source_tokenizer, target_tokenizer=None, sequence_length=40, **kwargs):
        super().__init__(sequence_length, **kwargs)
        self.source_tokenizer = check_tokenizer(source_tokenizer, "source_tokenizer")
        self.target_tokenizer = check_tokenizer(target_tokenizer or source_tokenizer, "target_tokenizer")

    @property
    def start_token_id(self):
        return self.target_tokenizer.token_to_id(START)

    @property
    def end_token_id(self):
        return self.target_tokenizer.token_to_id(END)

    def is_raw(self, x):
        return is_text(x)

    def inputs(self, x):
        return {"encoder_token_ids": self.source_tokenizer(x, self.sequence_length)}

    def call(self, x, y=None, sample_weight=None):
        inputs = self.inputs(x)
        if y is None:
            return keras.utils.pack_x_y_sample_weight(inputs, None, sample_weight)
        target = self.target_tokenizer.tokenize(y)[:, : self.sequence_length - 1]
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

    def detokenize(self, token_ids):
        """Generated target ids `(batch, length)` -> list of str."""
        return [t.decode("utf-8") for t in self.target_tokenizer.detokenize(token_ids).numpy()]

    def dataset(self, x, y=None, sample_weight=None, *, batch_size=32, shuffle=False, seed=0):
        if y is None or isinstance(x, tf.data.Dataset) or sample_weight is not None:
            return super().dataset(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, seed=seed)
        return bucketed_dataset(self, as_text_list(x), as_text_list(y), batch_size, shuffle, seed)

    def get_config(self):
        shared = self.target_tokenizer is self.source_tokenizer
        return {**super().get_config(),
                "source_tokenizer": keras.saving.serialize_keras_object(self.source_tokenizer),
                "target_tokenizer": None if shared else keras.saving.serialize_keras_object(self.target_tokenizer)}

    @classmethod
    def from_config(cls, config):
        target = config.get("target_tokenizer")
        return cls(**{**config, "source_tokenizer": deserialize_tokenizer(config["source_tokenizer"]),
                      "target_tokenizer": None if target is None else deserialize_tokenizer(target)})
