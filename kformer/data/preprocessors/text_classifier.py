"""Text classification: texts -> padded, truncated token ids."""

import keras

from kformer.data.preprocessors.base import Preprocessor, check_tokenizer, deserialize_tokenizer
from kformer.data.wordpiece import check_truncation


@keras.saving.register_keras_serializable(package="kformer")
class TextClassifierPreprocessor(Preprocessor):
    """Texts -> `token_ids` int32 `(batch, sequence_length)`, 0-padded and truncated.

    Args:
        tokenizer: `WordPieceTokenizer`.
        sequence_length: int. Tokens per text, special tokens included.
        prefix, suffix: optional special tokens around each text (e.g. `"[CLS]"`).
        truncation: which tokens a long text keeps: `"head"` (the first,
            the default), `"tail"` (the last) or `"head_tail"` (the first
            quarter and the last three quarters of the budget).

    Example:

    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["a", "fine", "film"])
    >>> TextClassifierPreprocessor(tokenizer, sequence_length=5).encode(["A fine film"]).tolist()
    [[7, 8, 9, 0, 0]]
    >>> TextClassifierPreprocessor(tokenizer, 2, truncation="tail").encode(["A fine film"]).tolist()
    [[8, 9]]
    """

    def __init__(self, tokenizer, sequence_length, prefix=None, suffix=None, truncation="head", **kwargs):
        super().__init__(sequence_length, **kwargs)
        self.tokenizer = check_tokenizer(tokenizer, "tokenizer")
        self.prefix, self.suffix = prefix, suffix
        self.truncation = check_truncation(truncation)

    def inputs(self, x):
        return self.tokenizer(x, self.sequence_length, self.prefix, self.suffix, self.truncation)

    def get_config(self):
        return {**super().get_config(), "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                "prefix": self.prefix, "suffix": self.suffix, "truncation": self.truncation}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "tokenizer": deserialize_tokenizer(config["tokenizer"])})
