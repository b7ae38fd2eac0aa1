"""CIFAR-10 and MNIST: bundled or full files -> uint8 arrays (augmentation: `kformer.data.augmentation`).

Files (see data/README.md; the repository bundles small samples laid out the same way):

* `<data_dir>/cifar10/cifar10_{train,test}_jpg.tar.gz`: `<split>/<class>/NNNN.jpg`,
  32x32 RGB JPEGs, read straight from the tarball and decoded with TensorFlow.
* `<data_dir>/mnist/mnist_tsuga_png_tonemapped.npz`: `x_train`, `y_train`, `x_test`,
  `y_test` (pixels slightly tone-mapped). The exact MNIST test pixels are in
  `<data_dir>/mnist/t10k-{images-idx3,labels-idx1}-ubyte.gz` (`exact_test=True`).

Images stay uint8 here; `ImageClassifierPreprocessor` (`kformer.data.preprocessors`)
makes float32 0..255 batches of the model's size, and the ViT models rescale
by 1/255 themselves.
"""

import gzip
import os
import pathlib
import struct
import tarfile
import zipfile

import numpy as np

from kformer.data.checks import check_max_examples, check_one_of
from kformer.data.subsets import balanced_order

BUNDLED_DATA_DIR = pathlib.Path(__file__).resolve().parents[2] / "data"
DATASETS = ("cifar10", "mnist")
SPLITS = ("train", "test")
CLASS_NAMES = {
    "cifar10": ("airplane", "automobile", "bird", "cat", "deer",
                "dog", "frog", "horse", "ship", "truck"),
    "mnist": tuple(str(digit) for digit in range(10)),
}
IMAGE_SHAPES = {"cifar10": (32, 32, 3), "mnist": (28, 28, 1)}
MNIST_NPZ = "mnist_tsuga_png_tonemapped.npz"


def _check_args(dataset, split, max_examples=None):
    check_one_of("dataset", dataset, DATASETS)
    check_one_of("split", split, SPLITS)
    check_max_examples(max_examples)


def load_split(split, dataset="mnist", data_dir=None, max_examples=None, exact_test=False):
    """Read one split: returns `(images: uint8 (n, h, w, c), labels: int32 (n,))`.

    Rows come in `balanced_order` (seed 0), so `max_examples` keeps the first n
    and the classes stay balanced. CIFAR-10 gives `(n, 32, 32, 3)`, MNIST
    `(n, 28, 28, 1)`.

    Args:
        split: str. `"train"` or `"test"`.
        dataset: str. `"mnist"` (the default) or `"cifar10"`.
        data_dir: path. Holds `cifar10/` and `mnist/`. Defaults to the bundled
            samples in the repository's `data/`.
        max_examples: int. Keep only this many rows. Defaults to all.
        exact_test: bool. MNIST test only: read the exact original pixels from
            the t10k IDX files instead of the tone-mapped npz. Defaults to `False`.

    Raises a ValueError naming the path when a file is missing or not what is expected.

    Example:

    >>> images, labels = load_split("test", dataset="cifar10", max_examples=4)
    >>> images.shape, images.dtype.name, len(set(labels.tolist()))  # balanced: 4 classes
    ((4, 32, 32, 3), 'uint8', 4)
    """
    _check_args(dataset, split, max_examples)
    if exact_test and (dataset, split) != ("mnist", "test"):
        raise ValueError("`exact_test=True` needs dataset='mnist', split='test'. "
                         f"Received: dataset={dataset!r}, split={split!r}")
    folder = pathlib.Path(data_dir or BUNDLED_DATA_DIR) / dataset
    if dataset == "cifar10":
        path = folder / f"cifar10_{split}_jpg.tar.gz"
        blobs, labels = _read_cifar_tar(path, split)
        order = balanced_order(labels)[:max_examples]
        return _decode_jpegs([blobs[i] for i in order], path), labels[order]
    if exact_test:
        images, labels = _read_mnist_idx(folder)
    else:
        images, labels = _read_mnist_npz(folder / MNIST_NPZ, split)
    order = balanced_order(labels)[:max_examples]
    return images[order], labels[order]


def _read_cifar_tar(path, split):
    """JPEG bytes and labels of every `<split>/<class>/*.jpg` member, in tar order."""
    expected = f"`<data_dir>/cifar10/{path.name}`, a tar.gz of {split}/<class>/*.jpg"
    if not path.is_file():
        raise ValueError(f"CIFAR-10 file not found: {path}. Expected {expected}; "
                         "see data/README.md.")
    classes = {name: index for index, name in enumerate(CLASS_NAMES["cifar10"])}
    blobs, labels = [], []
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                parts = member.name.split("/")
                if len(parts) != 3 or parts[0] != split or parts[1] not in classes:
                    raise ValueError(f"unexpected member {member.name!r}")
                blobs.append(tar.extractfile(member).read())
                labels.append(classes[parts[1]])
    except (OSError, EOFError, tarfile.TarError, ValueError) as err:
        raise ValueError(f"Corrupt CIFAR-10 file {path}: expected {expected} "
                         f"({type(err).__name__}: {err})") from err
    if not blobs:
        raise ValueError(f"CIFAR-10 file {path} holds no images. Expected {expected}.")
    return blobs, np.asarray(labels, "int32")


