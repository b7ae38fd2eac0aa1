"""Position-wise feed-forward network ("Attention Is All You Need", 3.3)."""

import keras
from keras import ops

from kformer.layers.checks import check_positive_ints, check_rates, clone_initializer
from kformer.layers.linear import over_rows


@keras.saving.register_keras_serializable(package="kformer")
class FeedForward(keras.layers.Layer):
    """Dense(intermediate_dim, activation) -> Dropout -> Dense(output_dim).

    Args:
        intermediate_dim: int. Hidden width (`d_ff`, 4x the model width in the paper).
        activation: Activation of the hidden layer. Defaults to `"relu"`.
        dropout: float. Dropout on the hidden activations. Defaults to `0.0`.
        output_dim: int. Output width. Defaults to the input width.
        use_bias: bool. Defaults to `True`.
        kernel_initializer: Defaults to `"glorot_uniform"`.
        **kwargs: Passed to `keras.layers.Layer`.

    Call arguments:
        inputs: `(batch, seq, dim)` (any rank >= 2).

    Returns:
        `(batch, seq, output_dim)`; the input mask is passed through.

    Example:

    >>> import numpy as np
    >>> tuple(FeedForward(intermediate_dim=32)(np.zeros((2, 5, 8))).shape)
    (2, 5, 8)
    """

    def __init__(
        self,
        intermediate_dim,
        activation="relu",
        dropout=0.0,
        output_dim=None,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_ints(intermediate_dim=intermediate_dim)
        check_rates(dropout=dropout)
        self.intermediate_dim = intermediate_dim
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.output_dim = output_dim
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        self.inner = keras.layers.Dense(
            intermediate_dim,
            activation=self.activation,
            use_bias=use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="mlp_in",
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, inputs_shape):
        self.inner.build(inputs_shape)
        self.outer = keras.layers.Dense(
            self.output_dim or inputs_shape[-1],
            use_bias=self.use_bias,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="mlp_out",
        )
        self.outer.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self.built = True

    def call(self, inputs, training=None):
        return over_rows(lambda rows: self._rows(rows, training), inputs)

    def _rows(self, rows, training):
        hidden = self.inner(rows)
        if self.dropout:  # skip a no-op layer call: it costs time in eager torch
            hidden = self.dropout_layer(hidden, training=training)
        return self.outer(hidden)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[:-1]) + (self.output_dim or inputs_shape[-1],)

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_dim": self.intermediate_dim,
            "activation": keras.activations.serialize(self.activation),
            "dropout": self.dropout,
            "output_dim": self.output_dim,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
