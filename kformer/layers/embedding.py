"""Token + position embeddings (with tied output projection) and ViT patches."""

import math

import keras
from keras import ops

from kformer.layers.checks import check_ids, check_positive_ints, known_index
from kformer.layers.linear import over_rows
from kformer.layers.position import LAYOUTS, PositionEmbedding, SinusoidalPositionEncoding

POSITIONS = ("learned", "sinusoidal", "none")


@keras.saving.register_keras_serializable(package="kformer")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Token embedding plus a learned or sinusoidal position embedding.

    `call(x, reverse=True)` multiplies by the transposed token table: the tied
    output projection of "Attention Is All You Need", section 3.4.

    Args:
        vocabulary_size: int. Number of token ids.
        sequence_length: int. Longest sequence; required for
            `position="learned"`, optional for `"sinusoidal"`.
        hidden_dim: int. Embedding width.
        position: `"learned"`, `"sinusoidal"` or `"none"` (token embedding
            only, e.g. with rotary positions in attention). Defaults to `"learned"`.
        mask_zero: bool. Token id 0 is padding and produces a Keras mask.
        scale_by_sqrt_dim: bool. Multiply token embeddings by
            `sqrt(hidden_dim)` (paper, 3.4). Defaults to `False`.
        max_wavelength: int. For sinusoidal positions. Defaults to `10000`.
        sinusoid_layout: `"interleaved"` (the paper) or `"halves"` (sines,
            then cosines: Marian checkpoints). Defaults to `"interleaved"`.
        output_bias: bool. `reverse=True` adds a learned bias per vocabulary
            entry to the logits (Marian's `final_logits_bias`). Defaults to `False`.
        embeddings_initializer: Initializer for the token table. Defaults to
            `"uniform"`, as `keras.layers.Embedding`.
        **kwargs: Passed to `keras.layers.Layer`.

    Call arguments:
        inputs: int `(batch, seq)` token ids, or with `reverse=True` a float
            `(batch, seq, hidden_dim)`.
        start_index: int or scalar tensor. Position of the first token.
        positions: `(seq, hidden_dim)` encodings to add instead of computing
            them (decoding slices them from `position_table`, made once:
            sinusoids computed inside an XLA loop get fused into the next
            projections and recomputed for each of their outputs).
        reverse: bool. Project hidden states to vocabulary logits.
        output_table: `(hidden_dim, vocab)` or None. With `reverse=True`, the
            `output_table()` to multiply by instead of transposing the table
            (decoding transposes it once a call, outside its loop: XLA:CPU
            fused the transpose into each step's matrix-vector product).

    Returns:
        `(batch, seq, hidden_dim)`, or logits `(batch, seq, vocabulary_size)`.

    Example:

    >>> import numpy as np
    >>> embedding = TokenAndPositionEmbedding(100, 16, 8, mask_zero=True)
    >>> hidden = embedding(np.array([[5, 6, 0]]))
    >>> tuple(hidden.shape), tuple(embedding(hidden, reverse=True).shape)
    ((1, 3, 8), (1, 3, 100))
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        hidden_dim,
        position="learned",
        mask_zero=False,
        scale_by_sqrt_dim=False,
        max_wavelength=10000,
        embeddings_initializer="uniform",
        sinusoid_layout="interleaved",
        output_bias=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_ints(vocabulary_size=vocabulary_size, hidden_dim=hidden_dim)
        if position not in POSITIONS:
            raise ValueError(f"`position` must be one of {POSITIONS}. Received: position={position!r}")
        if position == "learned" or sequence_length is not None:
            check_positive_ints(sequence_length=sequence_length)
        self.vocabulary_size = vocabulary_size
        self.sequence_length = sequence_length
        self.hidden_dim = hidden_dim
        self.position = position
        self.mask_zero = mask_zero
        self.scale_by_sqrt_dim = scale_by_sqrt_dim
        self.max_wavelength = max_wavelength
        if sinusoid_layout not in LAYOUTS:
            raise ValueError(f"`sinusoid_layout` must be one of {LAYOUTS}. Received: sinusoid_layout={sinusoid_layout!r}")
        if not isinstance(output_bias, bool):
            raise ValueError(f"`output_bias` must be True or False. Received: output_bias={output_bias!r}")
        self.sinusoid_layout = sinusoid_layout
        self.output_bias = output_bias
        self.logits_bias = None  # built with `output_bias`
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            hidden_dim,
            embeddings_initializer=self.embeddings_initializer,
            mask_zero=mask_zero,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        if position == "learned":
            self.position_embedding = PositionEmbedding(
                sequence_length, dtype=self.dtype_policy, name="position_embedding"
            )
        elif position == "none":
            self.position_embedding = None
        else:
            self.position_embedding = SinusoidalPositionEncoding(
                max_wavelength, layout=sinusoid_layout, dtype=self.dtype_policy, name="position_embedding"
            )

    def build(self, inputs_shape):
        self.token_embedding.build(inputs_shape)
        if self.position_embedding is not None:
            self.position_embedding.build(tuple(inputs_shape) + (self.hidden_dim,))
        self.logits_bias = self.add_weight(shape=(self.vocabulary_size,), initializer="zeros",
                                           name="logits_bias") if self.output_bias else None
        self.built = True

    def call(self, inputs, start_index=0, reverse=False, positions=None, output_table=None):
        if reverse:
            if len(inputs.shape) != 3 or inputs.shape[-1] != self.hidden_dim:
                raise ValueError(
                    f"With reverse=True, `inputs` must be (batch, seq, {self.hidden_dim}). "
                    f"Received: inputs.shape={tuple(inputs.shape)}"
                )
            table = self.output_table() if output_table is None else output_table  # (hidden_dim, vocab)
            logits = over_rows(lambda rows: ops.matmul(rows, table), inputs)  # (batch, seq, vocab)
            if self.logits_bias is not None:
                logits = logits + ops.cast(self.logits_bias, logits.dtype)
            return logits
        if len(inputs.shape) != 2:
            raise ValueError(
                f"`inputs` must be int token ids (batch, seq). Received: inputs.shape={tuple(inputs.shape)}"
            )
        check_ids("inputs", inputs, self.vocabulary_size)
        index = known_index("start_index", start_index)
        if self.sequence_length and isinstance(inputs.shape[1], int) and index is not None:
            if self.position == "learned" and inputs.shape[1] + index > self.sequence_length:
                raise ValueError(
                    f"`inputs` has {inputs.shape[1]} tokens from start_index={start_index}, "
                    f"more than sequence_length={self.sequence_length}. "
                    f"Received: inputs.shape={tuple(inputs.shape)}"
                )
        x = self.token_embedding(inputs)  # (batch, seq, hidden_dim)
        if self.scale_by_sqrt_dim:
            x = x * ops.cast(math.sqrt(self.hidden_dim), x.dtype)
        if positions is not None:
            return x + ops.cast(positions, x.dtype)
        if self.position_embedding is None:
            return x
        # `.call`: no second Layer.__call__ (0.1 ms in eager torch; the positions are never quantized)
        return x + self.position_embedding.call(x, start_index=start_index)

    def output_table(self):
        """The tied output projection's kernel `(hidden_dim, vocab)`: the token table transposed."""
        return ops.transpose(ops.cast(self._token_table(), self.compute_dtype))

    def _token_table(self):
        """The token table `(vocabulary_size, hidden_dim)`, de-scaled where it is quantized (int8 / int4
        rows carry per-row scales: the layer's own lookup applies them)."""
        embedding = self.token_embedding
        if embedding.quantization_mode is None:
            return embedding.embeddings
        return embedding(ops.arange(self.vocabulary_size, dtype="int32"))

    def position_table(self, length):
        """Encodings of positions `[0, length)`: `(length, hidden_dim)`, or None with `position="none"`."""
        if self.position_embedding is None:
            return None
        return self.position_embedding(ops.zeros((1, length, self.hidden_dim), self.compute_dtype))[0]

    def compute_mask(self, inputs, mask=None):
        # Keras passes only the first call argument: rank 3 means `reverse=True`.
        if not self.mask_zero or len(inputs.shape) != 2:
            return None
        return ops.not_equal(inputs, 0)

    def compute_output_spec(self, inputs, start_index=0, reverse=False, positions=None):
        last = self.vocabulary_size if reverse else self.hidden_dim
        return keras.KerasTensor(tuple(inputs.shape[:2]) + (last,), dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "sequence_length": self.sequence_length,
            "hidden_dim": self.hidden_dim,
            "position": self.position,
            "mask_zero": self.mask_zero,
            "scale_by_sqrt_dim": self.scale_by_sqrt_dim,
            "max_wavelength": self.max_wavelength,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "sinusoid_layout": self.sinusoid_layout,
            "output_bias": self.output_bias,
        }


@keras.saving.register_keras_serializable(package="kformer")
class PatchEmbedding(keras.layers.Layer):
    """ViT patch embedding: images -> patch tokens (+ class token) + positions.

    Dosovitskiy et al. 2021, section 3.1: non-overlapping `patch_size` patches
    linearly projected (a strided convolution), a learned class token
    prepended, learned position embeddings added. With `stem_channels`, a
    convolutional stem replaces the patchify (Xiao et al. 2021, "Early
    Convolutions Help Transformers See Better"): one 3x3 stride-2
    convolution + BatchNorm + ReLU per entry, then a convolution of side
    `patch_size / 2**len(stem_channels)` (1x1 when equal) to `hidden_dim`.
    The BatchNorm momentum is 0.9 (PyTorch's default): with Keras's 0.99 the
    inference statistics lag far behind in a run of a few thousand steps.

    Args:
        patch_size: int. Side of the square patches (total downsampling).
        hidden_dim: int. Token width.
        use_class_token: bool. Prepend a learned `[CLS]` token. Defaults to `True`.
        stem_channels: tuple of ints. Widths of the stride-2 stem convolutions;
            `patch_size` must be divisible by `2**len(stem_channels)`.
            Defaults to `()` (the paper's linear patchify).
        **kwargs: Passed to `keras.layers.Layer`.

    Call arguments:
        inputs: `(batch, height, width, channels)`, height and width divisible
            by `patch_size`.

    Returns:
        `(batch, 1 + patches, hidden_dim)` (`(batch, patches, hidden_dim)`
        without the class token), `patches = (height / p) * (width / p)`.

    Example:

    >>> import numpy as np
    >>> tuple(PatchEmbedding(patch_size=4, hidden_dim=8)(np.zeros((2, 16, 16, 3))).shape)
    (2, 17, 8)
    """

    def __init__(self, patch_size, hidden_dim, use_class_token=True, stem_channels=(), **kwargs):
        super().__init__(**kwargs)
        check_positive_ints(patch_size=patch_size, hidden_dim=hidden_dim)
        if not isinstance(stem_channels, (list, tuple)):
            raise ValueError(f"`stem_channels` must be a list or tuple of ints. Received: "
                             f"stem_channels={stem_channels!r}")
        stem_channels = tuple(stem_channels)
        check_positive_ints(**{f"stem_channels[{i}]": c for i, c in enumerate(stem_channels)})
        if patch_size % 2 ** len(stem_channels):
            raise ValueError(
                f"`patch_size` must be divisible by 2**len(stem_channels)={2 ** len(stem_channels)} "
                f"(one stride-2 convolution per stem entry). Received: patch_size={patch_size}, "
                f"stem_channels={stem_channels}"
            )
        self.patch_size = patch_size
        self.hidden_dim = hidden_dim
        self.use_class_token = use_class_token
        self.stem_channels = stem_channels
        self.stem = []
        for i, channels in enumerate(stem_channels):
            self.stem += [
                keras.layers.Conv2D(channels, 3, strides=2, padding="same", use_bias=False,
                                    dtype=self.dtype_policy, name=f"stem_conv_{i}"),
                keras.layers.BatchNormalization(momentum=0.9, dtype=self.dtype_policy, name=f"stem_norm_{i}"),
                keras.layers.ReLU(dtype=self.dtype_policy, name=f"stem_relu_{i}"),
            ]
        side = patch_size // 2 ** len(stem_channels)
        self.projection = keras.layers.Conv2D(
            hidden_dim, side, strides=side, dtype=self.dtype_policy, name="projection"
        )

    def _num_patches(self, images_shape):
        if len(images_shape) != 4:
            raise ValueError(
                "`inputs` must be images (batch, height, width, channels). "
                f"Received: inputs.shape={tuple(images_shape)}"
            )
        height, width = images_shape[1], images_shape[2]
        if height is None or width is None or height % self.patch_size or width % self.patch_size:
            raise ValueError(
                f"Image height and width must be known and divisible by patch_size="
                f"{self.patch_size}. Received: inputs.shape={tuple(images_shape)}"
            )
        return (height // self.patch_size) * (width // self.patch_size)

    def build(self, inputs_shape):
        num_tokens = self._num_patches(inputs_shape) + int(self.use_class_token)
        shape = tuple(inputs_shape)
        for layer in self.stem:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        self.projection.build(shape)
        if self.use_class_token:
            self.class_token = self.add_weight(
                name="class_token", shape=(1, 1, self.hidden_dim), initializer="zeros"
            )
        self.position_embedding = PositionEmbedding(
            num_tokens,
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            dtype=self.dtype_policy,
            name="position_embedding",
        )
        self.position_embedding.build((None, num_tokens, self.hidden_dim))
        self.built = True

    def call(self, inputs):
        num_patches = self._num_patches(inputs.shape)
        x = inputs
        for layer in self.stem:  # each conv halves height and width; BatchNorm reads `training` from the call context
            x = layer(x)
        x = self.projection(x)  # (batch, height / p, width / p, hidden_dim)
        x = ops.reshape(x, (-1, num_patches, self.hidden_dim))  # (batch, patches, hidden_dim)
        if self.use_class_token:
            cls = ops.cast(self.class_token, x.dtype)
            cls = ops.broadcast_to(cls, (ops.shape(x)[0], 1, self.hidden_dim))
            x = ops.concatenate([cls, x], axis=1)  # (batch, 1 + patches, hidden_dim)
        return x + self.position_embedding(x)

    def compute_output_shape(self, inputs_shape):
        num_tokens = self._num_patches(inputs_shape) + int(self.use_class_token)
        return (inputs_shape[0], num_tokens, self.hidden_dim)

    def get_config(self):
        return {
            **super().get_config(),
            "patch_size": self.patch_size,
            "hidden_dim": self.hidden_dim,
            "use_class_token": self.use_class_token,
            "stem_channels": list(self.stem_channels),
        }
