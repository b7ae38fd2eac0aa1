"""The out-of-distribution splits of a translation training split (`translation.ood_splits`)."""

import collections

import numpy as np
import pytest

from kformer.data import translation
from tests.data.test_translation import FULL_DATA_DIR, needs_full_spa_eng

pytestmark = pytest.mark.once("file reading and numpy")


@pytest.fixture(scope="module")
def bundled():
    sources, targets = translation.load_split("train", "spa-eng")
    return sources, targets, translation.ood_splits(sources, targets)


def train_counts(sources):
    return collections.Counter(w for s in sources for w in set(translation.words(s)))


def check_splits(sources, targets, held, max_words, min_count):
    """Every property the splits promise, on any data."""
    train_sources = held["train"][0]
    assert all(len(s.split()) > max_words for s in held["length"][0])  # only long sources
    assert all(len(s.split()) <= max_words for s in train_sources + held["rare_word"][0])  # trained: the short
    counts = train_counts(train_sources)
    assert all(any(counts[w] < min_count for w in translation.words(s)) for s in held["rare_word"][0])
    for k in translation.OOD_SPLITS:  # no sentence of a held-out pair is trained on
        assert not set(held[k][0]) & set(train_sources), k
    pairs = collections.Counter(zip(sources, targets))
    assert sum((collections.Counter(zip(*held[k])) for k in held), collections.Counter()) == pairs  # a partition


def test_bundled_ood_splits_sizes_and_properties(bundled):
    sources, targets, held = bundled
    assert {k: len(v[0]) for k, v in held.items()} == {"train": 18750, "length": 469, "rare_word": 781}
    assert all(len(src) == len(tgt) for src, tgt in held.values())
    check_splits(sources, targets, held, max_words=12, min_count=2)
    counts = train_counts(held["train"][0])  # with min_count 2, each held-out pair has a word never trained on
    assert all(any(counts[w] == 0 for w in translation.words(s)) for s in held["rare_word"][0])
    assert len(held["rare_word"][0]) <= 0.04 * (len(sources) - 78)  # the cap
    assert translation.ood_splits(sources, targets) == held  # deterministic
    rows = translation.ood_split_indices(sources)
    assert [sources[i] for i in rows["length"]] == held["length"][0]
    assert all(np.all(np.diff(r) > 0) for r in rows.values())  # sorted: split order kept


def test_ood_splits_options():
    sources = ["one two three four", "a rare", "a b", "a b", "b rare", "c", "c", "c once"]
    targets = [f"t{i}" for i in range(len(sources))]
    held = translation.ood_splits(sources, targets, max_words=3, min_count=3, max_fraction=1.0)
    assert held["length"][0] == ["one two three four"]
    assert held["rare_word"][0] == ["a rare", "b rare", "c once"]  # rare (2 pairs) and once (1 pair)
    check_splits(sources, targets, held, max_words=3, min_count=3)
    capped = translation.ood_splits(sources, targets, max_words=3, min_count=3, max_fraction=0.15)
    assert capped["rare_word"][0] == ["a rare"]  # int(0.15 * 7) = 1: the first, in split order
    check_splits(sources, targets, capped, max_words=3, min_count=3)  # "rare" stays in 1 train pair: still < 3
    twice = ["x y", "x y", "z", "z", "z"] + ["w"] * 5  # a repeated sentence goes with its repeats
    rows = translation.ood_split_indices(twice, max_words=None, min_count=3, max_fraction=0.5)
    assert rows["rare_word"].tolist() == [0, 1] and rows["length"].tolist() == []
    off = translation.ood_split_indices(sources, max_words=None, min_count=None)
    assert off["train"].tolist() == list(range(len(sources))) and not off["length"].size + off["rare_word"].size
    assert translation.ood_split_indices(sources, max_words=None, min_count=0)["rare_word"].size == 0
    for bad in (dict(max_words=0), dict(max_words=2.5), dict(min_count=-1), dict(max_fraction=1.5)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            translation.ood_split_indices(sources, **bad)
    with pytest.raises(ValueError, match="parallel"):
        translation.ood_splits(sources, targets[:-1])


def test_words_count_digits_and_ignore_case():
    assert translation.words("I paid 1,500 Euros, TOM's!") == ["i", "paid", "1", "500", "euros", "tom", "s"]


@needs_full_spa_eng
def test_full_ood_split_sizes():
    sources, targets = translation.load_split("train", "spa-eng", FULL_DATA_DIR)
    held = translation.ood_splits(sources, targets)
    assert {k: len(v[0]) for k, v in held.items()} == {"train": 100720, "length": 2616, "rare_word": 3731}
    check_splits(sources, targets, held, max_words=12, min_count=2)
