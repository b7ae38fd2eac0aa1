"""Translation pairs (spa-eng, Multi30k, tfds): load a split as lists of source and target texts.

spa-eng (Tatoeba via manythings.org, English -> Spanish): the full
`<data_dir>/spa-eng/spa.txt.gz` holds 118,964 `English<TAB>Spanish` lines and
has no official split, so we fix one: shuffle the line indices with
`numpy.random.default_rng(0).permutation(n)` and take the first
`n * 90 // 100` as train, the next `n * 5 // 100` as validation and the rest as
test: 107,067 / 5,948 / 5,949 pairs. Tatoeba repeats English sentences
(102,904 distinct in 118,964 pairs), so that split puts some test sources in
train too; `split_by="source"` instead splits the distinct English sentences
the same way (every pair of a sentence in one split): 107,044 / 6,011 /
5,909 pairs, no test source seen in training (the pair split has 1,334 test
pairs whose English sentence is also in train). When `spa.txt.gz` is absent the loader
reads per-split samples `<data_dir>/spa-eng/{train,validation,test}.tsv.gz`
(same line format). The repository bundles 20,000 / 500 / 500 pairs drawn from
those full splits (data/make_spa_eng_sample.py), so a pair is in the same split
with the sample and with the full file.

Multi30k task 1 (German -> English, research-only license, not bundled):
`<data_dir>/multi30k/{train,val,test_2016_flickr}.{de,en}.gz`, 29,000 /
1,014 / 1,000 parallel lines, read from a directory you pass.

    sources, targets = load_split("train", dataset="spa-eng")
    preprocessor = TranslatorPreprocessor(en_tokenizer, es_tokenizer, sequence_length=40)
    ds = preprocessor.dataset(sources, targets, batch_size=64, shuffle=True)  # kformer.data.buckets

Out-of-distribution splits (`ood_split_indices`, `ood_splits`): two sets of
pairs held out of a training split, to score a model on what it did not see.
"length": the pairs whose source has more than `max_words` whitespace-separated
words (`OOD_MAX_WORDS`: 12 for spa-eng, 20 for Multi30k's German); "rare_word":
of the rest, pairs whose source holds a word (lower-cased `\\w+`) found in fewer
than `min_count` (2) of those pairs, so in at most `min_count - 1` training
pairs and, with the default, in none; at most `max_fraction` (4%) of them, the
first in split order, together with every other pair of the same source
sentence. The training split keeps the rest. Sizes (train pairs held out):

| data | train before | length (> N words) | rare word | train after |
|---|---|---|---|---|
| spa-eng, bundled sample | 20,000 | 469 (N = 12) | 781 | 18,750 |
| spa-eng, full, pair split | 107,067 | 2,616 (N = 12) | 3,731 | 100,720 |
| spa-eng, full, source split | 107,044 | 2,650 (N = 12) | 3,754 | 100,640 |
| Multi30k | 29,000 | 634 (N = 20) | 1,134 | 27,232 |

    rows = ood_split_indices(sources, max_words=12)   # {"train", "length", "rare_word"} -> line indices
"""

import collections
import pathlib
import re

import numpy as np

from kformer.data.checks import check_max_examples, check_one_of
from kformer.data.files import read_gzip_lines

BUNDLED_DATA_DIR = pathlib.Path(__file__).resolve().parents[2] / "data"
DATASETS = ("spa-eng", "multi30k")
SPLITS = ("train", "validation", "test")
SPLIT_BY = ("pair", "source")
MULTI30K_FILES = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
OOD_MAX_WORDS = {"spa-eng": 12, "multi30k": 20}  # about 2% of the training pairs are longer
OOD_MIN_COUNT = 2  # a rare word is in fewer training pairs than this
OOD_MAX_FRACTION = 0.04  # the rare-word set holds at most this share of the training pairs
OOD_SPLITS = ("length", "rare_word")
_WORD = re.compile(r"\w+")


def load_split(split, dataset="spa-eng", data_dir=None, max_examples=None, split_by="pair"):
    """Read one split of a parallel corpus: returns (sources: list[str], targets: list[str]).

    Args:
        split: str. `"train"`, `"validation"` or `"test"`.
        dataset: str. `"spa-eng"` (English -> Spanish, the default) or
            `"multi30k"` (German -> English).
        data_dir: str or path. Directory holding `spa-eng/` or `multi30k/`.
            Defaults to the bundled sample directory (spa-eng only).
        max_examples: int. Keep only the first `max_examples` pairs of the
            split. Defaults to all.
        split_by: `"pair"` (the default) or `"source"` (spa-eng's full file
            only: no English sentence in two splits).

    Raises a ValueError naming the path when a file is missing or not in the
    expected format.

    Example:

    >>> sources, targets = load_split("validation", max_examples=2)
    >>> len(sources), len(targets)
    (2, 2)
    """
    check_one_of("dataset", dataset, DATASETS)
    check_one_of("split", split, SPLITS)
    check_max_examples(max_examples)
    check_one_of("split_by", split_by, SPLIT_BY)
    root = pathlib.Path(data_dir or BUNDLED_DATA_DIR)
    if dataset == "spa-eng":
        sources, targets = _load_spa_eng(root / "spa-eng", split, split_by)
    else:
        if split_by != "pair":
            raise ValueError("`split_by='source'` is for spa-eng (Multi30k has its official splits). "
                             f"Received: dataset={dataset!r}, split_by={split_by!r}")
        sources, targets = _load_multi30k(root / "multi30k", split)
    return sources[:max_examples], targets[:max_examples]


