"""Conformer block (Gulati et al. 2020, "Conformer: Convolution-augmented Transformer
for Speech Recognition", section 2 and Figure 1)."""

import keras

from kformer.layers.checks import check_positive_floats, check_positive_ints, check_rank, check_rates, clone_initializer
from kformer.layers.convolution import ConformerConvolution
from kformer.layers.feed_forward import FeedForward
from kformer.layers.relative_attention import RelativeMultiHeadAttention


@keras.saving.register_keras_serializable(package="kformer")
class ConformerBlock(keras.layers.Layer):
    """Half feed-forward, self-attention, convolution, half feed-forward, LayerNorm.

    The macaron block of the paper's equation (1), every sublayer pre-norm:

        x = x + 1/2 FFN(x)
        x = x + Dropout(MHSA(LayerNorm(x)))      # relative positions
        x = x + Conv(x)
        y = LayerNorm(x + 1/2 FFN(x))

    FFN is LayerNorm -> Dense(intermediate_dim) -> swish -> Dropout -> Dense
    -> Dropout (Figure 4), MHSA a `RelativeMultiHeadAttention` (Figure 3) and
    Conv a `ConformerConvolution` (Figure 2, its LayerNorm and dropout inside).

    Args:
        num_heads: int. Attention heads; must divide the input width.
        intermediate_dim: int. Hidden width of both feed-forwards. Defaults
            to `4 * hidden_dim`.
        kernel_size: int. Width in frames of the depthwise convolution.
            Defaults to `32`.
        dropout: float. Dropout inside the feed-forwards and on each
            sublayer's output before its residual. Defaults to `0.0`.
        attention_dropout: float. Dropout on the attention probabilities.
            Defaults to `0.0`.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        kernel_initializer: Defaults to `"glorot_uniform"`.
        **kwargs: Passed to `keras.layers.Layer` (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch, frames, hidden_dim)`.
        padding_mask: `(batch, frames)`, True = real frame. Defaults to the
            incoming Keras mask. Padded frames are never attended, are zeroed
            before the depthwise convolution and are left out of the
            BatchNormalization statistics: they never change real frames.
        training: bool.

    Returns:
        `(batch, frames, hidden_dim)`; the input mask is passed through.

    Example:

    >>> import numpy as np
    >>> from kformer.blocks import ConformerBlock
    >>> block = ConformerBlock(num_heads=2, kernel_size=3)
    >>> x = np.ones((2, 16, 8), "float32")
    >>> padding_mask = np.arange(16) < np.array([[16], [10]])
    >>> tuple(block(x, padding_mask=padding_mask).shape)
    (2, 16, 8)
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim=None,
        kernel_size=32,
        dropout=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-5,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_ints(num_heads=num_heads, kernel_size=kernel_size)
        if intermediate_dim is not None:
            check_positive_ints(intermediate_dim=intermediate_dim)
        check_rates(dropout=dropout, attention_dropout=attention_dropout)
        check_positive_floats(layer_norm_epsilon=layer_norm_epsilon)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.kernel_size = kernel_size
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        sub = {"dtype": self.dtype_policy}
        self.feed_forward_1_norm = self._norm("feed_forward_1_norm")
        self.self_attention_norm = self._norm("self_attention_norm")
        self.feed_forward_2_norm = self._norm("feed_forward_2_norm")
        self.output_norm = self._norm("output_norm")
        self.convolution = ConformerConvolution(
            kernel_size, dropout=dropout, layer_norm_epsilon=layer_norm_epsilon,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            name="convolution", **sub,
        )
        self.residual_dropout = keras.layers.Dropout(dropout, name="residual_dropout", **sub)

    def _norm(self, name):
        return keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def _feed_forward(self, units, name):
        return FeedForward(
            units, activation="silu", dropout=self.dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy, name=name,
        )

    def build(self, inputs_shape):
        check_rank("inputs", inputs_shape, (3,))
        hidden_dim = inputs_shape[-1]
        if hidden_dim is None or hidden_dim % self.num_heads:
            raise ValueError(
                "The input width must be divisible by `num_heads`. Received: "
                f"inputs.shape={tuple(inputs_shape)}, num_heads={self.num_heads}"
            )
        units = self.intermediate_dim or 4 * hidden_dim
        self.feed_forward_1 = self._feed_forward(units, "feed_forward_1")
        self.feed_forward_2 = self._feed_forward(units, "feed_forward_2")
        self.self_attention = RelativeMultiHeadAttention(
            self.num_heads, hidden_dim // self.num_heads, dropout=self.attention_dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy, name="self_attention",
        )
        for layer in (self.feed_forward_1_norm, self.feed_forward_1, self.self_attention_norm,
                      self.self_attention, self.convolution, self.feed_forward_2_norm,
                      self.feed_forward_2, self.output_norm):
            layer.build(inputs_shape)
        self.built = True

    def _dropout(self, h, training):
        return self.residual_dropout(h, training=training) if self.dropout else h

    def _half_step(self, x, norm, feed_forward, training):
        return x + 0.5 * self._dropout(feed_forward(norm(x), training=training), training)

    def call(self, inputs, padding_mask=None, mask=None, training=None):
        padding_mask = mask if padding_mask is None else padding_mask
        x = self._half_step(inputs, self.feed_forward_1_norm, self.feed_forward_1, training)
        h = self.self_attention(self.self_attention_norm(x), padding_mask=padding_mask,
                                training=training)
        x = x + self._dropout(h, training)
        x = x + self.convolution(x, padding_mask=padding_mask, training=training)
        x = self._half_step(x, self.feed_forward_2_norm, self.feed_forward_2, training)
        return self.output_norm(x)  # (batch, frames, hidden_dim)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "kernel_size": self.kernel_size,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
