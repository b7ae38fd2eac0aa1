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
    """

    def call(self, inputs, mask=None):
        check_rank("inputs", inputs.shape, (3,))
        return inputs[:, 0]

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0], inputs_shape[2])
