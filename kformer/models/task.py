"""Task models: functional `keras.Model`s that own their parts and a preprocessor.

A task subclass builds its layers, calls them on `keras.Input`s, calls
`super().__init__(inputs=..., outputs=...)`, then keeps its parts and
constructor arguments as attributes (`get_config` reads them back by the
constructor's signature, so `.keras` files rebuild the task with no custom
code). With a preprocessor attached, `fit`, `evaluate` and `predict` also take
raw inputs (strings, images): the preprocessor runs in a tf.data pipeline on
every backend. `task_type` names the serving signatures `kformer.export`
writes for the task.
"""

import inspect
import os
import pathlib
import warnings

import keras
import numpy as np
from keras import ops

from kformer.models import lora
from kformer.models.input_checks import (check_batch_size, check_labels, check_model_inputs, check_raw_type,
                                         check_weights, rows)
from kformer.models.postprocess import classify
from kformer.models.quantized import check_float, quantize_as_saved, quantized_layers
from kformer.training.safe_state import restored_on_error, save_atomically

# Writers of published checkpoint layouts, registered by `kformer.models.pretrained` (which `kformer.models`
# imports): the pretrained loaders build tasks, so this module cannot import them.
PRETRAINED_WRITERS = {}
_NOT_CONFIG = ("self", "args", "kwargs", "preprocessor", "backbone")
MODEL_ARGUMENTS = {"inputs", "outputs", "name", "trainable", "dtype"}


