"""IMDB movie reviews: JSON Lines files -> cleaned texts and labels -> tf.data.

Files are `<data_dir>/imdb/{train,test,unsup}.jsonl.gz`, one
`{"id", "label", "rating", "text"}` object a line (see data/README.md). The
repository bundles a 5,000 train / 2,000 test / 3,000 unlabeled sample; pass
the full set's directory as `data_dir` for 25,000 / 25,000 / 50,000, or
use `load_split_tfds` to read TFDS's `imdb_reviews` (downloads when online).
"""

import json
import pathlib
import re

import numpy as np

from kformer.data.checks import check_max_examples, check_one_of
from kformer.data.files import read_gzip_lines
from kformer.data.subsets import balanced_order

BUNDLED_DATA_DIR = pathlib.Path(__file__).resolve().parents[2] / "data"
SPLITS = ("train", "test", "unsup")
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)


def clean_text(text):
    """Replace the HTML line breaks (`<br />`) of the raw reviews by spaces.

    Args:
        text: str. A raw review.

    Example:

    >>> clean_text("Great.<br /><br />Really  great.")
    'Great. Really great.'
    """
    return " ".join(_BREAK.sub(" ", text).split())


def load_split(split, data_dir=None, max_examples=None):
    """Read one split: returns (texts: list[str], labels: int32 array).

    With `max_examples`, a fixed class-balanced subset, in file order.

    Args:
        split: str. `"train"`, `"test"` or `"unsup"` (the 50k unlabeled reviews, label -1).
        data_dir: path. Holds `imdb/<split>.jsonl.gz`. Defaults to the bundled sample.
        max_examples: int. Keep at most this many reviews. Defaults to all.

    Raises a ValueError naming the path when the file is missing or not the
    expected gzip JSON Lines.

    Example:

    >>> texts, labels = load_split("test", max_examples=4)
    >>> len(texts), sorted(labels.tolist())
    (4, [0, 0, 1, 1])
    """
    check_one_of("split", split, SPLITS)
    check_max_examples(max_examples)
    path = pathlib.Path(data_dir or BUNDLED_DATA_DIR) / "imdb" / f"{split}.jsonl.gz"
    if not path.is_file():
        raise ValueError(
            f"IMDB file not found: {path}. Expected `<data_dir>/imdb/{split}.jsonl.gz` "
            "(gzip JSON Lines with 'text' and 'label'); see data/README.md."
        )
    allowed = (-1,) if split == "unsup" else (0, 1)
    rows = read_gzip_lines(path, lambda line, number: _parse_review(line, allowed), name="IMDB",
                           expected=f"gzip JSON Lines objects with 'text' and an integer 'label' in {allowed}",
                           errors=(ValueError, KeyError, TypeError))
    texts = [text for text, _ in rows]
    labels = np.asarray([label for _, label in rows], "int32")
    if max_examples:  # the files are sorted by label: take a fixed, class-balanced subset
        keep = np.sort(balanced_order(labels)[:max_examples])
        texts, labels = [texts[i] for i in keep], labels[keep]
    return texts, labels


def _parse_review(line, allowed):
    row = json.loads(line)
    label = row["label"]
    if isinstance(label, bool) or not isinstance(label, int) or label not in allowed:
        raise ValueError(f"label {label!r} is not one of {allowed}")
    return clean_text(row["text"]), label


def load_split_tfds(split, max_examples=None):
    """Like `load_split`, but from TFDS's `imdb_reviews` (downloads on first use).

    `split` is one of `SPLITS` ("unsup" reads TFDS's "unsupervised", whose
    labels are -1). Returns (texts: list[str], labels: int32 array).

    Args:
        split: str. `"train"`, `"test"` or `"unsup"`.
        max_examples: int. Keep at most this many. Defaults to all.

    Example:

    >>> import tensorflow_datasets as tfds
    >>> with tfds.testing.mock_data(num_examples=3):
    ...     texts, labels = load_split_tfds("train")
    >>> len(texts)
    3
    """
    check_one_of("split", split, SPLITS)
    check_max_examples(max_examples)
    import tensorflow_datasets as tfds

    tfds_split = {"unsup": "unsupervised"}.get(split, split)
    try:
        ds = tfds.load("imdb_reviews", split=tfds_split, as_supervised=True)
    except ModuleNotFoundError as err:
        raise ImportError(f"tensorflow_datasets needs the missing package {err.name!r} "
                          f"to load 'imdb_reviews': pip install {err.name}") from err
    if max_examples:
        ds = ds.take(max_examples)
    texts, labels = [], []
    for text, label in tfds.as_numpy(ds):
        texts.append(clean_text(text.decode("utf-8")))
        labels.append(int(label))
    if not texts:
        raise ValueError(f"TFDS imdb_reviews split {tfds_split!r} holds no reviews.")
    return texts, np.asarray(labels, "int32")


def train_validation_split(texts, labels, validation_fraction=0.1, seed=0):
    """Shuffle with a fixed seed and carve a validation split off the end.

    Args:
        texts: list of str.
        labels: int array `(n,)`.
        validation_fraction: float in (0, 1). Defaults to `0.1`.
        seed: int. Defaults to `0`.

    Returns:
        `((train_texts, train_labels), (validation_texts, validation_labels))`.

    Example:

    >>> import numpy as np
    >>> (train, _), (validation, _) = train_validation_split(list("abcdefghij"), np.arange(10))
    >>> len(train), len(validation)
    (9, 1)
    """
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(
            f"`validation_fraction` must be in (0, 1). Received: validation_fraction={validation_fraction}"
        )
    order = np.random.default_rng(seed).permutation(len(texts))
    cut = len(texts) - max(1, int(round(len(texts) * validation_fraction)))
    pick = lambda idx: ([texts[i] for i in idx], labels[idx])  # noqa: E731
    return pick(order[:cut]), pick(order[cut:])
