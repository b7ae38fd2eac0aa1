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
(same line format). The repository bundles 4,000 / 500 / 500 pairs drawn from
those full splits (data/make_spa_eng_sample.py), so a pair is in the same split
with the sample and with the full file.

Multi30k task 1 (German -> English, research-only license, not bundled):
`<data_dir>/multi30k/{train,val,test_2016_flickr}.{de,en}.gz`, 29,000 /
1,014 / 1,000 parallel lines, read from a directory you pass.

    sources, targets = load_split("train", dataset="spa-eng")
    preprocessor = TranslatorPreprocessor(en_tokenizer, es_tokenizer, sequence_length=40)
    ds = preprocessor.dataset(sources, targets, batch_size=64, shuffle=True)  # kformer.data.buckets
"""

import pathlib

import numpy as np

from kformer.data.checks import check_max_examples, check_one_of
from kformer.data.files import read_gzip_lines

BUNDLED_DATA_DIR = pathlib.Path(__file__).resolve().parents[2] / "data"
DATASETS = ("spa-eng", "multi30k")
SPLITS = ("train", "validation", "test")
SPLIT_BY = ("pair", "source")
MULTI30K_FILES = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


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
