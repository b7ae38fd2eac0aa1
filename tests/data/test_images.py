import gzip
import io
import os
import pathlib
import sys
import tarfile

import keras
import numpy as np
import pytest

from kformer.data import images
from kformer.data.augmentation import augmentation
from kformer.data.preprocessors import ImageClassifierPreprocessor

# The full data sets, where a machine has them: KFORMER_DATA_DIR=/path/to/data (laid out as data/).
FULL_DATA_DIR = pathlib.Path(os.environ.get("KFORMER_DATA_DIR", "/nonexistent"))
needs_full_data = pytest.mark.skipif(not (FULL_DATA_DIR / "cifar10").is_dir(),
                                     reason=f"full data not at {FULL_DATA_DIR}")


@pytest.mark.parametrize("dataset, split, per_class", [
    ("cifar10", "train", 200), ("cifar10", "test", 100), ("mnist", "train", 200), ("mnist", "test", 50)])
@pytest.mark.once("file reading and JPEG decoding in tf.data")
def test_bundled_samples_are_balanced_uint8(dataset, split, per_class):
    x, y = images.load_split(split, dataset)
    assert x.dtype == np.uint8 and y.dtype == np.int32
    assert x.shape == (10 * per_class, *images.IMAGE_SHAPES[dataset])
    assert np.bincount(y).tolist() == [per_class] * 10
    assert len(images.CLASS_NAMES[dataset]) == 10 and 20 < x.mean() < 140


@pytest.mark.once("file reading, numpy only")
def test_exact_mnist_test_pixels_match_the_tone_mapped_ones():
    x, y = images.load_split("test", "mnist")
    exact_x, exact_y = images.load_split("test", "mnist", exact_test=True)
    np.testing.assert_array_equal(exact_y, y)
    assert np.abs(exact_x.astype(int) - x).mean() < 3  # tone curve only, same digits


@pytest.mark.once("file reading and numpy")
def test_max_examples_is_a_balanced_prefix():
    x, y = images.load_split("train", "cifar10")
    few_x, few_y = images.load_split("train", "cifar10", max_examples=35)
    np.testing.assert_array_equal(few_x, x[:35])
    assert sorted(np.bincount(few_y).tolist()) == [3] * 5 + [4] * 5
    unbalanced = np.array([0] * 50 + [1] * 5 + [2] * 20)
    counts = np.bincount(unbalanced[images.balanced_order(unbalanced)[:12]])
    assert counts.tolist() == [4, 4, 4]


@needs_full_data
@pytest.mark.once("file reading and numpy")
def test_bundled_samples_are_copies_of_the_full_files():
    for split in ("test",):  # the full train tarball takes ~5 s more
        x, y = images.load_split(split, "cifar10")
        full_x, full_y = images.load_split(split, "cifar10", data_dir=FULL_DATA_DIR)
        full = {(image.tobytes(), label) for image, label in zip(full_x, full_y)}
        assert all((image.tobytes(), label) in full for image, label in zip(x, y))
    sample = np.load(images.BUNDLED_DATA_DIR / "mnist" / images.MNIST_NPZ)
    full = np.load(FULL_DATA_DIR / "mnist" / images.MNIST_NPZ)
    for split in ("train", "test"):
        index = sample[f"{split}_index"]
        np.testing.assert_array_equal(sample[f"x_{split}"], full[f"x_{split}"][index])
        np.testing.assert_array_equal(sample[f"y_{split}"], full[f"y_{split}"][index])
    exact_x, _ = images.load_split("test", "mnist", exact_test=True)
    full_exact, _ = images.load_split("test", "mnist", FULL_DATA_DIR, exact_test=True)
    assert {row.tobytes() for row in exact_x} <= {row.tobytes() for row in full_exact}


def shift_of(source, output, max_shift, flips=(False,)):
    """(dy, dx, flipped) such that `output` is `source` moved by (dy, dx) with zero fill, else None."""
    height, width = source.shape[:2]
    for flipped in flips:
        image = source[:, ::-1] if flipped else source
        for dy in range(-max_shift, max_shift + 1):
            for dx in range(-max_shift, max_shift + 1):
                moved = np.zeros_like(image)
                moved[max(dy, 0):height + min(dy, 0), max(dx, 0):width + min(dx, 0)] = \
                    image[max(-dy, 0):height + min(-dy, 0), max(-dx, 0):width + min(-dx, 0)]
                if np.array_equal(moved, output):
                    return dy, dx, flipped
    return None


def test_cifar_augmentation_shifts_and_flips_exact_pixels():
    x = images.load_split("test", "cifar10", max_examples=16)[0].astype("float32")
    augment = augmentation("cifar10", seed=1)
    out = keras.ops.convert_to_numpy(augment(x, training=True))
    assert out.shape == x.shape and out.dtype == np.float32 and not np.array_equal(out, x)
    moves = [shift_of(a, b, 4, flips=(False, True)) for a, b in zip(x, out)]
    assert None not in moves and any(flipped for _, _, flipped in moves)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(augment(x, training=False)), x)


def test_mnist_augmentation_only_shifts_never_flips():
    x = images.load_split("test", "mnist", max_examples=32)[0].astype("float32")
    ds = ImageClassifierPreprocessor(28, 1).dataset(x.astype("uint8"), np.zeros(32), batch_size=32,
                                                    augment=augmentation("mnist"))
    out = next(iter(ds))[0].numpy()
    assert out.shape == (32, 28, 28, 1) and out.dtype == np.float32 and not np.array_equal(out, x)
    moves = [shift_of(a, b, 2) for a, b in zip(x, out)]
    assert None not in moves  # a mirrored digit is not a shifted one
    assert len(set(moves)) > 1  # each image gets its own shift


