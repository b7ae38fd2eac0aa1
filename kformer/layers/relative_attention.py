"""Self-attention with relative sinusoidal positions (Transformer-XL, Conformer)."""

import math

import keras
from keras import ops

from kformer.layers import masks
from kformer.layers.checks import check_positive_ints, check_rank, check_rates, clone_initializer
from kformer.layers.linear import over_rows
from kformer.layers.lora import LoraEinsumDense
from kformer.layers.position import sinusoid


def relative_shift(position_scores):
    """Align scores over relative distances with the keys (Transformer-XL, appendix B).

    Column `r` of `position_scores` `(batch, heads, seq, 2 * seq - 1)` holds
    relative distance `seq - 1 - r` (from `seq - 1` down to `-(seq - 1)`).
    The result `(batch, heads, seq, seq)` has at `[i, j]` the input at
    `[i, seq - 1 - i + j]`: the score for distance `i - j`. One zero column is
    padded on the left and a reshape slides each row one step further, so no
    gather is needed.
    """
    shape = ops.shape(position_scores)
    batch, heads, length = shape[0], shape[1], shape[2]
    x = ops.pad(position_scores, [[0, 0], [0, 0], [0, 0], [1, 0]])  # (batch, heads, seq, 2*seq)
    x = ops.reshape(x, (batch, heads, 2 * length, length))  # each row starts one step later
    x = x[:, :, 1:]  # (batch, heads, 2*seq - 1, seq)
    x = ops.reshape(x, (batch, heads, length, 2 * length - 1))
    return x[:, :, :, :length]  # (batch, heads, seq, seq)


