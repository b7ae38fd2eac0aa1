"""The preprocessor base class and its raw-input checks: texts or images in, model inputs out.

Each preprocessor is a Keras layer, serialized inside the task's `.keras` file
(its tokenizers' vocabularies as assets); its ops run in TensorFlow on every
Keras backend (inside tf.data, or eagerly, then converted to numpy).
"""

import keras
import numpy as np
import tensorflow as tf

from kformer.data.pipeline import data_options, without_autograph
from kformer.data.wordpiece import WordPieceTokenizer


def is_text(x):
    """True for a str, a list/tuple of str, a numpy string array or a tf.string tensor.

    Args:
        x: anything a task's `fit` / `predict` may receive.

    Example:

    >>> is_text(["A fine film."]), is_text(np.zeros((1, 4), "int32"))
    (True, False)
    """
    if isinstance(x, str):
        return True
    if isinstance(x, (list, tuple)):
        return len(x) > 0 and all(isinstance(t, (str, bytes)) for t in x)
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "OSU"
    if isinstance(x, tf.Tensor):
        return x.dtype == tf.string
    if isinstance(x, tf.data.Dataset):
        spec = tf.nest.flatten(x.element_spec)[0]
        return getattr(spec, "dtype", None) == tf.string
    return False


def as_strings(x, name="x"):
    """str / list / array of texts -> tf.string `[batch]`; a clear error for anything else.

    Args:
        x: str, list of str, or a 1-D string array / tensor.
        name: str. The argument's name, for the message. Defaults to `"x"`.

    Example:

    >>> as_strings("one text").numpy().tolist()
    [b'one text']
    """
    if isinstance(x, str):
        x = [x]
    if isinstance(x, (list, tuple)) or (isinstance(x, np.ndarray) and x.dtype.kind in "OU" and x.ndim == 1):
        _check_texts(x, name)
    tensor = tf.convert_to_tensor(np.asarray(x, dtype=object) if isinstance(x, (list, tuple)) else x)
    if tensor.dtype != tf.string or tensor.shape.rank != 1:
        raise ValueError(f"`{name}` must be a string or a 1-D batch of strings. Received: "
                         f"dtype={tensor.dtype.name}, shape={tuple(tensor.shape)}")
    return tensor


def _check_texts(texts, name):
    """Each text a str (valid Unicode: no lone surrogate, which has no UTF-8 form) or bytes; a ValueError
    naming the first that is not (TensorFlow's conversion errors named neither the argument nor the row)."""
    for i, text in enumerate(texts):
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise ValueError(f"`{name}`[{i}] is not valid Unicode text: {err.reason} at character {err.start} "
                                 f"({text[max(0, err.start - 10):err.start + 10]!r}); it has no UTF-8 form.") from None
        elif text is None:
            raise ValueError(f"`{name}`[{i}] is None; expected a str.")