def __getattr__(name):
    if name == "Backbone":  # renamed in 0.2; the old name goes in 0.3
        warnings.warn("`kformer.models.Backbone` is renamed `kformer.models.KformerModel`.", DeprecationWarning,
                      stacklevel=2)
        return KformerModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class KformerModel(keras.Model):
    """Base of every kformer model: a functional model whose config is its constructor arguments.

    Named for what it is, the base of kformer's models (a backbone, in keras-hub's
    sense, is only the headless network such as `BertBackbone`); `Backbone` is its
    deprecated old name.

    A subclass builds its graph, calls `super().__init__(inputs=..., outputs=...)`,
    then stores every constructor argument as an attribute of the same name:
    `get_config` reads them back (by the constructor's signature) and
    `from_config` calls the constructor, so `.keras` files need no custom code.
    On TensorFlow, `fit` creates the training state before the train step's
    first trace, so the step is traced once (`_build_training_state`).

    Args:
        **kwargs: Passed to `keras.Model` (`inputs`, `outputs`, `name`, ...).

    Example:

    >>> import keras
    >>> class Doubler(KformerModel):
    ...     def __init__(self, width=4, **kwargs):
    ...         x = keras.Input((width,))
    ...         super().__init__(inputs=x, outputs=keras.layers.Dense(2 * width)(x), **kwargs)
    ...         self.width = width
    >>> config = Doubler(width=3).get_config()
    >>> config["width"], Doubler.from_config(config).output.shape
    (3, (None, 6))
    """

    # Names of layers `from_pretrained` initialized because the checkpoint lacks them (a BertForMaskedLM
    # checkpoint's pooler): `enable_lora` trains them with the adapters, as a new head.
    new_layers = ()

    def __init__(self, *args, **kwargs):
        unknown = sorted(set(kwargs) - MODEL_ARGUMENTS)
        if unknown:  # keras.Model would ignore a misspelled or unsupported argument without a word
            shown = ", ".join(f"{k}={kwargs[k]!r}" for k in unknown)
            raise TypeError(f"{type(self).__name__} got unexpected arguments: {shown}. Expected the arguments "
                            f"of {type(self).__name__}.__init__ or keras.Model's {sorted(MODEL_ARGUMENTS)}.")
        super().__init__(*args, **kwargs)

    # Every Keras loop below checks its inputs first and, if it raises anyway,
    # leaves the model's variables as they were (`kformer.training.safe_state`):
    # on JAX a failed loop would otherwise empty them for good.
    def fit(self, x=None, y=None, batch_size=None, *args, **kwargs):
        check_batch_size(batch_size)
        self._check_inputs(x)
        limits = getattr(self, "label_limits", dict)()
        check_weights(x, kwargs.get("sample_weight"), kwargs.get("class_weight"), limits)
        with restored_on_error(self):
            self._build_training_state(x, y, kwargs.get("sample_weight"))
            return super().fit(x, y, batch_size, *args, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, *args, **kwargs):
        check_batch_size(batch_size)
        self._check_inputs(x)
        check_weights(x, kwargs.get("sample_weight"))
        with restored_on_error(self):
            return super().evaluate(x, y, batch_size, *args, **kwargs)

    def predict(self, x, batch_size=None, *args, **kwargs):
        check_batch_size(batch_size)
        self._check_inputs(x)
        if rows(x) == 0:  # Keras has no answer for an empty batch: give one of the right shape
            return self._empty_outputs()
        with restored_on_error(self):
            return super().predict(x, batch_size, *args, **kwargs)

    def predict_on_batch(self, x):
        self._check_inputs(x)
        if rows(x) == 0:
            return self._empty_outputs()
        with restored_on_error(self):
            return super().predict_on_batch(x)

    def train_on_batch(self, x, y=None, *args, **kwargs):
        self._check_inputs(x)
        with restored_on_error(self):
            return super().train_on_batch(x, y, *args, **kwargs)

    def test_on_batch(self, x, y=None, *args, **kwargs):
        self._check_inputs(x)
        with restored_on_error(self):
            return super().test_on_batch(x, y, *args, **kwargs)

    def save(self, filepath, *args, **kwargs):
        """`keras.Model.save`, through a temporary file that is checked before it replaces `filepath`."""
        return save_atomically(self, filepath, lambda path, **kw: super(KformerModel, self).save(path, *args, **kw),
                               **kwargs)

    def save_pretrained(self, folder, overwrite=False, adapter_only=False):
        """Write the Hugging Face layout that `transformers` opens (`kformer.models.pretrained.save`): the
        merged weights, or with `adapter_only=True` the LoRA adapters as a peft adapter folder."""
        if not isinstance(folder, (str, os.PathLike)) or not os.fspath(folder):
            raise ValueError(f"`folder` must be a str or path of the folder to write. Received: folder={folder!r}")
        blocking = next((p for p in pathlib.Path(folder).absolute().parents if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            raise ValueError(f"`folder`={os.fspath(folder)!r} lies below {str(blocking)!r}, which is a file, not a "
                             "folder; nothing was written.")
        if not isinstance(adapter_only, bool):
            raise ValueError(f"`adapter_only` must be a bool. Received: adapter_only={adapter_only!r}")
        if not adapter_only:  # the adapters alone are float over any base
            check_float(self, "save_pretrained")
        return PRETRAINED_WRITERS["huggingface"](self, folder, overwrite=overwrite, adapter_only=adapter_only)

    def transformer_blocks(self):
        """`(owner, encoder blocks, decoder blocks)`: the Transformer blocks this model runs and the functional
        model whose graph calls them (`kformer.viz` reads their attention). None when it has none."""
        return None

    def input_limits(self):
        """dict input name -> (id_limit, length_limit) checked by `predict`, `evaluate` and `fit`.

        Token ids must lie in `[0, id_limit)`, and inputs have at most
        `length_limit` positions (None: no limit). Subclasses fill it in.
        """
        return {}

    def _check_inputs(self, x):
        check_model_inputs(self, x, self.input_limits())

    def _empty_outputs(self):
        """What `predict` answers for 0 rows: zeros of each output's shape with 0 rows."""
        def empty(t):
            return np.zeros((0, *(0 if d is None else d for d in t.shape[1:])),
                            "float32" if "float" in t.dtype else t.dtype)
        return keras.tree.map_structure(empty, self._outputs_struct)


    def _build_training_state(self, x, y, sample_weight):
        """TensorFlow: create the optimizer, loss and metric variables before `fit` traces its step.

        Without a distribution strategy, Keras's TensorFlow trainer creates
        them inside the first trace of the train step, and a `tf.function`
        that creates variables is traced twice: the first epoch pays for two
        traces. Built here from the input's spec (a `tf.data.Dataset`: no
        data is read) or its first row (arrays), by the `_symbolic_build` that
        Keras itself runs under a strategy (private to Keras, pinned in
        constraints.txt; `tests/models/test_tasks.py` counts the traces).
        """
        if keras.backend.backend() != "tensorflow" or not self.built or not self.compiled:
            return
        if hasattr(x, "element_spec"):  # tf.data.Dataset
            batch = x.element_spec
            if not all(type(spec).__name__ == "TensorSpec" for spec in keras.tree.flatten(batch)):
                return  # ragged or sparse elements: left to Keras
        elif all(isinstance(a, np.ndarray) or a is None for a in keras.tree.flatten((x, y, sample_weight))):
            batch = keras.tree.map_structure(lambda a: None if a is None else a[:1], (x, y, sample_weight))
        else:
            return  # a generator or PyDataset: Keras builds the state in the first trace, as before
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=batch)

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Keras's `Model.quantize` (`"int8"`, `"int4"`, `"float8"`; GPTQ / AWQ with their config), quietly.

        Keras warns once for every layer that has no quantized form (norms,
        pooling, tokenizers, ...); they stay float, as intended, so those
        warnings are not shown. The quantized layers are kept in the model's
        config: the `.keras` file loads back quantized (`kformer.models.quantized`).
        """
        lora.check_keras_quantize(self)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Layer \S+ does not have a `quantize` method implemented",
                                    category=UserWarning)
            super().quantize(mode, config=config, filters=filters, **kwargs)

    def enable_lora(self, rank, target_names=("query", "value"), alpha=None):
        """LoRA adapters of rank `rank` on the projections named in `target_names` (`"query"`, `"key"`,
        `"value"`, `"attention_output"`, `"mlp_in"`, `"mlp_out"`); every other weight is frozen except a
        classifier's new head. The outputs are unchanged until training; compile after enabling.
        `.keras` files, `save_pretrained` and exports hold the merged weights (`kformer.models.lora`).

        Example:

        >>> from kformer import models
        >>> task = models.text_classifier(preset="imdb_tiny", vocabulary_size=100, sequence_length=8)
        >>> layers = task.enable_lora(4)
        >>> sorted({w.name for w in task.trainable_weights})
        ['bias', 'kernel', 'lora_kernel_a', 'lora_kernel_b']
        """
        return lora.enable_lora(self, rank, target_names=target_names, alpha=alpha)

    def save_lora_weights(self, path):
        """Write the LoRA adapters and the new head (a small safetensors file; `kformer.models.lora`)."""
        return lora.save_lora_weights(self, path)

    def load_lora_weights(self, path):
        """Load what `save_lora_weights` wrote, enabling the same adapters first if needed."""
        return lora.load_lora_weights(self, path)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable}
        for key in inspect.signature(type(self).__init__).parameters:
            if key not in _NOT_CONFIG:
                value = getattr(self, key)
                config[key] = list(value) if isinstance(value, (list, tuple)) else value
        quantized = quantized_layers(self)
        if quantized:  # after `quantize`: rebuilt quantized, so the saved quantized weights load
            config["quantized_layers"] = quantized
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        quantized = config.pop("quantized_layers", None)
        model = cls(**cls._constructor_arguments(config))
        quantize_as_saved(model, quantized)
        return model

    @classmethod
    def _constructor_arguments(cls, config):
        """The constructor's arguments from `get_config`'s values (subclasses deserialize nested objects)."""
        return config


class Task(KformerModel):
    """Base of the kformer task models (`Translator`, `TextClassifier`, ...).

    Adds to `KformerModel`: a `preprocessor` (serialized with the task) through
    which `fit`, `evaluate`, `predict` and `predict_on_batch` also accept raw
    inputs, and the `task_type` that names the task's serving signatures.

    Args:
        **kwargs: Passed to `keras.Model`.

    Example:

    >>> from kformer import models
    >>> task = models.text_classifier(preset="imdb_tiny", vocabulary_size=100, sequence_length=8)
    >>> isinstance(task, Task), task.task_type, task.preprocessor is None
    (True, 'text_classification', True)

    Attributes:
        preprocessor: the task's preprocessor (`kformer.data.preprocessors`),
            or None (then the task takes model inputs only). Every subclass
            sets it with `_set_preprocessor`.
        task_type: str. The serving task (`kformer.export.SIGNATURES` key).
    """

    task_type = None

    def get_config(self):
        config = super().get_config()
        for key in ("backbone", "preprocessor"):
            if key in inspect.signature(type(self).__init__).parameters:
                value = getattr(self, key)
                config[key] = None if value is None else keras.saving.serialize_keras_object(value)
        return config

    @classmethod
    def _constructor_arguments(cls, config):
        if isinstance(config.get("preprocessor"), dict):
            import kformer.data.preprocessors  # noqa: F401  (registers the preprocessor classes)
        for key in ("backbone", "preprocessor"):
            if isinstance(config.get(key), dict):
                config[key] = keras.saving.deserialize_keras_object(config[key])
        return config

    def label_limits(self):
        """dict output name -> number of classes the labels `y` of `fit` / `evaluate` index (ids in
        `[0, n)`). Subclasses fill it in; a one-output task's array `y` is checked against its one entry."""
        return {}

    def _check_inputs(self, x):
        if not self._raw(x):
            super()._check_inputs(x)

    def _check_labels(self, x, y):
        check_labels(self, x, y, self.label_limits())

    def validate_preprocessor(self, preprocessor=None):
        """Raise a ValueError if `preprocessor` (default: the task's) does not fit this model.

        Subclasses check that tokenizers do not emit ids past the model's
        vocabulary and that sequence lengths / image sizes match its inputs.
        """

    def _set_preprocessor(self, preprocessor):
        """Attach `preprocessor` (or None) at construction: checked, then validated against the model,
        so a tokenizer past the vocabulary fails here, not in `fit`."""
        self.preprocessor = check_preprocessor(preprocessor)
        self.validate_preprocessor()

    def _raw(self, x):
        preprocessor = getattr(self, "preprocessor", None)
        return preprocessor is not None and preprocessor.is_raw(x)

    def _require_preprocessor(self, what):
        if getattr(self, "preprocessor", None) is None:
            raise ValueError(f"`{what}` needs a preprocessor: build the task with `preprocessor=...` "
                             f"or load it with `kformer.models.load`. Received: {type(self).__name__}"
                             f"(preprocessor=None)")
        return self.preprocessor

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, sample_weight=None, **kwargs):
        if (isinstance(x, (list, tuple)) and len(x) == 0) or rows(x) == 0:
            raise ValueError(f"`x` is empty: nothing to train on. Received: x={x!r}")
        check_raw_type(self, x)
        check_weights(x, sample_weight, kwargs.get("class_weight"), self.label_limits())
        if self._raw(x):
            if validation_split:
                raise ValueError("`validation_split` is not supported with raw inputs: pass "
                                 f"`validation_data=(x, y)`. Received: validation_split={validation_split}")
            check_batch_size(batch_size)
            self._check_labels(x, y)
            x = self.preprocessor.dataset(x, y, sample_weight, batch_size=batch_size or 32,
                                          shuffle=shuffle)
            y = sample_weight = batch_size = None
            shuffle = False  # the dataset shuffles itself
        else:
            self._check_labels(x, y)
            if hasattr(x, "element_spec"):  # a tf.data.Dataset shuffles itself (Keras warns at shuffle=True)
                shuffle = False
        if isinstance(validation_data, tuple) and self._raw(validation_data[0]):
            validation_data = self.preprocessor.dataset(*validation_data, batch_size=32)
        elif isinstance(validation_data, tuple):
            self._check_inputs(validation_data[0])
        return super().fit(x, y, batch_size=batch_size, epochs=epochs, verbose=verbose,
                           callbacks=callbacks, validation_split=validation_split,
                           validation_data=validation_data, shuffle=shuffle,
                           sample_weight=sample_weight, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        check_batch_size(batch_size)
        if (isinstance(x, (list, tuple)) and len(x) == 0) or rows(x) == 0:
            raise ValueError(f"`x` is empty: nothing to evaluate. Received: x={x!r}")
        check_raw_type(self, x)
        check_weights(x, sample_weight)
        self._check_labels(x, y)
        if self._raw(x):
            x = self.preprocessor.dataset(x, y, sample_weight, batch_size=batch_size or 32)
            y = sample_weight = batch_size = None
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs)

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        check_batch_size(batch_size)
        x = self._encode(x)
        return super().predict(x, batch_size=batch_size, verbose=verbose, steps=steps,
                               callbacks=callbacks)

    def predict_on_batch(self, x):
        return super().predict_on_batch(self._encode(x))

    def _encode(self, x):
        """Raw inputs -> model inputs (an empty list stays empty); anything else is checked as it is."""
        if isinstance(x, (list, tuple)) and len(x) == 0:
            return self._empty_inputs()
        check_raw_type(self, x)
        return self.preprocessor.encode(x) if self._raw(x) else x

    def _empty_inputs(self):
        specs = {t.name: t for t in keras.tree.flatten(self.inputs)}
        empty = {name: np.zeros((0,) + tuple(1 if d is None else d for d in t.shape[1:]), t.dtype)
                 for name, t in specs.items()}
        return next(iter(empty.values())) if len(empty) == 1 else empty


