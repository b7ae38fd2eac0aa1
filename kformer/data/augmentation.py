"""Training augmentation for the image datasets of `kformer.data.images` (CIFAR-10, MNIST)."""

import keras

from kformer.data.checks import check_one_of
from kformer.data.images import DATASETS, IMAGE_SHAPES


def augmentation(dataset, seed=None):
    """Random training augmentation for ViT as a `keras.layers.Pipeline`.

    CIFAR-10: shift by up to 4 pixels with zero fill (= 4-pixel padding plus a
    random 32x32 crop, per image) and a horizontal flip. MNIST: shift by up to
    2 pixels, no flips (digits are not mirror-symmetric). Nearest-neighbour
    sampling keeps pixel values exact. Identity when called with `training=False`.

    A `Pipeline` rather than `keras.Sequential`: only a Pipeline of Keras
    preprocessing layers runs inside `tf.data.Dataset.map` on the JAX and
    torch backends (Sequential converts its inputs with the active backend).
    A shift instead of `ZeroPadding2D + RandomCrop`: ZeroPadding2D is not a
    preprocessing layer (fails in tf.data off TensorFlow), and RandomCrop picks
    one offset for a whole batch and passes the padded image through at inference.

    Args:
        dataset: str. `"cifar10"` or `"mnist"`.
        seed: int. Seed of the random layers. Defaults to None.

    Call arguments:
        images: float `(batch, h, w, c)` or `(h, w, c)`, any value range.
        training: bool. Defaults to `True`.

    Example:

    >>> import numpy as np
    >>> augment = augmentation("mnist", seed=0)
    >>> images = np.random.default_rng(0).uniform(0, 255, (2, 28, 28, 1)).astype("float32")
    >>> shifted = np.asarray(augment(images, training=True))
    >>> shifted.shape, bool(np.array_equal(np.asarray(augment(images, training=False)), images))
    ((2, 28, 28, 1), True)
    """
    check_one_of("dataset", dataset, DATASETS)
    pixels = 4 if dataset == "cifar10" else 2
    factor = pixels / IMAGE_SHAPES[dataset][0]
    steps = [keras.layers.RandomTranslation(factor, factor, fill_mode="constant",
                                            interpolation="nearest", seed=seed, name="shift")]
    if dataset == "cifar10":
        steps.append(keras.layers.RandomFlip("horizontal", seed=seed, name="flip"))
    return keras.layers.Pipeline(steps, name=f"{dataset}_augmentation")
