"""IMDB movie reviews: JSON Lines files -> cleaned texts and labels -> tf.data.

Files are `<data_dir>/imdb/{train,test,unsup}.jsonl.gz`, one
`{"id", "label", "rating", "text"}` object a line (see data/README.md). The
repository bundles a 5,000 train / 2,000 test / 3,000 unlabeled sample; pass
the full set's directory as `data_dir` for 25,000 / 25,000 / 50,000, or
use `load_split_tfds` to read TFDS's `imdb_reviews` (downloads when online).

Short-text proxies (`first_sentences`, `random_crops`) cut reviews down to
the one-sentence inputs users type, to measure a classifier trained on whole
reviews on short ones. They are proxies: a review's first sentence or a
random crop of it does not always carry the review's sentiment ("I saw this
at a festival."), so their accuracy is a lower bound on short, opinionated text.
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
# A candidate sentence end: a run of terminators, closing quotes or brackets, then a space or the end.
_END = re.compile(r"([.!?\u2026]+)([\"'\u201d\u2019)\]]*)(?=\s|$)")
# Words whose "." never ends a sentence (compared without case and without their inner dots).
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "mt", "lt", "col", "gen",
                           "capt", "sgt", "rev", "hon", "fr", "ie", "eg", "cf", "approx", "dept", "vol"})


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


def first_sentence(text):
    """The first sentence of a review (raw or cleaned), whitespace collapsed.

    Rules, in order:

    1. A line break (`<br />`, any case) ends a sentence: the first paragraph
       holding a letter or digit is read.
    2. A sentence ends at a run of `.`, `!`, `?` or `…` (so `...`, `?!` and
       `!!!` are one end), with the closing quotes or brackets right after it
       (`"'”’)]`), followed by a space or the end of the text.
    3. A single `.` does not end a sentence after an abbreviation in
       `ABBREVIATIONS` (`Mr.`, `Dr.`, `vs.`, `e.g.` ...) or after an initial: one
       capital letter (`J. R. R. Tolkien`) or dotted letters (`U.S.`).
    4. An end other than a bare single `.` (an ellipsis, `!`/`?` runs, an end
       inside quotes) does not end a sentence when the next word starts with a
       lowercase letter: `It was... okay.`, `"Wow!" he said.` A bare `.` does,
       whatever follows (reviews written in lowercase still split).
    5. A sentence holds at least one letter or digit: leading `...` or `!!!` join
       the first sentence.

    Without any end, the whole (first) paragraph is the sentence.

    Args:
        text: str. A review.

    Example:

    >>> first_sentence('Mr. Smith\\'s "Wow!" was great... really. Then it dragged.')
    'Mr. Smith\\'s "Wow!" was great... really.'
    >>> first_sentence("A fine film<br /><br />Really great.")
    'A fine film'
    """
    paragraphs = [p for p in _BREAK.split(text) if re.search(r"\w", p)]
    text = " ".join(paragraphs[0].split()) if paragraphs else " ".join(_BREAK.sub(" ", text).split())
    for match in _END.finditer(text):
        before = text[:match.start()]
        if not re.search(r"\w", before):
            continue  # rule 5
        terminator, closing = match.group(1), match.group(2)
        if terminator == "." and not closing:
            word = before.rsplit(None, 1)[-1].lstrip("\"'\u201c\u2018([")
            if (word.replace(".", "").lower() in ABBREVIATIONS or re.fullmatch(r"[A-Z]", word)
                    or re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]", word)):
                continue  # rule 3
        else:
            following = text[match.end():].lstrip()
            if following[:1].islower():
                continue  # rule 4
        return text[:match.end()]
    return text


def first_sentences(texts, labels):
    """Each review cut to its first sentence (`first_sentence`): returns (texts: list[str], labels: int32 array).

    A proxy for one-sentence reviews: the first sentence does not always carry
    the review's sentiment (it often names the film or sets the scene).

    Args:
        texts: list of str. Reviews, raw or cleaned.
        labels: int array `(n,)`, passed through.

    Example:

    >>> first_sentences(["Dull. Avoid it.", "Great fun!"], [0, 1])
    (['Dull.', 'Great fun!'], array([0, 1], dtype=int32))
    """
    return [first_sentence(t) for t in texts], _labels_for(texts, labels)


def random_crops(texts, labels, min_words=10, max_words=30, seed=0):
    """A random window of `min_words` to `max_words` consecutive words of each review.

    Deterministic: the window of review `i` depends only on `seed`, `i` and
    its word count (two uniform draws a review, in order), so a prefix of
    `texts` gets the same crops. A review of at most the drawn length is kept whole. Words are
    whitespace-separated, after `clean_text`.

    Args:
        texts: list of str. Reviews, raw or cleaned.
        labels: int array `(n,)`, passed through.
        min_words, max_words: ints, `1 <= min_words <= max_words`. Defaults to `10` and `30`.
        seed: int. Defaults to `0`.

    Returns:
        (texts: list[str], labels: int32 array).

    Example:

    >>> crops, _ = random_crops(["one two three", " ".join(["w"] * 100)], [0, 1])
    >>> crops[0], 10 <= len(crops[1].split()) <= 30
    ('one two three', True)
    """
    if not (isinstance(min_words, int) and isinstance(max_words, int) and 1 <= min_words <= max_words):
        raise ValueError(f"Expected integers 1 <= min_words <= max_words. Received: min_words={min_words!r}, "
                         f"max_words={max_words!r}")
    draws = np.random.default_rng(seed).random((len(texts), 2))  # row i: review i's length and offset
    crops = []
    for text, (length_draw, offset) in zip(texts, draws):
        length = min_words + min(int(length_draw * (max_words - min_words + 1)), max_words - min_words)
        words = clean_text(text).split()
        start = int(offset * (max(len(words) - length, 0) + 1))
        crops.append(" ".join(words[start:start + length]))
    return crops, _labels_for(texts, labels)


def _labels_for(texts, labels):
    labels = np.asarray(labels, "int32")
    if labels.shape != (len(texts),):
        raise ValueError(f"Expected one label per text. Received: {len(texts)} texts and labels of shape "
                         f"{labels.shape}")
    return labels


def random_token_windows(dataset, probability, min_tokens=8, max_tokens=64, seed=0):
    """Replace rows of a batched token-id dataset by random windows of their own tokens, anew every epoch.

    Training augmentation for short inputs (`random_crops` cuts words once; this
    draws new windows each time the dataset is iterated, so they cannot be
    memorized). Each row of `token_ids` (0-padded at the end) is, with
    `probability`, replaced by `min_tokens` to `max_tokens` consecutive tokens
    of its own, moved to the front and 0-padded; a row holding fewer tokens
    than the drawn length is kept whole. Labels pass through.

    Args:
        dataset: `tf.data.Dataset` of `(token_ids, labels, ...)` batches, as
            `TextClassifierPreprocessor.dataset` gives.
        probability: float in [0, 1]. The share of rows replaced.
        min_tokens, max_tokens: ints, `1 <= min_tokens <= max_tokens`. Defaults to `8` and `64`.
        seed: int. Defaults to `0`.

    Returns:
        The mapped `tf.data.Dataset`.

    Example:

    >>> import tensorflow as tf
    >>> ds = tf.data.Dataset.from_tensors((tf.constant([[5, 6, 7, 8, 0, 0]]), tf.constant([1])))
    >>> ids, labels = next(iter(random_token_windows(ds, 1.0, 2, 2)))
    >>> int(tf.math.count_nonzero(ids)), labels.numpy().tolist()
    (2, [1])
    """
    import tensorflow as tf

    if not (isinstance(min_tokens, int) and isinstance(max_tokens, int) and 1 <= min_tokens <= max_tokens):
        raise ValueError(f"Expected integers 1 <= min_tokens <= max_tokens. Received: min_tokens={min_tokens!r}, "
                         f"max_tokens={max_tokens!r}")
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"`probability` must be in [0, 1]. Received: probability={probability!r}")

    def window(ids, seeds):
        draws = tf.random.stateless_uniform([tf.shape(ids)[0], 3], seeds)  # row: replace?, length, offset
        real = tf.math.count_nonzero(ids, axis=1, dtype="int32")
        length = min_tokens + tf.cast(draws[:, 1] * (max_tokens - min_tokens + 1), "int32")
        length = tf.minimum(tf.minimum(length, max_tokens), real)
        start = tf.cast(draws[:, 2] * tf.cast(real - length + 1, "float32"), "int32")
        start = tf.minimum(start, real - length)
        steps = tf.range(tf.shape(ids)[1])
        windows = tf.gather(ids, tf.minimum(start[:, None] + steps, tf.shape(ids)[1] - 1), batch_dims=1)
        windows = tf.where(steps[None, :] < length[:, None], windows, tf.zeros_like(windows))
        return tf.where((draws[:, :1] < probability), windows, ids)

    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    return tf.data.Dataset.zip(dataset, seeds).map(lambda batch, s: (window(batch[0], s), *batch[1:]))