class ClassifierTask(Task):
    """A classifier: calling it gives logits; `predict` gives probabilities.

    `class_names` (optional list of str) names the classes for
    `predict_labels` and the exported `label` output.

    Args:
        **kwargs: Passed to `Task`.

    Example:

    >>> import numpy as np
    >>> from kformer import models
    >>> task = models.text_classifier(preset="imdb_tiny", vocabulary_size=100, sequence_length=8,
    ...                               class_names=["negative", "positive"])
    >>> ids = np.ones((1, 8), "int32")
    >>> round(float(task.predict(ids, verbose=0).sum()), 4), task.predict_labels(ids)[0] in task.class_names
    (1.0, True)
    """

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        return _probabilities(super().predict(x, batch_size=batch_size, verbose=verbose, steps=steps,
                                              callbacks=callbacks))

    def predict_on_batch(self, x):
        return _probabilities(super().predict_on_batch(x))

    def label_limits(self):
        return {self.output_names[0]: self.num_classes}

    def _check_labels(self, x, y):
        if y is None and self._raw(x) and isinstance(x, (str, list, tuple, np.ndarray)):
            raise ValueError(f"`y` is required: raw inputs to {type(self).__name__}.fit / evaluate need one label "
                             "per input (class ids in [0, num_classes)). Received: y=None")
        super()._check_labels(x, y)

    def predict_labels(self, x, batch_size=None):
        """Raw or model inputs -> the most probable class per example (its name, or its id)."""
        logits = Task.predict(self, x, batch_size=batch_size, verbose=0)
        ids = ops.convert_to_numpy(classify(logits)[0])  # as the exported `label_id`
        names = self.class_names
        return [names[i] if names else int(i) for i in ids]


