"""Position information: fixed sinusoids, learned embeddings, rotary embeddings."""

import math

import keras
import numpy as np
from keras import ops

from kformer.kernels.slices import slice_rows
from kformer.layers.checks import check_positive_ints, known_index


def _positions(inputs, start_index, seq_axis=1):
    """Absolute positions `(seq,)` float32, starting at `start_index`."""
    length = ops.shape(inputs)[seq_axis]
    return ops.cast(ops.arange(length), "float32") + ops.cast(start_index, "float32")


LAYOUTS = ("interleaved", "halves", "tensor2tensor")


def sinusoid(positions, dim, max_wavelength=10000, layout="interleaved"):
    """Paper section 3.5 for float positions `(seq,)` -> `(seq, dim)`.

    PE(pos, 2i) = sin(pos / max_wavelength^(2i / dim)),
    PE(pos, 2i + 1) = cos(pos / max_wavelength^(2i / dim)).

    `layout="halves"` puts the same sines in the first `ceil(dim / 2)` features and the cosines
    after them (Marian's and fairseq-style checkpoints): feature `i` of the first half is
    `sin(pos / max_wavelength^(2i / dim))`, of the second half the matching cosine.

    `layout="tensor2tensor"` (Whisper's encoder; tensor2tensor's `get_timing_signal_1d`): halves too, but
    the `dim / 2` frequencies run from 1 to `1 / max_wavelength` inclusive: feature `i < dim / 2` is
    `sin(pos * max_wavelength^(-i / (dim / 2 - 1)))`. `dim` must be even and at least 4.
    """
    if layout == "tensor2tensor":
        if dim % 2 or dim < 4:
            raise ValueError(f"The tensor2tensor layout needs an even width >= 4. Received: dim={dim}")
        half = dim // 2
        step = np.float32(-math.log(max_wavelength) / (half - 1))
        inverse_timescale = np.exp(step * np.arange(half, dtype="float32"))  # float32, as Whisper's torch code
        angles = ops.expand_dims(positions, 1) * inverse_timescale[None, :]
        return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=1)
    feature = np.arange(dim)
    two_i = (feature - feature % 2).astype("float32")  # 2i for both 2i and 2i+1
    if layout == "halves":
        sines = (dim + 1) // 2
        two_i = np.concatenate([two_i[0::2], two_i[1::2]])  # the same frequencies, sines first
        is_sine = feature < sines
    else:
        is_sine = feature % 2 == 0
    inverse_timescale = np.power(np.float32(max_wavelength), -two_i / np.float32(dim))  # float32, as in ops
    angles = ops.expand_dims(positions, 1) * inverse_timescale[None, :]
    return ops.where(is_sine, ops.sin(angles), ops.cos(angles))


@keras.saving.register_keras_serializable(package="kformer")
class Sinusoids(keras.initializers.Initializer):
    """Initializer of a `(positions, dim)` table with `sinusoid`'s encodings: fixed positions kept as a
    weight, for a checkpoint that stores its own table (Whisper's encoder; freeze the layer holding it).

    Args:
        max_wavelength: int. Defaults to `10000`.
        layout: one of `sinusoid`'s layouts. Defaults to `"interleaved"`.

    Example:

    >>> table = Sinusoids(layout="halves")((3, 4))
    >>> [round(float(v), 3) for v in np.asarray(table)[1]]  # position 1: sin, sin, cos, cos
    [0.841, 0.01, 0.54, 1.0]
    """

    def __init__(self, max_wavelength=10000, layout="interleaved"):
        if layout not in LAYOUTS:
            raise ValueError(f"`layout` must be one of {LAYOUTS}. Received: layout={layout!r}")
        self.max_wavelength, self.layout = max_wavelength, layout

    def __call__(self, shape, dtype=None):
        table = sinusoid(ops.arange(shape[0], dtype="float32"), shape[1], self.max_wavelength, self.layout)
        return ops.cast(table, dtype or "float32")

    def get_config(self):
        return {"max_wavelength": self.max_wavelength, "layout": self.layout}


