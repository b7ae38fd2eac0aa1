"""GPT-2 byte-level BPE (`vocab.json` + `merges.txt`) as a `CausalLM` preprocessor.

Tokenizes with keras-hub's `GPT2Tokenizer`, always on its TensorFlow path
(`tf.function`, tf.data and eager calls alike): that path gave the ids of
transformers' `GPT2TokenizerFast` on every text checked (tests/models/test_pretrained_gpt2.py),
while keras-hub's eager pure-Python path splits `" 'thing"` as `" ", "'t", "hing"`.

    from kformer.models.pretrained import from_pretrained
    lm = from_pretrained("checkpoint_folder")          # attaches GPT2CausalLMPreprocessor
    lm.generate("The movie was", max_length=20)

GPT-2 has no padding token; kformer pads with id 0, which is GPT-2's `"!"`.
`generate` treats 0 as padding and never produces it, so `prompt_ids` refuses a
prompt holding id 0, and `detokenize` drops every 0.
"""

import json
import pathlib

import keras
import keras_hub
import numpy as np
import tensorflow as tf

from kformer.data.lm import pack, windows_dataset
from kformer.data.preprocessors import Preprocessor, as_strings

END_TOKEN = "<|endoftext|>"
NUL_MESSAGE = ("A text holds a NUL character (\\x00): keras-hub's byte-pair tokenizer drops it and everything "
               "after it. Remove it.")


def _check_files(vocabulary, merges):
    """vocab.json must be a JSON object of token -> int id and merges.txt UTF-8 text; a ValueError naming
    the file otherwise (keras-hub raised bare JSON and codec errors)."""
    try:
        table = json.loads(vocabulary.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise ValueError(f"{vocabulary} is not valid JSON: {err}") from None
    if not isinstance(table, dict) or not all(isinstance(i, int) and not isinstance(i, bool) for i in table.values()):
        raise ValueError(f"{vocabulary} must map each token to an int id. Received: a {type(table).__name__}"
                         f"{'' if not isinstance(table, dict) else ' with values that are not ints'}")
    try:
        merges.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{merges} is not UTF-8 text: {err}") from None


def gpt2_tokenizer(folder=None, vocabulary=None, merges=None):
    """keras-hub's `GPT2Tokenizer` from `folder/vocab.json` + `folder/merges.txt` (or the two paths),
    set to run on its TensorFlow path even eagerly (the one that matches transformers' ids).

    Args:
        folder: a folder holding `vocab.json` and `merges.txt`.
        vocabulary, merges: the files (or a dict / list), instead of `folder`.

    Returns:
        `keras_hub.tokenizers.GPT2Tokenizer`.

    Example:

    >>> vocabulary = {"!": 0, "a": 1, "Ġ": 2, "b": 3, "Ġb": 4, "<|endoftext|>": 5}
    >>> tokenizer = gpt2_tokenizer(vocabulary=vocabulary, merges=["Ġ b"])
    >>> GPT2CausalLMPreprocessor(tokenizer, sequence_length=4).prompt_ids(["a b", "b"]).tolist()
    [[1, 4], [3, 0]]
    """
    if folder is not None:
        folder = pathlib.Path(folder)
        vocabulary, merges = folder / "vocab.json", folder / "merges.txt"
        for path in (vocabulary, merges):
            if not path.is_file():
                raise ValueError(f"{folder} holds no {path.name}: a GPT-2 tokenizer needs vocab.json and merges.txt.")
        _check_files(vocabulary, merges)
        vocabulary, merges = str(vocabulary), str(merges)
    if vocabulary is None or merges is None:
        raise ValueError("Pass `folder`, or both `vocabulary` and `merges`.")
    try:
        tokenizer = keras_hub.tokenizers.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)
    except ValueError as err:  # keras-hub names neither file
        where = f"{vocabulary} and {merges}" if isinstance(vocabulary, str) else "`vocabulary` and `merges`"
        raise ValueError(f"{where} do not make a GPT-2 tokenizer: {err}") from None
    tokenizer._allow_python_workflow = False  # noqa: SLF001 (the TensorFlow path everywhere)
    return tokenizer


class TokenizerView:
    """What kformer's tasks read of `preprocessor.tokenizer`: `vocabulary` (None while a `.keras`
    file loads), the int `vocabulary_size`, `token_to_id`, and `tokenize` (texts -> a
    `tf.RaggedTensor` of ids on every backend) and `detokenize` (ids -> texts) of the preprocessor.

    Args:
        preprocessor: `GPT2CausalLMPreprocessor`.

    Example:

    >>> vocabulary = {"!": 0, "a": 1, "Ġ": 2, "b": 3, "Ġb": 4, "<|endoftext|>": 5}
    >>> preprocessor = GPT2CausalLMPreprocessor(gpt2_tokenizer(vocabulary=vocabulary, merges=["Ġ b"]), 4)
    >>> view = preprocessor.tokenizer
    >>> view.vocabulary_size, view.tokenize(["a b"]).to_list(), view.detokenize([[1, 4, 0]])
    (6, [[1, 4]], ['a b'])
    """

    def __init__(self, preprocessor):
        self.preprocessor = preprocessor
        self.tokenizer = preprocessor.byte_pair_tokenizer

    @property
    def vocabulary(self):
        return self.tokenizer.vocabulary

    @property
    def vocabulary_size(self):
        return None if self.vocabulary is None else len(self.vocabulary)

    def token_to_id(self, token):
        return self.tokenizer.token_to_id(token)

    def tokenize(self, texts):
        return self.preprocessor.tokenize(texts)

    def detokenize(self, ids):
        return self.preprocessor.detokenize(ids)