def check_tokenizer_fits(preprocessor, attribute, vocabulary_size):
    """A ValueError when `preprocessor.<attribute>` has more tokens than the model's embedding rows."""
    tokenizer = getattr(preprocessor, attribute)
    if getattr(tokenizer, "vocabulary", None) is None:
        return  # being loaded: the vocabulary asset arrives after construction (export checks again)
    size = tokenizer.vocabulary_size
    if size > vocabulary_size:
        raise ValueError(f"The preprocessor's `{attribute}` has {size} tokens, but the model's vocabulary "
                         f"holds {vocabulary_size}: ids >= {vocabulary_size} would index past its "
                         f"embedding. Received: {attribute}.vocabulary_size={size}, "
                         f"model vocabulary_size={vocabulary_size}")


def check_length_fits(preprocessor, limit, exact=False):
    """A ValueError when `preprocessor.sequence_length` exceeds (or, `exact`, differs from) `limit`."""
    length = preprocessor.sequence_length
    if (length != limit) if exact else (length > limit):
        raise ValueError(f"The preprocessor's `sequence_length` must be {'equal to' if exact else 'at most'} "
                         f"the model's sequence_length={limit}. Received: sequence_length={length}")


def _probabilities(logits):
    """Class probabilities as numpy float32, computed as the exported `probabilities` are."""
    return np.asarray(ops.convert_to_numpy(classify(logits)[1]), "float32")


def check_preprocessor(preprocessor):
    """None, or an object with the preprocessor interface (`is_raw`, `encode`, `dataset`)."""
    if preprocessor is not None and not all(hasattr(preprocessor, a) for a in ("is_raw", "encode", "dataset")):
        raise ValueError("`preprocessor` must be a kformer preprocessor (kformer.data.preprocessors) "
                         f"or None. Received: {type(preprocessor).__name__}")
    return preprocessor


def check_class_names(class_names, num_classes):
    """None, or a list of `num_classes` distinct strings."""
    if class_names is None:
        return None
    if (not isinstance(class_names, (list, tuple)) or len(class_names) != num_classes
            or not all(isinstance(c, str) for c in class_names)):
        raise ValueError(f"`class_names` must be {num_classes} strings (one per class). "
                         f"Received: class_names={class_names!r}")
    return list(class_names)