def split_indices(n):
    """The fixed spa-eng split of `n` lines: dict split -> int array of line indices.

    Args:
        n: int. Lines in `spa.txt` (118,964 for the full file).

    Example:

    >>> {split: len(rows) for split, rows in split_indices(118964).items()}
    {'train': 107067, 'validation': 5948, 'test': 5949}
    """
    order = np.random.default_rng(0).permutation(n)
    train_end, validation_end = n * 90 // 100, n * 90 // 100 + n * 5 // 100
    return {"train": order[:train_end], "validation": order[train_end:validation_end],
            "test": order[validation_end:]}


def split_by_source(sources):
    """Line indices per split with no source sentence in two splits: dict split -> int array.

    The distinct sentences (in order of first appearance) are split as
    `split_indices` splits lines; each line follows its sentence.

    Args:
        sources: list of str, the source sentence of each line (repeats allowed).

    Example:

    >>> sources = [f"sentence {i % 50}" for i in range(200)]  # 50 sentences, 4 pairs each
    >>> rows = split_by_source(sources)
    >>> [(len(rows[s]), len({sources[i] for i in rows[s]})) for s in SPLITS]  # (pairs, sentences)
    [(180, 45), (8, 2), (12, 3)]
    """
    distinct = {s: i for i, s in enumerate(dict.fromkeys(sources))}
    group = np.array([distinct[s] for s in sources])
    side = np.empty(len(distinct), "int32")
    for k, rows in enumerate(split_indices(len(distinct)).values()):
        side[rows] = k
    return {split: np.flatnonzero(side[group] == k) for k, split in enumerate(SPLITS)}


def words(text):
    """The words the out-of-distribution splits count: lower-cased `\\w+` runs (digits are words too).

    Args:
        text: str.

    Example:

    >>> words("Tom's 2 cats, in 1984.")
    ['tom', 's', '2', 'cats', 'in', '1984']
    """
    return _WORD.findall(text.lower())


def ood_split_indices(sources, max_words=OOD_MAX_WORDS["spa-eng"], min_count=OOD_MIN_COUNT,
                      max_fraction=OOD_MAX_FRACTION):
    """Split a training split's lines into train and two out-of-distribution sets: dict -> sorted int arrays.

    `"length"`: the lines whose source has more than `max_words` words
    (`str.split`). `"rare_word"`: of the others (the pool), lines whose
    source holds a word (`words`) found in fewer than `min_count` pool
    lines, so in fewer than `min_count` training lines (none with the
    default 2); the first ones in split order, each with every other pool
    line of the same source sentence, while they stay within `max_fraction`
    of the pool. `"train"`: the rest. Deterministic (no randomness: the
    splits are already shuffled); no source sentence of a held-out line is
    left in `"train"`.

    Args:
        sources: list of str, the source side of the training split.
        max_words: int, or None for no length set.
        min_count: int, or None (or 0) for no rare-word set.
        max_fraction: float in [0, 1], the rare-word set's cap.

    Example:

    >>> sources = ["a b", "a c", "a b c d", "a z", "b c", "b c"]
    >>> {k: v.tolist() for k, v in ood_split_indices(sources, max_words=3, max_fraction=0.5).items()}
    {'train': [0, 1, 4, 5], 'length': [2], 'rare_word': [3]}
    """
    if max_words is not None and (isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 1):
        raise ValueError(f"`max_words` must be a positive int or None. Received: max_words={max_words!r}")
    if min_count is not None and (isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 0):
        raise ValueError(f"`min_count` must be an int >= 0 or None. Received: min_count={min_count!r}")
    if not 0 <= max_fraction <= 1:
        raise ValueError(f"`max_fraction` must be in [0, 1]. Received: max_fraction={max_fraction!r}")
    long = [i for i, s in enumerate(sources) if max_words is not None and len(s.split()) > max_words]
    held = set(long)
    pool = [i for i in range(len(sources)) if i not in held]
    rare_rows = []
    if min_count:
        counts = collections.Counter(w for i in pool for w in set(words(sources[i])))
        lines_of = collections.defaultdict(list)
        for i in pool:
            lines_of[sources[i]].append(i)
        cap, taken = int(max_fraction * len(pool)), set()
        for i in pool:
            if sources[i] in taken or all(counts[w] >= min_count for w in words(sources[i])):
                continue
            if len(rare_rows) + len(lines_of[sources[i]]) > cap:
                break
            taken.add(sources[i])
            rare_rows += lines_of[sources[i]]
        held.update(rare_rows)
    as_array = lambda rows: np.array(sorted(rows), "int64")  # noqa: E731
    return {"train": as_array(i for i in range(len(sources)) if i not in held), "length": as_array(long),
            "rare_word": as_array(rare_rows)}