@keras.saving.register_keras_serializable(package="kformer")
class GPT2CausalLMPreprocessor(Preprocessor):
    """Texts -> GPT-2 token ids for a `CausalLM` (training data, `predict` inputs, prompts).

    No start token is added (as transformers' GPT-2 tokenizer); each text ends
    with `<|endoftext|>`. `call(texts)` packs `text <|endoftext|>` into
    `sequence_length + 1` tokens and returns `(token_ids, labels, sample_weight)`,
    each `(batch, sequence_length)`, the weights 0 past each text (computed from
    lengths: id 0 is a real token, `"!"`). `dataset` concatenates the texts and
    cuts windows of `sequence_length + 1` tokens. `prompt_ids` gives the
    prompt's tokens, right-padded with 0.

    Args:
        tokenizer: `keras_hub.tokenizers.GPT2Tokenizer` (see `gpt2_tokenizer`).
        sequence_length: int. Tokens a training window feeds the model.
        end_token_id: int or None. Defaults to the id of `<|endoftext|>`.
        **kwargs: Passed to `keras.layers.Layer`.

    Example:

    >>> vocabulary = {"!": 0, "a": 1, "Ġ": 2, "b": 3, "Ġb": 4, "<|endoftext|>": 5}
    >>> preprocessor = GPT2CausalLMPreprocessor(gpt2_tokenizer(vocabulary=vocabulary, merges=["Ġ b"]), 4)
    >>> ids, labels, weights = preprocessor(["a b"])  # `a b <|endoftext|>`, then padding
    >>> ids.numpy().tolist(), labels.numpy().tolist(), weights.numpy().tolist()
    ([[1, 4, 5, 0]], [[4, 5, 0, 0]], [[1.0, 1.0, 0.0, 0.0]])
    """

    def __init__(self, tokenizer, sequence_length, end_token_id=None, **kwargs):
        super().__init__(sequence_length, **kwargs)
        if not isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
            raise ValueError("`tokenizer` must be a keras-hub GPT2Tokenizer (kformer.data.bpe.gpt2_tokenizer). "
                             f"Received: {type(tokenizer).__name__}")
        tokenizer._allow_python_workflow = False  # noqa: SLF001 (also after a reload)
        self.byte_pair_tokenizer = tokenizer
        self._end_token_id = end_token_id
        self._tokenize = self._detokenize = None

    # keras-hub's BPE splits words with tensorflow-text's regex op, which the stock TF Serving binary
    # lacks: a SavedModel of this preprocessor takes token ids in (`kformer.export.signatures`).
    tokenizes_in_core_tensorflow = False

    @classmethod
    def from_folder(cls, folder, sequence_length, end_token_id=None, **kwargs):
        """The preprocessor of a checkpoint folder holding `vocab.json` and `merges.txt`."""
        return cls(gpt2_tokenizer(folder), sequence_length, end_token_id=end_token_id, **kwargs)

    @property
    def tokenizer(self):
        return TokenizerView(self)

    def tokenize(self, texts):
        """Texts (str, list, string array or tensor) -> int32 `tf.RaggedTensor` `(batch, None)`, on every
        backend (one traced TensorFlow function; keras-hub returns lists eagerly off TensorFlow)."""
        texts = as_strings(texts, "texts")
        for i, text in enumerate(texts.numpy()):
            if b"\0" in text:
                raise ValueError(f"`texts`[{i}] holds a NUL character (\\x00): keras-hub's byte-pair tokenizer drops "
                                 f"it and everything after it. Remove it. Received: {text[:80]!r}")
        parts = [self._tokenizer_function()(texts[i:i + 2048]) for i in range(0, int(tf.shape(texts)[0]), 2048)]
        return tf.concat(parts, axis=0) if parts else tf.ragged.constant([], tf.int32, ragged_rank=1)

    def _tokenizer_function(self):
        """String tensor `(batch,)` -> int32 `tf.RaggedTensor`: keras-hub's TensorFlow path, traced once
        (also called inside `encode`'s and tf.data's graphs)."""
        if self._tokenize is None:
            def tokenize(texts):
                nul = tf.reduce_any(tf.strings.regex_full_match(texts, r"(?s).*\x00.*"))
                with tf.control_dependencies([tf.debugging.Assert(tf.logical_not(nul), [NUL_MESSAGE])]):
                    return tf.cast(self.byte_pair_tokenizer.tokenize(tf.identity(texts)), tf.int32)
            self._tokenize = tf.function(tokenize, input_signature=[tf.TensorSpec([None], tf.string)],
                                         autograph=False)
        return self._tokenize

    @property
    def end_token_id(self):
        if self._end_token_id is not None:
            return self._end_token_id
        return self.byte_pair_tokenizer.token_to_id(END_TOKEN)

    def _pack(self, x, length):
        """Texts -> int32 `(batch, length)` of `text <|endoftext|>` (truncated, 0-padded) and the
        lengths `(batch,)` before padding."""
        ragged = self._tokenizer_function()(as_strings(x) if tf.executing_eagerly() else x)
        end = tf.fill([ragged.nrows(), 1], tf.constant(self.end_token_id, tf.int32))
        ragged = tf.concat([ragged, end], axis=1)[:, :length]
        dense = ragged.to_tensor(0, shape=[None, length])
        return dense, tf.cast(ragged.row_lengths(), tf.int32)

    def inputs(self, x):
        return self._pack(x, self.sequence_length + 1)[0][:, :-1]

    def call(self, x, y=None, sample_weight=None):
        if y is not None:
            raise ValueError("A causal LM learns from the texts themselves: pass `x` only. "
                             f"Received: y of type {type(y).__name__}")
        packed, lengths = self._pack(x, self.sequence_length + 1)
        labels = packed[:, 1:]
        weights = tf.cast(tf.range(1, self.sequence_length + 1)[None, :] < lengths[:, None], tf.float32)
        if sample_weight is not None:
            weights = weights * tf.cast(sample_weight, tf.float32)[:, None]
        return packed[:, :-1], labels, weights

    def prompt_ids(self, prompts, max_tokens=None):
        """Prompts -> int32 numpy `(batch, longest)`: each prompt's tokens (no start token), right-padded
        with 0; at most `max_tokens` (default `sequence_length`) a row, the beginning kept.

        A ValueError when a prompt holds id 0 (`"!"`): `generate` reads 0 as padding.
        """
        keep = max_tokens or self.sequence_length
        ragged = self.tokenize(as_strings(prompts, "prompts"))[:, :keep]
        rows = ragged.to_list()
        for i, row in enumerate(rows):
            if 0 in row:
                raise ValueError(f"Prompt {i} holds token id 0 ({self.byte_pair_tokenizer.id_to_token(0)!r}), which "
                                 "kformer's `generate` reads as padding; pass token ids without it, or rephrase.")
            if not row:
                raise ValueError(f"Prompt {i} is empty: `generate` needs at least one token.")
        return ragged.to_tensor(0).numpy()

    def detokenize(self, token_ids):
        """Ids `(batch, length)` -> list of str; ids 0 (padding) and `<|endoftext|>` are dropped."""
        ids = np.asarray(keras.ops.convert_to_numpy(token_ids))
        if ids.ndim == 1:
            ids = ids[None]
        if self._detokenize is None:
            self._detokenize = tf.function(self.detokenize_tensor, autograph=False, reduce_retracing=True)
        texts = self._detokenize(tf.constant(ids.astype("int32").reshape(len(ids), -1)))
        return [t.decode("utf-8", errors="replace") for t in texts.numpy()]

    def detokenize_tensor(self, token_ids):
        """int tensor `(batch, length)` -> string tensor `(batch,)`, ids 0 and `<|endoftext|>` dropped.

        Core TensorFlow ops only (a table lookup, then the byte-level map back to
        UTF-8 bytes), so a stock TF Serving runs it; keras-hub's tokenizing needs
        tensorflow-text's regex split, which it does not have.
        """
        ids = tf.cast(token_ids, tf.int32)
        keep = tf.not_equal(ids, 0) & tf.not_equal(ids, self.end_token_id)
        return self.byte_pair_tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep))

    def dataset(self, x, y=None, sample_weight=None, *, batch_size=32, shuffle=False, seed=0):
        if isinstance(x, tf.data.Dataset) or sample_weight is not None or y is not None:
            return super().dataset(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, seed=seed)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be an int >= 1. Received: batch_size={batch_size!r}")
        rows = [row + [self.end_token_id] for row in self.tokenize(x).to_list()]
        windows = pack(rows, self.sequence_length + 1)
        if not len(windows):
            raise ValueError(f"The texts hold {sum(map(len, rows))} tokens: fewer than one window of "
                             f"sequence_length + 1 = {self.sequence_length + 1}.")
        return windows_dataset(windows, batch_size, shuffle, seed)

    def get_config(self):
        return {**super().get_config(), "end_token_id": self._end_token_id,
                "tokenizer": keras.saving.serialize_keras_object(self.byte_pair_tokenizer)}

    @classmethod
    def from_config(cls, config):
        tokenizer = config["tokenizer"]
        if not isinstance(tokenizer, keras.layers.Layer):
            tokenizer = keras.saving.deserialize_keras_object(tokenizer)
        return cls(**{**config, "tokenizer": tokenizer})