@keras.saving.register_keras_serializable(package="kformer")
class RelativeMultiHeadAttention(keras.layers.Layer):
    """Self-attention scoring `(q_i + u) . k_j + (q_i + v) . W_r R_{i-j}` per head.

    Transformer-XL (Dai et al. 2019, section 3.3) as used in the Conformer
    (Gulati et al. 2020, section 2.1). `R_{i-j}` is the sinusoidal encoding
    (`kformer.layers.position.sinusoid`) of the relative distance `i - j`,
    `W_r` a per-head projection without bias, and `u`, `v` learned per-head
    biases (`content_bias`, `position_bias`). Scores are scaled by
    `1 / sqrt(key_dim)` and softmaxed over the keys; the heads' outputs are
    concatenated and projected back to the input width. There is no
    absolute position, so any sequence length works.

    Args:
        num_heads: int. Number of attention heads.
        key_dim: int. Size of each head (queries, keys, values, positions).
        dropout: float. Dropout on the attention probabilities. Defaults to `0.0`.
        max_wavelength: int. Base of the sinusoid wavelengths. Defaults to `10000`.
        use_bias: bool. Biases in the query, key, value and output projections
            (the position projection has none). Defaults to `True`.
        kernel_initializer: Initializer for the projection kernels. Defaults
            to `"glorot_uniform"`.
        bias_initializer: Initializer for the projection biases and for `u`
            and `v`. Defaults to `"zeros"`.
        **kwargs: Passed to `keras.layers.Layer` (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch, seq, dim)`.
        padding_mask: `(batch, seq)`, True = real frame. Padded keys are never
            attended (an example with no real frame attends to all, never NaN).
            Defaults to the incoming Keras mask.
        return_attention_scores: bool. Also return the attention
            probabilities `(batch, heads, seq, seq)`. Defaults to `False`.
        training: bool. Dropout only when True.

    Returns:
        `(batch, seq, dim)`, followed by the probabilities if asked; the input
        mask is passed through.

    Example:

    >>> import numpy as np
    >>> from kformer.layers import RelativeMultiHeadAttention
    >>> attention = RelativeMultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = np.ones((2, 16, 8), "float32")
    >>> padding_mask = np.arange(16) < np.array([[16], [10]])
    >>> tuple(attention(x, padding_mask=padding_mask).shape)
    (2, 16, 8)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        dropout=0.0,
        max_wavelength=10000,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_ints(num_heads=num_heads, key_dim=key_dim)
        check_rates(dropout=dropout)
        if max_wavelength <= 0:
            raise ValueError(
                f"`max_wavelength` must be positive. Received: max_wavelength={max_wavelength}"
            )
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.max_wavelength = max_wavelength
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        heads, bias = (num_heads, key_dim), "de" if use_bias else None
        # Projections over (batch * seq, dim) rows (`over_rows`).
        self.query_dense = self._projection("ac,cde->ade", heads, bias, "query")
        self.key_dense = self._projection("ac,cde->ade", heads, bias, "key")
        self.value_dense = self._projection("ac,cde->ade", heads, bias, "value")
        self.position_dense = self._projection("ac,cde->ade", heads, None, "position")
        for dense in (self.query_dense, self.key_dense, self.value_dense):
            dense.supports_masking = True  # masks are handled here; no "mask destroyed" warning
        self.dropout_layer = keras.layers.Dropout(
            dropout, dtype=self.dtype_policy, name="attention_dropout"
        )

    def _projection(self, equation, output_shape, bias_axes, name):
        return LoraEinsumDense(  # an EinsumDense whose LoRA factors are peft's (`kformer.layers.lora`)
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, inputs_shape):
        check_rank("inputs", inputs_shape, (3,))
        dim = inputs_shape[-1]
        for dense in (self.query_dense, self.key_dense, self.value_dense):
            dense.build((None, dim))
        self.position_dense.build((None, dim))
        self.content_bias, self.position_bias = (
            self.add_weight(
                name=name,
                shape=(self.num_heads, self.key_dim),
                initializer=clone_initializer(self.bias_initializer),
            )
            for name in ("content_bias", "position_bias")
        )
        self.output_dense = self._projection(
            "acd,cde->ae", (dim,), "e" if self.use_bias else None, "attention_output"
        )
        self.output_dense.build((None, self.num_heads, self.key_dim))
        self.built = True

    def call(self, inputs, padding_mask=None, mask=None, return_attention_scores=False,
             training=None):
        check_rank("inputs", inputs.shape, (3,))
        padding_mask = mask if padding_mask is None else padding_mask
        q = over_rows(self.query_dense, inputs)  # (batch, seq, heads, key_dim)
        k = over_rows(self.key_dense, inputs)
        v = over_rows(self.value_dense, inputs)
        logits = self._logits(q, k, inputs.shape[-1])  # (batch, heads, seq, seq) float32
        if padding_mask is not None:
            allowed = masks.allow_empty_rows(masks.merge_masks(key_mask=padding_mask))
            logits = masks.mask_scores(logits, allowed[:, None])
        probs = ops.cast(ops.softmax(logits, axis=-1), v.dtype)
        dropped = self.dropout_layer(probs, training=training) if self.dropout else probs
        output = ops.einsum("acbe,aecd->abcd", dropped, v)  # (batch, seq, heads, key_dim)
        output = over_rows(self.output_dense, output, feature_axes=2)  # (batch, seq, dim)
        return (output, probs) if return_attention_scores else output

    def _logits(self, q, k, dim):
        """Scaled `(q + u) . k + shift((q + v) . W_r R)`, `(batch, heads, seq, seq)` float32."""
        length = ops.shape(q)[1]
        distances = ops.cast(length - 1 - ops.arange(2 * length - 1), "float32")  # seq-1 ... 1-seq
        encodings = sinusoid(distances, dim, self.max_wavelength)  # (2*seq - 1, dim)
        p = self.position_dense(ops.cast(encodings, self.compute_dtype))  # (2*seq-1, heads, kdim)
        u = ops.cast(self.content_bias, q.dtype)
        v = ops.cast(self.position_bias, q.dtype)
        content = ops.einsum("abcd,aecd->acbe", ops.add(q, u), k)  # (batch, heads, seq, seq)
        position = ops.einsum("abcd,ecd->acbe", ops.add(q, v), p)  # (batch, heads, seq, 2*seq - 1)
        scores = ops.cast(content, "float32") + ops.cast(relative_shift(position), "float32")
        return scores * (1.0 / math.sqrt(self.key_dim))

    def compute_output_spec(self, inputs, return_attention_scores=False, **kwargs):
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        batch, length = inputs.shape[0], inputs.shape[1]
        probs = keras.KerasTensor((batch, self.num_heads, length, length), dtype=self.compute_dtype)
        return output, probs

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "dropout": self.dropout,
            "max_wavelength": self.max_wavelength,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }
