"""Task preprocessors: raw text or images in, model inputs out, in TensorFlow ops.

One implementation serves `model.fit` on raw inputs, the recipes' tf.data
pipelines, eager calls (`encode`) and the exported serving graphs. Each
preprocessor is a Keras layer, serialized inside the task's `.keras` file
(its tokenizers' vocabularies as assets); its ops run in TensorFlow on every
Keras backend (inside tf.data, or eagerly, then converted to numpy).
"""

import keras
import numpy as np
import tensorflow as tf

from kformer.data.wordpiece import CLS, END, MASK, SEP, START, WordPieceTokenizer, check_truncation

_NO_AUTOTUNE = tf.data.Options()
_NO_AUTOTUNE.autotune.enabled = False  # avoids tf.data's shutdown stall after fit


def data_options():
    """`tf.data.Options` for every kformer pipeline (autotune off: no stall after `fit`).

    Example:

    >>> data_options().autotune.enabled
    False
    """
    return _NO_AUTOTUNE


def without_autograph(fn):
    """`fn` for `Dataset.map`, traced as written (as kformer's `tf.function`s, `autograph=False`).

    kformer's TensorFlow data code has no Python control flow on tensors, and
    autograph's conversion of it cost seconds on each first trace in a process.

    Args:
        fn: a function of tensors.

    Example:

    >>> ds = tf.data.Dataset.range(3).map(without_autograph(lambda x: x * 2))
    >>> [int(x) for x in ds]
    [0, 2, 4]
    """
    return tf.autograph.experimental.do_not_convert(fn)


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
    tensor = tf.convert_to_tensor(np.asarray(x, dtype=object) if isinstance(x, (list, tuple)) else x)
    if tensor.dtype != tf.string or tensor.shape.rank != 1:
        raise ValueError(f"`{name}` must be a string or a 1-D batch of strings. Received: "
                         f"dtype={tensor.dtype.name}, shape={tuple(tensor.shape)}")
    return tensor


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
        self.tokenizer = _tokenizer(tokenizer, "tokenizer")
        self.prefix, self.suffix = prefix, suffix
        self.truncation = check_truncation(truncation)

    def inputs(self, x):
        return self.tokenizer(x, self.sequence_length, self.prefix, self.suffix, self.truncation)

    def get_config(self):
        return {**super().get_config(), "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                "prefix": self.prefix, "suffix": self.suffix, "truncation": self.truncation}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "tokenizer": _deserialize(config["tokenizer"])})


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
        self.source_tokenizer = _tokenizer(source_tokenizer, "source_tokenizer")
        self.target_tokenizer = _tokenizer(target_tokenizer or source_tokenizer, "target_tokenizer")

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
        from kformer.data.translation import bucketed_dataset

        return bucketed_dataset(self, list(_texts(x)), list(_texts(y)), batch_size, shuffle, seed)

    def get_config(self):
        shared = self.target_tokenizer is self.source_tokenizer
        return {**super().get_config(),
                "source_tokenizer": keras.saving.serialize_keras_object(self.source_tokenizer),
                "target_tokenizer": None if shared else keras.saving.serialize_keras_object(self.target_tokenizer)}

    @classmethod
    def from_config(cls, config):
        target = config.get("target_tokenizer")
        return cls(**{**config, "source_tokenizer": _deserialize(config["source_tokenizer"]),
                      "target_tokenizer": None if target is None else _deserialize(target)})


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
        from kformer.data.lm import packed_dataset

        return packed_dataset(self, _texts(x), batch_size, shuffle, seed)

    def get_config(self):
        config = super().get_config()
        del config["prefix"], config["suffix"]
        return config


@keras.saving.register_keras_serializable(package="kformer")
class ImageClassifierPreprocessor(Preprocessor):
    """Images of any size -> float32 `(batch, image_size, image_size, channels)`, pixels 0-255.

    Resizes (bilinear) when the size differs and converts RGB <-> grayscale
    to `channels`; the models rescale pixels themselves. Raw inputs: a uint8
    or float array `(batch, h, w, c)` or `(h, w, c)`, or a list of such
    images of different sizes.

    Args:
        image_size: int. Side of the square model input.
        channels: int. 1 (grayscale) or 3 (RGB).

    Example:

    >>> import numpy as np
    >>> ImageClassifierPreprocessor(28, 1).encode(np.zeros((2, 56, 40, 3), "uint8")).shape
    (2, 28, 28, 1)
    """

    def __init__(self, image_size, channels=3, **kwargs):
        kwargs.pop("sequence_length", None)
        super().__init__(**kwargs)
        if not isinstance(image_size, int) or image_size < 1:
            raise ValueError(f"`image_size` must be a positive int. Received: image_size={image_size!r}")
        if channels not in (1, 3):
            raise ValueError(f"`channels` must be 1 or 3. Received: channels={channels!r}")
        self.image_size, self.channels = image_size, channels

    def is_raw(self, x):
        if isinstance(x, (list, tuple)):
            return len(x) > 0 and all(np.ndim(image) == 3 for image in x)
        return isinstance(x, (np.ndarray, tf.Tensor)) and len(x.shape) in (3, 4)

    def _raw_tensor(self, x):
        if isinstance(x, (list, tuple)):  # images of different sizes: resize one by one
            images = [tf.convert_to_tensor(image) for image in x]
            for i, image in enumerate(images):
                _check_image_shape(f"images[{i}]", tuple(image.shape), batched=False)
                _check_finite_pixels(f"images[{i}]", image)
            return tf.stack([self.inputs(image[None])[0] for image in images])
        x = tf.convert_to_tensor(x)
        if x.shape.rank == 3:
            x = x[None]
        _check_image_shape("images", tuple(x.shape), batched=True)
        _check_finite_pixels("images", x)
        return x

    def inputs(self, x):
        """Images `(batch, h, w, 1, 3 or 4)` -> float32 `(batch, image_size, image_size, channels)`.

        A fourth (alpha) channel is dropped, as the served graph's PNG decoding does.
        """
        x = tf.cast(x, tf.float32)
        if x.shape[-1] == 4:
            x = x[..., :3]
        size = [self.image_size, self.image_size]
        if x.shape[1:3] != size:
            x = tf.image.resize(x, size)
        if self.channels == 1 and x.shape[-1] == 3:
            x = tf.image.rgb_to_grayscale(x)
        elif self.channels == 3 and x.shape[-1] == 1:
            x = tf.image.grayscale_to_rgb(x)
        return x

    def dataset(self, x, y=None, sample_weight=None, *, batch_size=32, shuffle=False, seed=0,
                augment=None):
        """As `Preprocessor.dataset`; `augment` (a Keras preprocessing `Pipeline`) runs on training batches."""
        ds = super().dataset(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, seed=seed)
        if augment is not None:
            ds = ds.map(without_autograph(lambda x, *rest: (augment(x, training=True), *rest)))
        return ds

    def get_config(self):
        config = super().get_config()
        del config["sequence_length"]
        return {**config, "image_size": self.image_size, "channels": self.channels}


def _check_image_shape(name, shape, batched):
    """A ValueError naming `name` unless `shape` is `([batch,] height >= 1, width >= 1, 1, 3 or 4)`."""
    rank = 4 if batched else 3
    what = f"{'(batch, ' if batched else '('}height, width, channels) with channels 1, 3 or 4 (RGBA: alpha dropped)"
    if len(shape) != rank or shape[-1] not in (1, 3, 4):
        raise ValueError(f"`{name}` must be {what}. Received: {name}.shape={tuple(shape)}")
    if 0 in tuple(shape)[-3:-1]:
        raise ValueError(f"`{name}` is empty ({shape[-3]}x{shape[-2]} pixels): expected at least 1x1. Received: "
                         f"{name}.shape={tuple(shape)}")


def _check_finite_pixels(name, image):
    """A ValueError naming `name` when a float image holds NaN or infinite pixels (no class is right)."""
    if image.dtype.is_floating and not bool(tf.reduce_all(tf.math.is_finite(image))):
        bad = int(tf.size(image)) - int(tf.reduce_sum(tf.cast(tf.math.is_finite(image), tf.int32)))
        raise ValueError(f"`{name}` must hold finite pixels: {bad} are NaN or infinite. Received: "
                         f"{name}.shape={tuple(image.shape)}")


def _texts(x):
    return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in as_strings(x).numpy()]


def _tokenizer(tokenizer, name):
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise ValueError(f"`{name}` must be a kformer WordPieceTokenizer. Received: {type(tokenizer).__name__}")
    return tokenizer


def _deserialize(config):
    return config if isinstance(config, keras.layers.Layer) else keras.saving.deserialize_keras_object(config)