@keras.saving.register_keras_serializable(package="kformer")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Fixed sine/cosine position encoding ("Attention Is All You Need", 3.5).

    Any sequence length; no weights. Add the result to the token embeddings.

    Args:
        max_wavelength: int. The base of the geometric progression of
            wavelengths (10000 in the paper). Defaults to `10000`.
        layout: `"interleaved"` (the paper: sin, cos, sin, cos, ...),
            `"halves"` (all sines, then all cosines: Marian checkpoints) or
            `"tensor2tensor"` (halves with tensor2tensor's frequencies:
            Whisper's encoder; see `sinusoid`). Defaults to `"interleaved"`.
        **kwargs: Passed to `keras.layers.Layer`.

    Call arguments:
        inputs: `(batch, seq, dim)`; only its shape is used.
        start_index: int or scalar tensor. Position of the first token (for
            cached decoding). Defaults to `0`.

    Returns:
        `(batch, seq, dim)` encodings in the layer's compute dtype.

    Example:

    >>> import numpy as np
    >>> encoding = SinusoidalPositionEncoding()(np.zeros((1, 3, 4), "float32"))
    >>> [round(float(v), 3) for v in np.asarray(encoding)[0, 1]]  # position 1: sin, cos, sin, cos
    [0.841, 0.54, 0.01, 1.0]
    """

    def __init__(self, max_wavelength=10000, layout="interleaved", **kwargs):
        super().__init__(**kwargs)
        if max_wavelength <= 0:
            raise ValueError(
                f"`max_wavelength` must be positive. Received: max_wavelength={max_wavelength}"
            )
        if layout not in LAYOUTS:
            raise ValueError(f"`layout` must be one of {LAYOUTS}. Received: layout={layout!r}")
        self.max_wavelength = max_wavelength
        self.layout = layout
        self.supports_masking = True

    def call(self, inputs, start_index=0):
        if len(inputs.shape) != 3:
            raise ValueError(
                f"`inputs` must be (batch, seq, dim). Received: inputs.shape={tuple(inputs.shape)}"
            )
        known_index("start_index", start_index)
        encoding = sinusoid(_positions(inputs, start_index), inputs.shape[-1], self.max_wavelength, self.layout)
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), ops.shape(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_wavelength": self.max_wavelength, "layout": self.layout}


@keras.saving.register_keras_serializable(package="kformer")
class PositionEmbedding(keras.layers.Layer):
    """Learned position embedding for up to `sequence_length` positions.

    Args:
        sequence_length: int. Number of positions that have an embedding.
        initializer: Initializer for the embedding table. Defaults to
            `"glorot_uniform"`.
        **kwargs: Passed to `keras.layers.Layer`.

    Call arguments:
        inputs: `(batch, seq, dim)`; only its shape is used.
        start_index: int or scalar tensor. Position of the first token.
            Defaults to `0`.

    Returns:
        `(batch, seq, dim)`: rows `start_index ... start_index + seq - 1`.

    Example:

    >>> import numpy as np
    >>> tuple(PositionEmbedding(sequence_length=16)(np.zeros((2, 5, 8)), start_index=3).shape)
    (2, 5, 8)
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        check_positive_ints(sequence_length=sequence_length)
        self.sequence_length = sequence_length
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, inputs_shape[-1]),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        if len(inputs.shape) != 3:
            raise ValueError(
                f"`inputs` must be (batch, seq, dim). Received: inputs.shape={tuple(inputs.shape)}"
            )
        length, index = inputs.shape[1], known_index("start_index", start_index)
        if isinstance(length, int) and index is not None:
            if index + length > self.sequence_length:
                raise ValueError(
                    f"Positions up to {start_index + length} requested but the layer has "
                    f"sequence_length={self.sequence_length}. Received: inputs.shape="
                    f"{tuple(inputs.shape)}, start_index={start_index}"
                )
        table = ops.convert_to_tensor(self.position_embeddings)
        rows = slice_rows(table, start_index if index is None else index, ops.shape(inputs)[1])
        return ops.broadcast_to(ops.cast(rows, self.compute_dtype), ops.shape(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "sequence_length": self.sequence_length,
            "initializer": keras.initializers.serialize(self.initializer),
        }


@keras.saving.register_keras_serializable(package="kformer")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding (RoPE, Su et al. 2021), applied to queries/keys.

    Rotates feature pairs `(x[i], x[i + dim/2])` by the angle
    `position * max_wavelength^(-2i/dim)`, so `q . k` depends only on the
    relative position and norms are unchanged.

    Args:
        max_wavelength: int. Base of the wavelengths. Defaults to `10000`.
        scaling_factor: float. Positions are divided by it (linear position
            interpolation). Defaults to `1.0`.
        **kwargs: Passed to `keras.layers.Layer`.

    Call arguments:
        inputs: `(batch, seq, dim)` or `(batch, seq, heads, dim)`, `dim` even.
        start_index: int or scalar tensor. Position of the first token.

    Returns:
        Tensor of the input shape.

    Example:

    >>> import numpy as np
    >>> q = np.ones((1, 6, 2, 8), "float32")  # (batch, seq, heads, head_dim)
    >>> rotated = np.asarray(RotaryEmbedding()(q))
    >>> rotated.shape, bool(np.allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(q, axis=-1)))
    ((1, 6, 2, 8), True)
    """

    def __init__(self, max_wavelength=10000, scaling_factor=1.0, **kwargs):
        super().__init__(**kwargs)
        if max_wavelength <= 0 or scaling_factor <= 0:
            raise ValueError(
                "`max_wavelength` and `scaling_factor` must be positive. Received: "
                f"max_wavelength={max_wavelength}, scaling_factor={scaling_factor}"
            )
        self.max_wavelength = max_wavelength
        self.scaling_factor = scaling_factor
        self.supports_masking = True

    def call(self, inputs, start_index=0):
        if len(inputs.shape) not in (3, 4) or inputs.shape[-1] % 2:
            raise ValueError(
                "`inputs` must be (batch, seq, dim) or (batch, seq, heads, dim) with an "
                f"even dim. Received: inputs.shape={tuple(inputs.shape)}"
            )
        known_index("start_index", start_index)
        dim = inputs.shape[-1]
        positions = _positions(inputs, start_index) / self.scaling_factor
        inverse_freq = ops.power(
            float(self.max_wavelength), -ops.cast(ops.arange(0, dim, 2), "float32") / dim
        )
        angles = ops.expand_dims(positions, 1) * ops.expand_dims(inverse_freq, 0)
        angles = ops.concatenate([angles, angles], axis=-1)  # (seq, dim)
        if len(inputs.shape) == 4:
            angles = ops.expand_dims(angles, 1)  # (seq, 1, dim)
        x = ops.cast(inputs, "float32")
        x1, x2 = ops.split(x, 2, axis=-1)
        rotated = ops.concatenate([-x2, x1], axis=-1)
        output = x * ops.cos(angles) + rotated * ops.sin(angles)
        return ops.cast(output, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "max_wavelength": self.max_wavelength,
            "scaling_factor": self.scaling_factor,
        }
