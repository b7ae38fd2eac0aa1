"""BERT inputs: texts -> `[CLS] text [SEP]` token ids, segment ids, padding mask (and `[MASK]` positions)."""

import keras
import tensorflow as tf

from kformer.data.preprocessors.text_classifier import TextClassifierPreprocessor
from kformer.data.wordpiece import CLS, MASK, SEP


def bert_inputs(token_ids, segment_ids=None):
    """The BERT input dict from packed ids `(batch, seq)`: padding mask = id != 0.

    Args:
        token_ids: int `(batch, seq)`, 0 = padding.
        segment_ids: int `(batch, seq)`, or None for all zeros.

    Example:

    >>> inputs = bert_inputs([[2, 9, 3, 0]])
    >>> inputs["padding_mask"].numpy().tolist(), inputs["segment_ids"].numpy().tolist()
    ([[True, True, True, False]], [[0, 0, 0, 0]])
    """
    token_ids = tf.cast(token_ids, tf.int32)
    segment_ids = tf.zeros_like(token_ids) if segment_ids is None else tf.cast(segment_ids, tf.int32)
    return {"token_ids": token_ids, "segment_ids": segment_ids,
            "padding_mask": tf.not_equal(token_ids, 0)}


@keras.saving.register_keras_serializable(package="kformer")
class BertPreprocessor(TextClassifierPreprocessor):
    """Texts -> `[CLS] text [SEP]` as `{"token_ids", "segment_ids", "padding_mask"}` `(batch, seq)`.

    With `mask_positions=True` (fill-mask), also `mask_positions` int32
    `(batch, m)`: the positions of the `[MASK]` tokens of each text, 0-padded
    (position 0 is `[CLS]`, never a mask), `m` the most masks in the batch (>= 1).

    Args:
        tokenizer: `WordPieceTokenizer` holding `[CLS]`, `[SEP]`, `[MASK]`.
        sequence_length: int. Tokens per text, `[CLS]` and `[SEP]` included.
        mask_positions: bool. Defaults to `False`.

    Example:

    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["good"])
    >>> inputs = BertPreprocessor(tokenizer, 6, mask_positions=True).encode(["good [MASK]"])
    >>> inputs["token_ids"].tolist(), inputs["mask_positions"].tolist()
    ([[2, 7, 4, 3, 0, 0]], [[2]])
    """

    def __init__(self, tokenizer, sequence_length, mask_positions=False, **kwargs):
        kwargs.pop("prefix", None), kwargs.pop("suffix", None)
        super().__init__(tokenizer, sequence_length, prefix=CLS, suffix=SEP, **kwargs)
        self.mask_positions = mask_positions

    def inputs(self, x):
        inputs = bert_inputs(super().inputs(x))
        if self.mask_positions:
            inputs["mask_positions"] = self.find_masks(inputs["token_ids"])
        return inputs

    def find_masks(self, token_ids):
        """int32 `(batch, seq)` -> positions of `[MASK]` `(batch, max(1, most masks))`, 0-padded."""
        is_mask = tf.equal(token_ids, self.tokenizer.token_to_id(MASK))
        positions = tf.ragged.boolean_mask(
            tf.broadcast_to(tf.range(tf.shape(is_mask)[1]), tf.shape(is_mask)), is_mask)
        dense = positions.to_tensor(0)  # (batch, most masks in a row), width >= 1 below
        return tf.pad(dense, [[0, 0], [0, tf.maximum(1 - tf.shape(dense)[1], 0)]])

    def get_config(self):
        config = super().get_config()
        del config["prefix"], config["suffix"]
        return {**config, "mask_positions": self.mask_positions}
