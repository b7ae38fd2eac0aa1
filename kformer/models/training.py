"""Training objects of the paper: label-smoothed loss (5.4) and warmup schedule (5.3)."""

import keras
from keras import ops


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
        y_true = ops.cast(y_true, "int32")
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        nll = -ops.take_along_axis(log_probs, y_true[..., None], axis=-1)[..., 0]
        uniform = -ops.mean(log_probs, axis=-1)
        loss = (1.0 - self.epsilon) * nll + self.epsilon * uniform
        real = ops.cast(ops.not_equal(y_true, self.ignore_id), "float32")
        return ops.sum(loss * real) / ops.maximum(ops.sum(real), 1.0)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "ignore_id": self.ignore_id}


@keras.saving.register_keras_serializable(package="kformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr = scale * hidden_dim^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) (paper 5.3).

    `step` counts from 1 (the optimizer's iteration + 1); the peak,
    `scale * (hidden_dim * warmup_steps)^-0.5`, is reached at `warmup_steps`.

    Args:
        hidden_dim: int. The model width (`d_model`).
        warmup_steps: int. Linear warmup length. Defaults to `4000`.
        scale: float. Multiplies the whole schedule. Defaults to `1.0`.

    Example:

    >>> schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)  # the peak: 512^-0.5 * 4000^-0.5
    0.000699
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0):
        if hidden_dim < 1 or warmup_steps < 1 or scale <= 0:
            raise ValueError(
                "`hidden_dim` and `warmup_steps` must be >= 1 and `scale` > 0. Received: "
                f"hidden_dim={hidden_dim}, warmup_steps={warmup_steps}, scale={scale}"
            )
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warm = step * float(self.warmup_steps) ** -1.5
        return self.scale * float(self.hidden_dim) ** -0.5 * ops.minimum(ops.rsqrt(step), warm)

    def get_config(self):
        return {"hidden_dim": self.hidden_dim, "warmup_steps": self.warmup_steps, "scale": self.scale}
