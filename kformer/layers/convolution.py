"""Conformer convolutions: the convolution module and the 4x subsampling front end."""

import keras
from keras import ops

from kformer.layers.checks import check_positive_floats, check_positive_ints, check_rank, check_rates, clone_initializer


@keras.saving.register_keras_serializable(package="kformer")
class ConformerConvolution(keras.layers.Layer):
    """LayerNorm, pointwise conv + GLU, depthwise conv, BatchNorm, swish, pointwise conv, dropout.

    The convolution module of the Conformer (Gulati et al. 2020, section 2.2
    and Figure 2). The pointwise convolutions are `Dense` layers (to
    `2 * dim` before the GLU, back to `dim` after); the depthwise convolution
    has 'same' padding. Padded frames are zeroed before the depthwise
    convolution and left out of the BatchNormalization batch statistics, so
    real frames come out exactly as for the unpadded sequence. The residual
    connection is the caller's (`ConformerBlock`).

    Args:
        kernel_size: int. Width in frames of the depthwise convolution; an
            even width (the paper's 32) sees one more frame ahead than
            behind. Defaults to `32`.
        dropout: float. Dropout on the output. Defaults to `0.0`.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        kernel_initializer: Initializer for the convolution kernels. Defaults
            to `"glorot_uniform"`.
        **kwargs: Passed to `keras.layers.Layer` (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch, frames, dim)`.
        padding_mask: `(batch, frames)`, True = real frame. Defaults to the
            incoming Keras mask.
        training: bool. Batch statistics and dropout only when True.

    Returns:
        `(batch, frames, dim)`; the input mask is passed through.

    Example:

    >>> import numpy as np
    >>> from kformer.layers import ConformerConvolution
    >>> convolution = ConformerConvolution(kernel_size=3)
    >>> x = np.ones((2, 16, 8), "float32")
    >>> tuple(convolution(x).shape)
    (2, 16, 8)
    """

    def __init__(self, kernel_size=32, dropout=0.0, layer_norm_epsilon=1e-5,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        check_positive_ints(kernel_size=kernel_size)
        check_rates(dropout=dropout)
        check_positive_floats(layer_norm_epsilon=layer_norm_epsilon)
        self.kernel_size = kernel_size
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        sub = {"dtype": self.dtype_policy}
        self.norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="norm", **sub)
        self.depthwise = keras.layers.DepthwiseConv1D(
            kernel_size, padding="same", name="depthwise",
            depthwise_initializer=clone_initializer(self.kernel_initializer), **sub,
        )
        self.batch_norm = keras.layers.BatchNormalization(name="batch_norm", **sub)
        self.dropout_layer = keras.layers.Dropout(dropout, name="dropout", **sub)

    def _dense(self, units, name):
        return keras.layers.Dense(
            units, kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy, name=name,
        )

    def build(self, inputs_shape):
        check_rank("inputs", inputs_shape, (3,))
        dim = inputs_shape[-1]
        self.norm.build(inputs_shape)
        self.pointwise_in = self._dense(2 * dim, "pointwise_in")
        self.pointwise_in.build(inputs_shape)
        self.depthwise.build(inputs_shape)
        self.batch_norm.build(inputs_shape)
        self.pointwise_out = self._dense(dim, "pointwise_out")
        self.pointwise_out.build(inputs_shape)
        self.built = True

    def call(self, inputs, padding_mask=None, mask=None, training=None):
        check_rank("inputs", inputs.shape, (3,))
        padding_mask = mask if padding_mask is None else padding_mask
        x = self.pointwise_in(self.norm(inputs))  # (batch, frames, 2 * dim)
        x = ops.glu(x, axis=-1)  # (batch, frames, dim)
        if padding_mask is not None:
            padding_mask = ops.cast(padding_mask, "bool")
            # Padded frames must add nothing to their real neighbours.
            x = ops.where(padding_mask[:, :, None], x, ops.zeros_like(x))
        x = self.depthwise(x)
        x = self.batch_norm(x, training=training, mask=padding_mask)  # statistics of real frames
        x = self.pointwise_out(ops.silu(x))
        return self.dropout_layer(x, training=training) if self.dropout else x

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        return {
            **super().get_config(),
            "kernel_size": self.kernel_size,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


def _conv_length(length):
    """Frames left by one 3-wide, stride-2 'valid' convolution (None stays None)."""
    return None if length is None else max(0, (length - 3) // 2 + 1)


def _subsampled_length(length):
    return _conv_length(_conv_length(length))  # == (length - 3) // 4 for length >= 3


@keras.saving.register_keras_serializable(package="kformer")
class ConvolutionSubsampling(keras.layers.Layer):
    """Two 3x3 stride-2 Conv2D + ReLU over `(frames, features)`, then a Dense: 4x fewer frames.

    The Conformer front end (Gulati et al. 2020, Figure 1: "Convolution
    Subsampling", "Linear", "Dropout"), laid out as ESPnet's
    `Conv2dSubsampling`. The convolutions are 'valid', so each maps `n`
    frames to `(n - 3) // 2 + 1`: `frames -> ((frames - 1) // 2 - 1) // 2`,
    which equals `(frames - 3) // 4` (the same for the feature axis).
    Output frame `t` sees input frames `4t ... 4t + 6` only, so `frames` and
    `features` must be at least 7.

    The output mask is the input mask subsampled the same way: frame `t` is
    real when all 7 frames it sees are. For a sequence of `length` real
    frames then padding, that is `t < max(0, (length - 3) // 4)`; its real
    outputs never see padding. The Keras mask is subsampled automatically;
    call `subsample_mask(padding_mask)` for an explicit one.

    Args:
        hidden_dim: int. Output width.
        filters: int. Channels of both convolutions. Defaults to `hidden_dim`.
        dropout: float. Dropout after the Dense. Defaults to `0.0`.
        kernel_initializer: Defaults to `"glorot_uniform"`.
        **kwargs: Passed to `keras.layers.Layer` (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch, frames, features)`, e.g. log-mel filterbanks.
        training: bool. Dropout only when True.

    Returns:
        `(batch, (frames - 3) // 4, hidden_dim)`, with the incoming Keras mask,
        if any, subsampled as above.

    Example:

    >>> import numpy as np
    >>> from kformer.layers import ConvolutionSubsampling
    >>> subsampling = ConvolutionSubsampling(hidden_dim=8, filters=4)
    >>> features = np.ones((2, 64, 10), "float32")
    >>> tuple(subsampling(features).shape)
    (2, 15, 8)
    >>> padding_mask = np.arange(64) < np.array([[64], [40]])
    >>> np.asarray(subsampling.subsample_mask(padding_mask)).sum(axis=1).tolist()
    [15, 9]
    """

    def __init__(self, hidden_dim, filters=None, dropout=0.0,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        check_positive_ints(hidden_dim=hidden_dim)
        if filters is not None:
            check_positive_ints(filters=filters)
        check_rates(dropout=dropout)
        self.hidden_dim = hidden_dim
        self.filters = filters
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.conv_1, self.conv_2 = (
            keras.layers.Conv2D(
                filters or hidden_dim, 3, strides=2, activation="relu",
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy, name=name,
            )
            for name in ("conv_1", "conv_2")
        )
        self.projection = keras.layers.Dense(
            hidden_dim, kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy, name="projection",
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy, name="dropout")

    def build(self, inputs_shape):
        check_rank("inputs", inputs_shape, (3,))
        batch, frames, features = inputs_shape
        if features is None or features < 7 or (frames is not None and frames < 7):
            raise ValueError(
                "Convolution subsampling needs at least 7 frames and a known number of at "
                f"least 7 features. Received: inputs.shape={tuple(inputs_shape)}"
            )
        channels = self.filters or self.hidden_dim
        self.conv_1.build((batch, frames, features, 1))
        self.conv_2.build((batch, _conv_length(frames), _conv_length(features), channels))
        self._flat_dim = _subsampled_length(features) * channels
        self.projection.build((batch, _subsampled_length(frames), self._flat_dim))
        self.built = True

    def call(self, inputs, training=None):
        check_rank("inputs", inputs.shape, (3,))
        x = ops.expand_dims(inputs, -1)  # (batch, frames, features, 1)
        x = self.conv_2(self.conv_1(x))  # (batch, frames', features', filters)
        shape = ops.shape(x)
        # (batch, frames', features' * filters)
        x = ops.reshape(x, (shape[0], shape[1], self._flat_dim))
        x = self.projection(x)  # (batch, frames', hidden_dim)
        return self.dropout_layer(x, training=training) if self.dropout else x

    def subsample_mask(self, padding_mask):
        """`(batch, frames)` -> `(batch, (frames - 3) // 4)` bool: frames that see no padding."""
        x = ops.cast(padding_mask, "float32")[:, :, None]  # (batch, frames, 1)
        for _ in range(2):  # min over each 3-frame window, stride 2, as the convolutions
            x = -ops.max_pool(-x, pool_size=3, strides=2, padding="valid")
        return ops.cast(x[:, :, 0], "bool")

    def compute_mask(self, inputs, mask=None):
        return None if mask is None else self.subsample_mask(mask)

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0], _subsampled_length(inputs_shape[1]), self.hidden_dim)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_dim": self.hidden_dim,
            "filters": self.filters,
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
