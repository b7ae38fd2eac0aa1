"""Pooling a sequence to one vector per example."""

import keras

from kformer.layers.checks import check_rank


@keras.saving.register_keras_serializable(package="kformer")
class ClassTokenPooling(keras.layers.Layer):
    """The first token's vector: the [CLS] token of BERT and ViT.

    Call arguments:
        inputs: `(batch, seq, dim)`.

    Returns:
        `(batch, dim)`; the sequence mask is consumed.

    Example:

    >>> import numpy as np
    >>> x = np.arange(12, dtype="float32").reshape(1, 3, 4)
    >>> np.asarray(ClassTokenPooling()(x)).tolist()
    [[0.0, 1.0, 2.0, 3.0]]
    """

    def call(self, inputs, mask=None):
        check_rank("inputs", inputs.shape, (3,))
        return inputs[:, 0]

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0], inputs_shape[2])


@keras.saving.register_keras_serializable(package="kformer")
class MaskedMeanPooling(keras.layers.Layer):
    """Mean over the real (unmasked) tokens; an all-padding row gives zeros, not NaN.

    Call arguments:
        inputs: `(batch, seq, dim)`.
        mask: optional bool `(batch, seq)` (the Keras mask), True = real token.

    Returns:
        `(batch, dim)`; the sequence mask is consumed.

    Example:

    >>> import numpy as np
    >>> x = np.array([[[1.0], [3.0], [100.0]]], "float32")
    >>> np.asarray(MaskedMeanPooling()(x, mask=np.array([[True, True, False]]))).tolist()
    [[2.0]]
    """

    def call(self, inputs, mask=None):
        check_rank("inputs", inputs.shape, (3,))
        if mask is None:
            return keras.ops.mean(inputs, axis=1)
        weights = keras.ops.cast(mask, inputs.dtype)[:, :, None]
        total = keras.ops.sum(inputs * weights, axis=1)
        return total / keras.ops.maximum(keras.ops.sum(weights, axis=1), 1.0)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0], inputs_shape[2])