def ood_splits(sources, targets, max_words=OOD_MAX_WORDS["spa-eng"], min_count=OOD_MIN_COUNT,
               max_fraction=OOD_MAX_FRACTION):
    """`ood_split_indices` applied to pairs: dict `"train"`, `"length"`, `"rare_word"` -> (sources, targets).

    Args:
        sources, targets: lists of str, a training split's pairs.
        max_words, min_count, max_fraction: see `ood_split_indices`.

    Example:

    >>> sources, targets = load_split("train")
    >>> {k: len(v[0]) for k, v in ood_splits(sources, targets).items()}  # the bundled sample
    {'train': 18750, 'length': 469, 'rare_word': 781}
    """
    if len(sources) != len(targets):
        raise ValueError(f"`sources` and `targets` must be parallel. Received: {len(sources)} sources, "
                         f"{len(targets)} targets")
    rows = ood_split_indices(sources, max_words, min_count, max_fraction)
    return {k: ([sources[i] for i in r], [targets[i] for i in r]) for k, r in rows.items()}


def _load_spa_eng(folder, split, split_by):
    full = folder / "spa.txt.gz"
    if full.is_file():
        pairs = _read_tsv(full)
        rows = (split_indices(len(pairs)) if split_by == "pair" else split_by_source([p[0] for p in pairs]))[split]
        picked = [pairs[i] for i in rows]
    elif split_by == "source":
        raise ValueError(f"`split_by='source'` needs the full {full} (the bundled samples follow the pair "
                         "split). Pass the directory holding spa-eng/spa.txt.gz as data_dir. "
                         f"Received: split_by={split_by!r}, data_dir={folder.parent}")
    else:
        sample = folder / f"{split}.tsv.gz"
        if not sample.is_file():
            raise ValueError(
                f"spa-eng file not found: {full} (nor the sample {sample}). Expected gzip "
                "`English<TAB>Spanish` lines; pass the directory holding spa-eng/ as data_dir "
                "(see data/README.md).")
        picked = _read_tsv(sample)
    return [p[0] for p in picked], [p[1] for p in picked]


def _read_tsv(path):
    """gzip `English<TAB>Spanish` lines -> list of (english, spanish)."""
    return read_gzip_lines(path, _split_pair, name="spa-eng",
                           expected="gzip UTF-8 `English<TAB>Spanish` lines", errors=(ValueError,))


def _split_pair(line, number):
    fields = line.rstrip("\r\n").split("\t")
    if len(fields) != 2:
        raise ValueError(f"line {number} has {len(fields) - 1} tabs; expected exactly one")
    return fields[0], fields[1]


def _load_multi30k(folder, split):
    german, english = (_read_lines(folder / f"{MULTI30K_FILES[split]}.{lang}.gz") for lang in ("de", "en"))
    if len(german) != len(english):
        raise ValueError(
            f"Multi30k files {folder / MULTI30K_FILES[split]}.{{de,en}}.gz must be parallel: "
            f"expected the same number of lines, got {len(german)} German and {len(english)} English.")
    return german, english


def _read_lines(path):
    if not path.is_file():
        raise ValueError(
            f"Multi30k file not found: {path}. Multi30k is not bundled (research-only license): "
            "pass the directory holding multi30k/ as data_dir (--data-dir); see data/README.md.")
    return read_gzip_lines(path, lambda line, _: line.strip(), name="Multi30k",
                           expected="gzip UTF-8 text, one sentence a line")


def load_split_tfds(split, dataset, max_examples=None):
    """Read a TFDS translation builder (needs network the first time): (sources, targets).

    Source and target follow the builder's `supervised_keys`, e.g.
    `dataset="ted_hrlr_translate/pt_to_en"` gives Portuguese -> English and
    `"wmt14_translate/de-en"` German -> English. `split` is a TFDS split
    string (`"train"`, `"validation"`, `"test[:10%]"`).

    Args:
        split: str. A TFDS split.
        dataset: str. A TFDS translation builder with `supervised_keys`.
        max_examples: int. Keep at most this many pairs. Defaults to all.

    Example:

    >>> import tensorflow_datasets as tfds
    >>> with tfds.testing.mock_data(num_examples=2):
    ...     sources, targets = load_split_tfds("train", "ted_hrlr_translate/pt_to_en")
    >>> len(sources), len(targets)
    (2, 2)
    """
    check_max_examples(max_examples)
    import tensorflow_datasets as tfds

    ds = tfds.load(dataset, split=split, as_supervised=True)
    if max_examples:
        ds = ds.take(max_examples)
    sources, targets = [], []
    for source, target in tfds.as_numpy(ds):
        sources.append(source.decode("utf-8"))
        targets.append(target.decode("utf-8"))
    return sources, targets
