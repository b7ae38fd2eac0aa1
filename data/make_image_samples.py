"""Write the bundled CIFAR-10 and MNIST samples from the full files (fixed seed, byte-reproducible).

    python data/make_image_samples.py --source DATA --output data

CIFAR-10: 200 train / 100 test JPEGs per class, copied byte for byte with their
original member names into `cifar10/cifar10_{train,test}_jpg.tar.gz`.
MNIST: 200 train / 50 test images per digit, rows kept in original order, into
`mnist/mnist_tsuga_png_tonemapped.npz` (same keys plus `{train,test}_index`, the
original row numbers) and the same test rows, exact pixels, into
`mnist/t10k-{images-idx3,labels-idx1}-ubyte.gz`.
"""

import argparse
import gzip
import hashlib
import io
import pathlib
import struct
import tarfile

import numpy as np

CIFAR_PER_CLASS = {"train": 200, "test": 100}
MNIST_PER_CLASS = {"train": 200, "test": 50}
SEED = 0


def per_class_sample(labels, per_class, rng):
    """Sorted indices of `per_class` random rows of every label."""
    picks = [rng.choice(np.flatnonzero(labels == c), per_class, replace=False)
             for c in np.unique(labels)]
    return np.sort(np.concatenate(picks))


def sample_cifar(source, output, rng):
    for split, per_class in CIFAR_PER_CLASS.items():
        name = f"cifar10_{split}_jpg.tar.gz"
        with tarfile.open(source / "cifar10" / name, "r:gz") as tar:
            members = sorted((m for m in tar if m.isfile()), key=lambda m: m.name)
            classes = np.asarray([m.name.split("/")[1] for m in members])
            keep = [members[i] for i in per_class_sample(classes, per_class, rng)]
            files = {m.name: tar.extractfile(m).read() for m in keep}
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for member_name, data in files.items():
                info = tarfile.TarInfo(member_name)
                info.size, info.mode = len(data), 0o644  # mtime, uid, gid stay 0
                tar.addfile(info, io.BytesIO(data))
        write_gzip(output / "cifar10" / name, buffer.getvalue())


def sample_mnist(source, output, rng):
    full = np.load(source / "mnist" / "mnist_tsuga_png_tonemapped.npz")
    arrays = {}
    for split, per_class in MNIST_PER_CLASS.items():
        index = per_class_sample(full[f"y_{split}"], per_class, rng)
        arrays.update({f"x_{split}": full[f"x_{split}"][index],
                       f"y_{split}": full[f"y_{split}"][index], f"{split}_index": index})
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # zip entries carry a fixed date: reproducible
    (output / "mnist").mkdir(parents=True, exist_ok=True)
    (output / "mnist" / "mnist_tsuga_png_tonemapped.npz").write_bytes(buffer.getvalue())
    exact = read_idx(source / "mnist" / "t10k-images-idx3-ubyte.gz")[arrays["test_index"]]
    labels = read_idx(source / "mnist" / "t10k-labels-idx1-ubyte.gz")[arrays["test_index"]]
    assert (labels == arrays["y_test"]).all(), "npz and t10k labels disagree"
    write_gzip(output / "mnist" / "t10k-images-idx3-ubyte.gz",
               struct.pack(">4I", 2051, *exact.shape) + exact.tobytes())
    write_gzip(output / "mnist" / "t10k-labels-idx1-ubyte.gz",
               struct.pack(">2I", 2049, len(labels)) + labels.tobytes())


def read_idx(path):
    data = gzip.decompress(path.read_bytes())
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4 : 4 + 4 * dims])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def write_gzip(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(data)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, type=pathlib.Path, help="directory holding cifar10/ and mnist/")
    parser.add_argument("--output", default=pathlib.Path(__file__).parent, type=pathlib.Path)
    args = parser.parse_args(argv)
    sample_cifar(args.source, args.output, np.random.default_rng(SEED))
    sample_mnist(args.source, args.output, np.random.default_rng(SEED))
    for path in sorted(args.output.glob("*/*")):
        if path.parent.name in ("cifar10", "mnist"):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            print(f"{digest}  {path.stat().st_size:>9,}  {path}")


if __name__ == "__main__":
    main()