class Preprocessor(keras.layers.Layer):
    """Base class: `preprocessor(x, y=None, sample_weight=None)` -> packed model inputs.

    Subclasses implement `inputs(x)` (raw batch -> model inputs) in
    TensorFlow ops (traceable in tf.data and `tf.function`) and `is_raw`.
    `encode` runs it eagerly (compiled) and returns numpy; `dataset` builds
    the batched tf.data pipeline `fit` uses.

    Args:
        sequence_length: int >= 2, or None (image preprocessors).
        **kwargs: Passed to `keras.layers.Layer` (`name`, ...).

    Example: see `TextClassifierPreprocessor`.
    """

    # Raw inputs -> ids in core TensorFlow ops, which a stock TF Serving runs: the SavedModel takes
    # text. False (GPT-2's byte-level BPE): the SavedModel takes token ids (`kformer.export.signatures`).
    tokenizes_in_core_tensorflow = True

    def __init__(self, sequence_length=None, **kwargs):
        super().__init__(**kwargs)
        if sequence_length is not None and (not isinstance(sequence_length, int) or sequence_length < 2):
            raise ValueError(f"`sequence_length` must be an int >= 2. Received: sequence_length={sequence_length!r}")
        self.sequence_length = sequence_length
        self.built = True  # no weights
        self._compiled = None

    def __call__(self, x, y=None, sample_weight=None):
        # TensorFlow ops on raw inputs: bypass Layer.__call__'s backend conversion.
        return self.call(x, y, sample_weight)

    def call(self, x, y=None, sample_weight=None):
        return keras.utils.pack_x_y_sample_weight(self.inputs(x), y, sample_weight)

    def inputs(self, x):
        raise NotImplementedError

    def is_raw(self, x):
        """Whether `x` is raw input for this preprocessor (text, images) rather than model inputs."""
        return is_text(x)

    def _raw_tensor(self, x):
        return as_strings(x)

    def encode(self, x, chunk_size=2048):
        """Raw `x` -> model inputs as numpy (an array or a dict of arrays)."""
        x = self._raw_tensor(x)
        if self._compiled is None:  # text: one trace for every batch size; images: one per shape
            spec = [tf.TensorSpec([None], tf.string)] if x.dtype == tf.string else None
            self._compiled = tf.function(self.inputs, input_signature=spec, autograph=False)
        chunks = [self._compiled(x[i:i + chunk_size]) for i in range(0, int(tf.shape(x)[0]), chunk_size)]
        if not chunks:
            raise ValueError("`x` is empty: expected at least one input.")
        return tf.nest.map_structure(lambda *parts: np.concatenate([p.numpy() for p in parts]), *chunks)

    def dataset(self, x, y=None, sample_weight=None, *, batch_size=32, shuffle=False, seed=0):
        """Batched `tf.data.Dataset` of packed `(inputs, y, sample_weight)`, preprocessed in tf.data.

        In-memory `x` is preprocessed once (in chunks, then cached); a
        `tf.data.Dataset` of raw batches is mapped lazily.
        """
        if isinstance(x, tf.data.Dataset):
            return x.map(without_autograph(self), num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)
        x = self._raw_tensor(x)
        count = int(tf.shape(x)[0])
        for name, column in (("y", y), ("sample_weight", sample_weight)):
            if column is not None and len(column) != count:
                raise ValueError(f"`{name}` has {len(column)} rows but `x` has {count}: expected one per "
                                 f"input. Received: len({name})={len(column)}, len(x)={count}")
        columns = tuple(c for c in (x, y, sample_weight) if c is not None)
        ds = tf.data.Dataset.from_tensor_slices(columns).batch(2048)
        ds = ds.map(without_autograph(lambda *c: self(*c))).unbatch().cache()
        if shuffle:
            ds = ds.shuffle(count, seed=seed, reshuffle_each_iteration=True)
        ds = ds.batch(batch_size).apply(tf.data.experimental.assert_cardinality(-(-count // batch_size)))
        return ds.prefetch(2).with_options(data_options())  # a known length: fit shows progress, no warning

    def get_config(self):
        return {**super().get_config(), "sequence_length": self.sequence_length}


def as_text_list(x):
    """Texts (str, list, array or tensor) -> list of Python str.

    Args:
        x: str, list of str, or a 1-D string array / tensor.

    Example:

    >>> as_text_list(np.array([b"a fine film", b"a bad one"]))
    ['a fine film', 'a bad one']
    """
    return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in as_strings(x).numpy()]


def check_tokenizer(tokenizer, name):
    """`tokenizer`, or a ValueError naming `name` when it is not a kformer `WordPieceTokenizer`.

    Args:
        tokenizer: the tokenizer a preprocessor was given.
        name: str. The argument's name, for the message.

    Example:

    >>> check_tokenizer("vocab.txt", "tokenizer")
    Traceback (most recent call last):
    ...
    ValueError: `tokenizer` must be a kformer WordPieceTokenizer. Received: str
    """
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise ValueError(f"`{name}` must be a kformer WordPieceTokenizer. Received: {type(tokenizer).__name__}")
    return tokenizer


def deserialize_tokenizer(config):
    """A tokenizer from its `get_config` entry (a serialized config, or the layer itself).

    A `.keras` reload passes the serialized config (the vocabulary comes back
    as an asset afterwards); `from_config(get_config())` in memory may pass the layer.

    Args:
        config: dict from `keras.saving.serialize_keras_object`, or a layer.

    Example:

    >>> from kformer.data.wordpiece import SPECIAL_TOKENS
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["film"])
    >>> deserialize_tokenizer(tokenizer) is tokenizer
    True
    >>> type(deserialize_tokenizer(keras.saving.serialize_keras_object(tokenizer))).__name__
    'WordPieceTokenizer'
    """
    return config if isinstance(config, keras.layers.Layer) else keras.saving.deserialize_keras_object(config)
