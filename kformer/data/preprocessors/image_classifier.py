"""Image classification: images of any size -> float32 batches of the model's size."""

import keras
import numpy as np
import tensorflow as tf

from kformer.data.pipeline import without_autograph
from kformer.data.preprocessors.base import Preprocessor


@keras.saving.register_keras_serializable(package="kformer")
class ImageClassifierPreprocessor(Preprocessor):
    """Images of any size -> float32 `(batch, image_size, image_size, channels)`, pixels 0-255.

    Resizes (bilinear) when the size differs and converts RGB <-> grayscale
    to `channels`; the models rescale pixels themselves. Raw inputs: a uint8
    or float array `(batch, h, w, c)` or `(h, w, c)`, or a list of such
    images of different sizes.

    Args:
        image_size: int. Side of the square model input.
        channels: int. 1 (grayscale) or 3 (RGB).

    Example:

    >>> import numpy as np
    >>> ImageClassifierPreprocessor(28, 1).encode(np.zeros((2, 56, 40, 3), "uint8")).shape
    (2, 28, 28, 1)
    """

    def __init__(self, image_size, channels=3, **kwargs):
        kwargs.pop("sequence_length", None)
        super().__init__(**kwargs)
        if not isinstance(image_size, int) or image_size < 1:
            raise ValueError(f"`image_size` must be a positive int. Received: image_size={image_size!r}")
        if channels not in (1, 3):
            raise ValueError(f"`channels` must be 1 or 3. Received: channels={channels!r}")
        self.image_size, self.channels = image_size, channels

    def is_raw(self, x):
        if isinstance(x, (list, tuple)):
            return len(x) > 0 and all(np.ndim(image) == 3 for image in x)
        return isinstance(x, (np.ndarray, tf.Tensor)) and len(x.shape) in (3, 4)

    def _raw_tensor(self, x):
        if isinstance(x, (list, tuple)):  # images of different sizes: resize one by one
            images = [tf.convert_to_tensor(image) for image in x]
            for i, image in enumerate(images):
                _check_image_shape(f"images[{i}]", tuple(image.shape), batched=False)
                _check_finite_pixels(f"images[{i}]", image)
            return tf.stack([self.inputs(image[None])[0] for image in images])
        x = tf.convert_to_tensor(x)
        if x.shape.rank == 3:
            x = x[None]
        _check_image_shape("images", tuple(x.shape), batched=True)
        _check_finite_pixels("images", x)
        return x

    def inputs(self, x):
        """Images `(batch, h, w, 1, 3 or 4)` -> float32 `(batch, image_size, image_size, channels)`.

        A fourth (alpha) channel is dropped, as the served graph's PNG decoding does.
        """
        x = tf.cast(x, tf.float32)
        if x.shape[-1] == 4:
            x = x[..., :3]
        size = [self.image_size, self.image_size]
        if x.shape[1:3] != size:
            x = tf.image.resize(x, size)
        if self.channels == 1 and x.shape[-1] == 3:
            x = tf.image.rgb_to_grayscale(x)
        elif self.channels == 3 and x.shape[-1] == 1:
            x = tf.image.grayscale_to_rgb(x)
        return x

    def dataset(self, x, y=None, sample_weight=None, *, batch_size=32, shuffle=False, seed=0,
                augment=None):
        """As `Preprocessor.dataset`; `augment` (a Keras preprocessing `Pipeline`) runs on training batches."""
        ds = super().dataset(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, seed=seed)
        if augment is not None:
            ds = ds.map(without_autograph(lambda x, *rest: (augment(x, training=True), *rest)))
        return ds

    def get_config(self):
        config = super().get_config()
        del config["sequence_length"]
        return {**config, "image_size": self.image_size, "channels": self.channels}


def _check_image_shape(name, shape, batched):
    """A ValueError naming `name` unless `shape` is `([batch,] height >= 1, width >= 1, 1, 3 or 4)`."""
    rank = 4 if batched else 3
    what = f"{'(batch, ' if batched else '('}height, width, channels) with channels 1, 3 or 4 (RGBA: alpha dropped)"
    if len(shape) != rank or shape[-1] not in (1, 3, 4):
        raise ValueError(f"`{name}` must be {what}. Received: {name}.shape={tuple(shape)}")
    if 0 in tuple(shape)[-3:-1]:
        raise ValueError(f"`{name}` is empty ({shape[-3]}x{shape[-2]} pixels): expected at least 1x1. Received: "
                         f"{name}.shape={tuple(shape)}")


def _check_finite_pixels(name, image):
    """A ValueError naming `name` when a float image holds NaN or infinite pixels (no class is right)."""
    if image.dtype.is_floating and not bool(tf.reduce_all(tf.math.is_finite(image))):
        bad = int(tf.size(image)) - int(tf.reduce_sum(tf.cast(tf.math.is_finite(image), tf.int32)))
        raise ValueError(f"`{name}` must hold finite pixels: {bad} are NaN or infinite. Received: "
                         f"{name}.shape={tuple(image.shape)}")
