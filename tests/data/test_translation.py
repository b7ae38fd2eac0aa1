import gzip
import os
import pathlib

import numpy as np
import pytest

from kformer.data import buckets, translation
from kformer.data.preprocessors import TranslatorPreprocessor
from kformer.data.wordpiece import WordPieceTokenizer

pytestmark = pytest.mark.once("file reading, tokenizers in TensorFlow ops, tf.data pipeline")

# The full data sets, where a machine has them: KFORMER_DATA_DIR=/path/to/data (laid out as data/).
FULL_DATA_DIR = pathlib.Path(os.environ.get("KFORMER_DATA_DIR", "/nonexistent"))
needs_full_spa_eng = pytest.mark.skipif(
    not (FULL_DATA_DIR / "spa-eng" / "spa.txt.gz").is_file(), reason="full spa-eng file not here")
needs_multi30k = pytest.mark.skipif(
    not (FULL_DATA_DIR / "multi30k" / "val.de.gz").is_file(), reason="Multi30k not here")


@pytest.fixture(scope="module")
def tokenizers():
    sources, targets = translation.load_split("train", "spa-eng", max_examples=300)
    return (WordPieceTokenizer.learn(sources, vocabulary_size=300),
            WordPieceTokenizer.learn(targets, vocabulary_size=300))


def batches(ds):
    return [({k: np.asarray(v) for k, v in x.items()}, np.asarray(y)) for x, y in ds]


def test_bundled_splits_have_fixed_sizes_and_are_deterministic():
    splits = {s: translation.load_split(s, "spa-eng") for s in translation.SPLITS}
    sizes = {s: len(src) for s, (src, tgt) in splits.items()}
    assert sizes == {"train": 20000, "validation": 500, "test": 500}
    assert all(len(src) == len(tgt) for src, tgt in splits.values())
    assert translation.load_split("test", "spa-eng") == splits["test"]
    first = translation.load_split("train", "spa-eng", max_examples=10)
    assert first == (splits["train"][0][:10], splits["train"][1][:10])
    pairs = {s: set(zip(*p)) for s, p in splits.items()}
    assert not pairs["train"] & pairs["validation"] and not pairs["train"] & pairs["test"]


@needs_full_spa_eng
def test_bundled_sample_agrees_with_full_file_split():
    full = {s: translation.load_split(s, "spa-eng", FULL_DATA_DIR) for s in translation.SPLITS}
    assert [len(full[s][0]) for s in translation.SPLITS] == [107067, 5948, 5949]
    assert full["train"][0][:3] == translation.load_split("train", "spa-eng", FULL_DATA_DIR, 3)[0]
    for split in translation.SPLITS:
        sample = set(zip(*translation.load_split(split, "spa-eng")))
        assert sample <= set(zip(*full[split])), split


def test_split_by_source_puts_every_sentence_in_one_split(tmp_path):
    rng = np.random.default_rng(0)
    english = [f"Sentence {i}." for i in rng.integers(0, 300, 1000)]  # about 290 distinct, most repeated
    (tmp_path / "spa-eng").mkdir()
    with gzip.open(tmp_path / "spa-eng" / "spa.txt.gz", "wt", encoding="utf-8") as f:
        f.writelines(f"{e}\tFrase {i}.\n" for i, e in enumerate(english))
    by_pair = {s: translation.load_split(s, "spa-eng", tmp_path) for s in translation.SPLITS}
    by_source = {s: translation.load_split(s, "spa-eng", tmp_path, split_by="source") for s in translation.SPLITS}
    assert set(by_pair["test"][0]) & set(by_pair["train"][0])  # the pair split leaks sentences
    seen = {s: set(sources) for s, (sources, _) in by_source.items()}
    assert not seen["train"] & seen["test"] and not seen["train"] & seen["validation"]
    assert sum(len(src) for src, _ in by_source.values()) == 1000  # every pair kept, once
    pairs = [pair for src, tgt in by_source.values() for pair in zip(src, tgt)]
    assert len(set(pairs)) == 1000
    assert len(seen["train"]) == len(set(english)) * 90 // 100
    with pytest.raises(ValueError, match="split_by='source'` needs the full"):
        translation.load_split("test", "spa-eng", split_by="source")  # the bundled sample
    with pytest.raises(ValueError, match="split_by='sentence'"):
        translation.load_split("test", "spa-eng", split_by="sentence")
    with pytest.raises(ValueError, match="for spa-eng"):
        translation.load_split("test", "multi30k", tmp_path, split_by="source")


@needs_full_spa_eng
def test_full_split_by_source_sizes():
    sizes = [len(translation.load_split(s, "spa-eng", FULL_DATA_DIR, split_by="source")[0])
             for s in translation.SPLITS]
    assert sizes == [107044, 6011, 5909]


@needs_multi30k
def test_multi30k_is_german_to_english():
    german, english = translation.load_split("validation", "multi30k", FULL_DATA_DIR)
    assert len(german) == len(english) == 1014
    german, english = translation.load_split("train", "multi30k", FULL_DATA_DIR, max_examples=2)
    assert english[0] == "Two young, White males are outside near many bushes."
    assert german[0].startswith("Zwei junge weiße Männer")


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="dataset='wmt'"):
        translation.load_split("train", "wmt")
    with pytest.raises(ValueError, match="split='dev'"):
        translation.load_split("dev", "spa-eng")
    with pytest.raises(ValueError, match="max_examples=0"):
        translation.load_split("train", "spa-eng", max_examples=0)


