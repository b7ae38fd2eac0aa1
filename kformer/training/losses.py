"""Losses and metrics: the paper's label-smoothed loss (5.4), and a sparse cross-entropy and accuracy over
large vocabularies that are fast on every backend."""

import keras
from keras import ops

from kformer.layers.checks import check_ids


def _targets(y_true, y_pred):
    """Int targets `(...)` for logits `(..., classes)`; a trailing 1 (`(..., 1)` targets) is dropped."""
    y_true = ops.cast(y_true, "int32")
    if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
        y_true = y_true[..., 0]
    return y_true


def sparse_cross_entropy(y_true, y_pred):
    """Per-position cross-entropy of int targets `(...)` against logits `(..., classes)`: `(...)`.

    `keras.losses.sparse_categorical_crossentropy(..., from_logits=True)`'s
    numbers. On JAX it is `logsumexp(logits) - logits[target]`: Keras's JAX
    version multiplies the log-softmax by a one-hot of every class, which
    costs a GPT step of `(32, 128, 8000)` logits time on a CPU.
    TensorFlow and torch keep Keras's own (a fused kernel, `nll_loss`).
    """
    if keras.backend.backend() != "jax":
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
    y_true = _targets(y_true, y_pred)
    target_logit = ops.take_along_axis(y_pred, y_true[..., None], axis=-1)[..., 0]
    return ops.logsumexp(y_pred, axis=-1) - target_logit


def sparse_accuracy(y_true, y_pred):
    """1.0 where `argmax(y_pred, -1) == y_true`, else 0.0: `(...)` for logits `(..., classes)`.

    `keras.metrics.sparse_categorical_accuracy`'s numbers, ties going to the
    first class as `argmax` does. On JAX (where rows holding a NaN count as
    wrong) it compares every logit with the target's (an earlier class must be
    below it, a later one not above it), since XLA's CPU argmax over 8,000
    classes is slower than the comparison. TensorFlow and torch keep Keras's argmax.
    """
    if keras.backend.backend() != "jax":
        return keras.metrics.sparse_categorical_accuracy(y_true, y_pred)
    y_true = _targets(y_true, y_pred)[..., None]
    target_logit = ops.take_along_axis(y_pred, y_true, axis=-1)
    earlier = ops.arange(ops.shape(y_pred)[-1]) < y_true
    beaten = ops.where(earlier, y_pred >= target_logit, y_pred > target_logit)
    beaten = ops.logical_or(beaten, ops.isnan(y_pred))
    return ops.cast(ops.logical_not(ops.any(beaten, axis=-1)), "float32")


@keras.saving.register_keras_serializable(package="kformer")
class SparseCrossEntropy(keras.losses.Loss):
    """Cross-entropy of int targets against logits, fast over large vocabularies on every backend.

    The numbers of `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`
    (`sparse_cross_entropy` per position, then Keras's `reduction` and
    sample weights); on JAX without the one-hot of the whole vocabulary.

    Args:
        name: str. Defaults to `"sparse_cross_entropy"`.
        **kwargs: `keras.losses.Loss` arguments (`reduction`, `dtype`).

    Call arguments:
        y_true: int `(batch, ...)` or `(batch, ..., 1)`. y_pred: logits `(batch, ..., classes)`.

    Example:

    >>> import numpy as np
    >>> logits = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]], "float32"))
    >>> round(float(SparseCrossEntropy()(np.array([1, 2]), logits)), 4)  # (-log 0.25 - log 0.8) / 2
    0.8047
    """

    def __init__(self, name="sparse_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return sparse_cross_entropy(y_true, y_pred)


@keras.saving.register_keras_serializable(package="kformer")
class SparseAccuracy(keras.metrics.MeanMetricWrapper):
    """How often the largest logit is the int target: `keras.metrics.SparseCategoricalAccuracy`'s
    numbers (`sparse_accuracy` per position), fast over large vocabularies on JAX.

    Args:
        name: str. Defaults to `"accuracy"`, the name Keras gives `metrics=["accuracy"]`.
        dtype: the metric's dtype.

    Example:

    >>> import numpy as np
    >>> metric = SparseAccuracy()
    >>> metric.update_state(np.array([1, 2]), np.array([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1]], "float32"))
    >>> float(metric.result())
    0.5
    """

    def __init__(self, name="accuracy", dtype=None):
        super().__init__(fn=sparse_accuracy, name=name, dtype=dtype)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}


@keras.saving.register_keras_serializable(package="kformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Sparse cross-entropy against `(1 - epsilon) * one_hot + epsilon / vocab`, padding ignored.

    The mean over real (non-`ignore_id`) tokens. Paper 5.4 uses epsilon 0.1.

    Args:
        epsilon: float in [0, 1). Defaults to `0.1`.
        ignore_id: int. Target id that contributes nothing. Defaults to `0`.

    Call arguments:
        y_true: int `(batch, seq)`. y_pred: logits `(batch, seq, vocab)`.

    Example:

    >>> import numpy as np
    >>> loss = LabelSmoothedCrossEntropy(epsilon=0.0)
    >>> logits = np.log(np.array([[[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]], "float32"))
    >>> round(float(loss(np.array([[1, 0]]), logits)), 4)  # -log(0.25); the padded target is ignored
    1.3863
    """

    def __init__(self, epsilon=0.1, ignore_id=0, name="label_smoothed_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        if not 0.0 <= epsilon < 1.0:
            raise ValueError(f"`epsilon` must be in [0, 1). Received: epsilon={epsilon}")
        self.epsilon = epsilon
        self.ignore_id = ignore_id

    def call(self, y_true, y_pred):
        check_ids("y_true", y_true, y_pred.shape[-1], integer_dtype=False)
        y_true = ops.cast(y_true, "int32")
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        nll = -ops.take_along_axis(log_probs, y_true[..., None], axis=-1)[..., 0]
        uniform = -ops.mean(log_probs, axis=-1)
        loss = (1.0 - self.epsilon) * nll + self.epsilon * uniform
        real = ops.cast(ops.not_equal(y_true, self.ignore_id), "float32")
        return ops.sum(loss * real) / ops.maximum(ops.sum(real), 1.0)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "ignore_id": self.ignore_id}