def _decode_jpegs(blobs, path):
    """Decode 32x32 RGB JPEG bytes in parallel with tf.data -> uint8 `(n, 32, 32, 3)`.

    Without TensorFlow (a JAX- or torch-only machine), Pillow decodes them: the
    same pixels, since both use libjpeg's accurate integer DCT.
    """
    try:
        import tensorflow as tf
    except ImportError:
        return _decode_jpegs_with_pillow(blobs, path)

    def decode(blob):  # INTEGER_ACCURATE gives the same pixels as Pillow / libjpeg
        image = tf.io.decode_jpeg(blob, channels=3, dct_method="INTEGER_ACCURATE")
        return tf.ensure_shape(image, IMAGE_SHAPES["cifar10"])

    from kformer.data.pipeline import data_options, without_autograph

    ds = tf.data.Dataset.from_tensor_slices(tf.constant(blobs, tf.string))
    ds = ds.map(without_autograph(decode), num_parallel_calls=os.cpu_count() or 1, deterministic=True)
    ds = ds.batch(4096).with_options(data_options())
    try:
        return np.concatenate([batch.numpy() for batch in ds])
    except tf.errors.OpError as err:
        raise ValueError(f"Corrupt CIFAR-10 file {path}: expected 32x32 RGB JPEGs "
                         f"({type(err).__name__}: {err.message.splitlines()[0]})") from err


def _decode_jpegs_with_pillow(blobs, path):
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as err:
        raise ImportError("Reading CIFAR-10 JPEGs needs TensorFlow or Pillow: pip install pillow") from err
    import io

    decoded = np.empty((len(blobs), *IMAGE_SHAPES["cifar10"]), "uint8")
    for i, blob in enumerate(blobs):
        try:
            with Image.open(io.BytesIO(blob)) as image:
                decoded[i] = np.asarray(image.convert("RGB"))
        except (OSError, UnidentifiedImageError, ValueError) as err:
            raise ValueError(f"Corrupt CIFAR-10 file {path}: expected 32x32 RGB JPEGs "
                             f"(image {i}: {type(err).__name__}: {err})") from err
    return decoded


def _read_mnist_npz(path, split):
    """`x_<split>` and `y_<split>` of the MNIST npz -> uint8 `(n, 28, 28, 1)`, int32 `(n,)`."""
    expected = f"an npz with x_{split} uint8 (n, 28, 28) and y_{split} (n,) digits 0-9"
    if not path.is_file():
        raise ValueError(f"MNIST file not found: {path}. Expected {expected}; see data/README.md.")
    try:
        with np.load(path) as npz:
            images, labels = npz[f"x_{split}"], npz[f"y_{split}"]
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise ValueError(f"Corrupt MNIST file {path}: expected {expected} "
                         f"({type(err).__name__}: {err})") from err
    return _check_mnist(images, labels, path, expected)


def _check_mnist(images, labels, path, expected):
    if (images.dtype != np.uint8 or images.shape[1:] != (28, 28) or labels.shape != images.shape[:1]
            or not len(labels) or labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"Corrupt MNIST file {path}: expected {expected}. Received: "
                         f"images {images.dtype} {images.shape}, labels {labels.shape}")
    return images[..., None], labels.astype("int32")


def _read_mnist_idx(folder):
    """The exact t10k test images and labels (LeCun's IDX format, gzipped)."""
    images = _read_idx(folder / "t10k-images-idx3-ubyte.gz", magic=2051, dims=3)
    labels = _read_idx(folder / "t10k-labels-idx1-ubyte.gz", magic=2049, dims=1)
    return _check_mnist(images, labels, folder / "t10k-*-ubyte.gz",
                        "matching t10k images (n, 28, 28) and labels (n,)")


def _read_idx(path, magic, dims):
    expected = f"a gzipped IDX file with magic number {magic} and {dims} dimension(s)"
    if not path.is_file():
        raise ValueError(f"MNIST file not found: {path}. Expected {expected}; see data/README.md.")
    try:
        with gzip.open(path, "rb") as file:
            data = file.read()
        header = struct.unpack(f">{1 + dims}I", data[: 4 * (1 + dims)])
        if header[0] != magic:
            raise ValueError(f"magic number {header[0]}")
        return np.frombuffer(data, np.uint8, offset=4 * (1 + dims)).reshape(header[1:])
    except (OSError, EOFError, ValueError, struct.error) as err:
        raise ValueError(f"Corrupt MNIST file {path}: expected {expected} "
                         f"({type(err).__name__}: {err})") from err


def load_split_tfds(split, dataset="mnist", max_examples=None):
    """Like `load_split`, but from `tensorflow_datasets` (downloads when online).

    Returns `(images: uint8 (n, h, w, c), labels: int32 (n,))` in `balanced_order`.
    A real download needs the `importlib_resources` package (tfds imports it
    lazily); `tfds.testing.mock_data` works without it.

    Args:
        split: str. `"train"` or `"test"`.
        dataset: str. `"mnist"` or `"cifar10"` (the TFDS names).
        max_examples: int. Keep at most this many. Defaults to all.

    Example:

    >>> import tensorflow_datasets as tfds
    >>> with tfds.testing.mock_data(num_examples=4):
    ...     images, labels = load_split_tfds("test", "mnist")
    >>> images.shape
    (4, 28, 28, 1)
    """
    _check_args(dataset, split, max_examples)
    import tensorflow_datasets as tfds

    from kformer.data.pipeline import data_options

    try:
        ds = tfds.load(dataset, split=split, as_supervised=True).batch(4096)
        batches = list(tfds.as_numpy(ds.with_options(data_options())))
    except ModuleNotFoundError as err:
        raise ImportError(f"tensorflow_datasets needs the missing package {err.name!r} "
                          f"to load {dataset!r}: pip install {err.name}") from err
    images = np.concatenate([x for x, _ in batches]).astype("uint8")
    labels = np.concatenate([y for _, y in batches]).astype("int32")
    order = balanced_order(labels)[:max_examples]
    return images[order], labels[order]