def test_missing_and_corrupt_files_name_the_path(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path / "spa-eng" / "spa.txt.gz")):
        translation.load_split("train", "spa-eng", tmp_path)
    with pytest.raises(ValueError, match="directory holding multi30k/"):
        translation.load_split("train", "multi30k", tmp_path)
    (tmp_path / "spa-eng").mkdir()
    (tmp_path / "spa-eng" / "spa.txt.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="Corrupt spa-eng file .*spa.txt.gz"):
        translation.load_split("train", "spa-eng", tmp_path)
    with gzip.open(tmp_path / "spa-eng" / "spa.txt.gz", "wt", encoding="utf-8") as f:
        f.write("Go.\tVe.\nNo tab here\n")
    with pytest.raises(ValueError, match="line 2 has 0 tabs; expected exactly one"):
        translation.load_split("train", "spa-eng", tmp_path)
    (tmp_path / "multi30k").mkdir()
    for lang, text in (("de", "Ein Hund.\nEine Katze.\n"), ("en", "A dog.\n")):
        with gzip.open(tmp_path / "multi30k" / f"val.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write(text)
    with pytest.raises(ValueError, match="val.*same number of lines, got 2 German and 1 English"):
        translation.load_split("validation", "multi30k", tmp_path)


def test_dataset_shapes_shift_and_buckets(tokenizers):
    source_tokenizer, target_tokenizer = tokenizers
    sources, targets = translation.load_split("validation", "spa-eng", max_examples=200)
    sources[0], targets[0] = "word " * 40, "palabra " * 40  # longer than sequence_length
    sequence_length = 20
    preprocessor = TranslatorPreprocessor(source_tokenizer, target_tokenizer, sequence_length)
    ds = preprocessor.dataset(sources, targets, batch_size=16)
    start, end = target_tokenizer.ids["[START]"], target_tokenizer.ids["[END]"]
    rows, widths = [], set()
    assert ds.cardinality() == len(batches(ds))  # known number of batches for fit()
    for inputs, labels in batches(ds):
        encoder, decoder = inputs["encoder_token_ids"], inputs["decoder_token_ids"]
        assert set(inputs) == {"encoder_token_ids", "decoder_token_ids"}
        assert encoder.dtype == decoder.dtype == labels.dtype == np.int32
        assert encoder.shape == decoder.shape == labels.shape and encoder.shape[0] <= 16
        lengths = (labels > 0).sum(1)
        np.testing.assert_array_equal((decoder > 0).sum(1), lengths)
        np.testing.assert_array_equal(labels > 0, np.arange(labels.shape[1]) < lengths[:, None])
        np.testing.assert_array_equal(decoder[:, 0], start)
        for i, n in enumerate(lengths):  # decoder = [START] + target, labels = target + [END]
            np.testing.assert_array_equal(decoder[i, 1:n], labels[i, :n - 1])
            assert labels[i, n - 1] == end
        widths.add(encoder.shape[1])
        rows += [tuple(tuple(a[i][a[i] > 0]) for a in (encoder, decoder, labels)) for i in range(len(labels))]
    assert widths == {8, 16, 20}  # padded to the bucket lengths only
    assert max(len(r[0]) for r in rows) == max(len(r[1]) for r in rows) == sequence_length
    # Same ids as the preprocessor's own padded call (used by fit on raw text and at serving time).
    x, labels = preprocessor(np.array(sources), np.array(targets))
    expected = [np.asarray(x["encoder_token_ids"]), np.asarray(x["decoder_token_ids"]), np.asarray(labels)]
    expected = [tuple(tuple(a[i][a[i] > 0]) for a in expected) for i in range(len(sources))]
    assert sorted(rows) == sorted(expected)


def test_bucket_lengths():
    assert buckets.bucket_lengths(20) == [8, 16, 20]
    assert buckets.bucket_lengths(32) == [8, 16, 24, 32]
    assert buckets.bucket_lengths(5) == [5]


def test_shuffle_is_seeded_and_errors_are_clear(tokenizers):
    sources, targets = translation.load_split("test", "spa-eng", max_examples=64)
    preprocessor = TranslatorPreprocessor(*tokenizers, sequence_length=16)
    make = lambda seed: batches(preprocessor.dataset(  # noqa: E731
        sources, targets, batch_size=8, shuffle=True, seed=seed))
    first, again = make(3), make(3)
    assert len(first) == len(again)
    for (x, y), (x2, y2) in zip(first, again):
        np.testing.assert_array_equal(y, y2)
    with pytest.raises(ValueError, match="2 targets"):
        preprocessor.dataset(sources[:3], targets[:2], batch_size=8)
    with pytest.raises(ValueError, match="sequence_length=1"):
        TranslatorPreprocessor(*tokenizers, sequence_length=1)


def test_tfds_path_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=5):
        sources, targets = translation.load_split_tfds("train", "ted_hrlr_translate/pt_to_en", max_examples=3)
    assert len(sources) == len(targets) == 3
    assert all(isinstance(t, str) for t in sources + targets)
    with pytest.raises(ValueError, match="max_examples=0"):
        translation.load_split_tfds("train", "ted_hrlr_translate/pt_to_en", max_examples=0)
