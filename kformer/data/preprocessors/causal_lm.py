"""Causal language modelling: texts -> next-token windows packed without padding; prompts for `generate`."""

import keras
import tensorflow as tf

from kformer.data.lm import packed_dataset
from kformer.data.preprocessors.base import as_strings, as_text_list
from kformer.data.preprocessors.text_classifier import TextClassifierPreprocessor
from kformer.data.wordpiece import END, START


@keras.saving.register_keras_serializable(package="kformer")
class CausalLMPreprocessor(TextClassifierPreprocessor):
    """Texts -> next-token training data for a `CausalLM`; prompts for `generate`.

    `call(texts)` packs `[START] text [END]` into `sequence_length + 1`
    tokens and returns `(token_ids, labels, sample_weight)`, each
    `(batch, sequence_length)`: the labels are the ids shifted by one, the
    weights 0 on padding. `dataset` concatenates the texts (each
    `[START] ... [END]`) and cuts windows of `sequence_length + 1` tokens:
    no padding, as GPT-2 trains. `prompt_ids` gives `[START] prompt`,
    right-padded, for generation.

    Args:
        tokenizer: `WordPieceTokenizer` holding `[START]` and `[END]`.
        sequence_length: int. Tokens a training window feeds the model.

    Example:

    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["the", "movie", "was"])
    >>> ids, labels, weights = CausalLMPreprocessor(tokenizer, 4)(["The movie"])
    >>> ids.numpy().tolist(), labels.numpy().tolist(), weights.numpy().tolist()
    ([[5, 7, 8, 6]], [[7, 8, 6, 0]], [[1.0, 1.0, 1.0, 0.0]])
    """

    def __init__(self, tokenizer, sequence_length, **kwargs):
        kwargs.pop("prefix", None), kwargs.pop("suffix", None)
        super().__init__(tokenizer, sequence_length, prefix=START, suffix=END, **kwargs)

    @property
    def end_token_id(self):
        return self.tokenizer.token_to_id(END)

    def inputs(self, x):
        return self.tokenizer(x, self.sequence_length + 1, START, END)[:, :-1]

    def call(self, x, y=None, sample_weight=None):
        if y is not None:
            raise ValueError("A causal LM learns from the texts themselves: pass `x` only. "
                             f"Received: y of type {type(y).__name__}")
        packed = self.tokenizer(x, self.sequence_length + 1, START, END)
        labels = packed[:, 1:]
        weights = tf.cast(tf.not_equal(labels, 0), tf.float32)
        if sample_weight is not None:
            weights = weights * tf.cast(sample_weight, tf.float32)[:, None]
        return packed[:, :-1], labels, weights

    def prompt_ids(self, prompts, max_tokens=None):
        """Prompts -> int32 numpy `(batch, longest)`: `[START] prompt`, right-padded with 0.

        At most `max_tokens` (default `sequence_length`) tokens per row.
        """
        return self.prompt_tensor(as_strings(prompts, "prompts"), max_tokens).numpy()

    def prompt_tensor(self, prompts, max_tokens=None):
        """String tensor `(batch,)` -> int32 `(batch, longest)` `[START] prompt`, right-padded (graph-safe).

        At most `max_tokens` (default `sequence_length`) tokens per row: a
        longer prompt keeps its beginning.
        """
        keep = (max_tokens or self.sequence_length) - 1
        ragged = self.tokenizer.tokenize(prompts)[:, :keep]
        start = tf.fill([ragged.nrows(), 1], self.tokenizer.token_to_id(START))
        return tf.concat([start, tf.cast(ragged, tf.int32)], axis=1).to_tensor(0)

    def detokenize(self, token_ids):
        """Generated ids `(batch, length)` -> list of str (special tokens dropped)."""
        return [t.decode("utf-8") for t in self.tokenizer.detokenize(token_ids).numpy()]

    def dataset(self, x, y=None, sample_weight=None, *, batch_size=32, shuffle=False, seed=0):
        if isinstance(x, tf.data.Dataset) or sample_weight is not None or y is not None:
            return super().dataset(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, seed=seed)
        return packed_dataset(self, as_text_list(x), batch_size, shuffle, seed)

    def get_config(self):
        config = super().get_config()
        del config["prefix"], config["suffix"]
        return config