def test_preprocessor_dataset_batches_float_images_and_int_labels():
    x, y = images.load_split("test", "cifar10", max_examples=10)
    preprocessor = ImageClassifierPreprocessor(32, 3)
    batches = list(preprocessor.dataset(x, y, batch_size=4))
    assert [b[0].shape for b in batches] == [(4, 32, 32, 3), (4, 32, 32, 3), (2, 32, 32, 3)]
    assert batches[0][0].dtype == "float32" and batches[0][1].dtype == "int32"
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), x)
    shuffled = list(preprocessor.dataset(x, y, batch_size=4, shuffle=True,
                                         augment=augmentation("cifar10")))
    assert sorted(np.concatenate([b[1].numpy() for b in shuffled])) == sorted(y)
    assert shuffled[0][0].shape == (4, 32, 32, 3) and shuffled[0][0].dtype == "float32"
    with pytest.raises(ValueError, match="`y` has 3 rows but `x` has 10"):
        preprocessor.dataset(x, y[:3], batch_size=4)


@pytest.mark.once("file reading and its errors")
def test_missing_and_corrupt_files_name_the_path(tmp_path):
    tar_path = tmp_path / "cifar10" / "cifar10_train_jpg.tar.gz"
    with pytest.raises(ValueError, match=f"not found: {tar_path}"):
        images.load_split("train", "cifar10", tmp_path)
    tar_path.parent.mkdir()
    tar_path.write_bytes(b"not a tarball")
    with pytest.raises(ValueError, match=f"Corrupt CIFAR-10 file {tar_path}"):
        images.load_split("train", "cifar10", tmp_path)
    for name, data, message in [("train/cat/0.jpg", b"not a jpeg", "32x32 RGB JPEGs"),
                                ("test/cat/0.jpg", b"", "unexpected member 'test/cat/0.jpg'")]:
        write_tar(tar_path, {name: data})
        with pytest.raises(ValueError, match=message):
            images.load_split("train", "cifar10", tmp_path)
    npz_path = tmp_path / "mnist" / images.MNIST_NPZ
    with pytest.raises(ValueError, match=f"not found: {npz_path}"):
        images.load_split("test", "mnist", tmp_path)
    npz_path.parent.mkdir()
    np.savez(npz_path, x_test=np.zeros((2, 28, 28), "float32"), y_test=np.zeros(2))
    with pytest.raises(ValueError, match="Corrupt MNIST file .* Received: images float32"):
        images.load_split("test", "mnist", tmp_path)
    with pytest.raises(ValueError, match="KeyError: 'x_train is not a file"):
        images.load_split("train", "mnist", tmp_path)
    (tmp_path / "mnist" / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\0\0\x08\x01"))
    with pytest.raises(ValueError, match="t10k-images-idx3-ubyte.gz: expected a gzipped IDX"):
        images.load_split("test", "mnist", tmp_path, exact_test=True)


@pytest.mark.once("file reading, Pillow and tf.data decoding")
def test_without_tensorflow_pillow_decodes_the_same_cifar_pixels(monkeypatch, tmp_path):
    with_tf = images.load_split("test", "cifar10", max_examples=200)
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # `import tensorflow` fails
    without_tf = images.load_split("test", "cifar10", max_examples=200)
    np.testing.assert_array_equal(without_tf[0], with_tf[0])
    np.testing.assert_array_equal(without_tf[1], with_tf[1])
    tar_path = tmp_path / "cifar10" / "cifar10_train_jpg.tar.gz"
    tar_path.parent.mkdir()
    write_tar(tar_path, {"train/cat/0.jpg": b"not a jpeg"})
    with pytest.raises(ValueError, match=f"Corrupt CIFAR-10 file {tar_path}: expected 32x32 RGB JPEGs"):
        images.load_split("train", "cifar10", tmp_path)


def write_tar(path, files):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("kwargs, message", [
    (dict(dataset="cifar100", split="train"), "dataset='cifar100'"),
    (dict(dataset="mnist", split="valid"), "split='valid'"),
    (dict(dataset="mnist", split="train", max_examples=0), "max_examples=0"),
    (dict(dataset="cifar10", split="test", exact_test=True), "dataset='cifar10'"),
])
@pytest.mark.once("argument check before any backend code")
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        images.load_split(**kwargs)


@pytest.mark.once("argument check before any backend code")
def test_bad_names_for_augmentation_and_tfds():
    with pytest.raises(ValueError, match="dataset='imagenet'"):
        augmentation("imagenet")
    with pytest.raises(ValueError, match="split='validation'"):
        images.load_split_tfds("validation", "mnist")


@pytest.mark.parametrize("name", images.DATASETS)
@pytest.mark.once("tensorflow_datasets and numpy")
def test_tfds_path_with_mock_data(name):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=12):  # offline; needs no importlib_resources
        x, y = images.load_split_tfds("train", name, max_examples=5)
    assert x.shape == (5, *images.IMAGE_SHAPES[name]) and x.dtype == np.uint8
    assert y.dtype == np.int32 and 0 <= y.min() and y.max() < 10


@pytest.mark.once("tensorflow_datasets error handling")
def test_tfds_names_a_missing_dependency(monkeypatch):
    tfds = pytest.importorskip("tensorflow_datasets")

    def load(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'importlib_resources'", name="importlib_resources")

    monkeypatch.setattr(tfds, "load", load)
    with pytest.raises(ImportError, match="pip install importlib_resources"):
        images.load_split_tfds("test", "mnist")
