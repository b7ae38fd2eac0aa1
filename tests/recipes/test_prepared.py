"""The `_prepared` cache: reused for the same inputs, rebuilt for others, written atomically."""

import subprocess
import sys

import numpy as np
import pytest

from kformer.data import imdb, lm, mlm
from kformer.data.preprocessors import CausalLMPreprocessor
from kformer.data.wordpiece import WordPieceTokenizer
from kformer.export import versioning
from recipes import prepared

pytestmark = pytest.mark.once("vocabulary and array caches: tokenizer in TensorFlow ops, numpy, files")

TEXTS = ["A fine film. The cast is good.", "A dull film. Too long by far!", "Good music. Bad plot.",
         "I laughed. I cried. I left early."] * 5


@pytest.fixture
def learned(monkeypatch):
    """Counts calls of `WordPieceTokenizer.learn`."""
    calls = []
    learn = WordPieceTokenizer.learn.__func__
    monkeypatch.setattr(WordPieceTokenizer, "learn",
                        classmethod(lambda cls, *a, **k: calls.append(1) or learn(cls, *a, **k)))
    return calls


def test_digest_depends_on_every_input():
    base = prepared.digest(["a b", "c"], 100)
    assert prepared.digest(["a b", "c"], 100) == base
    others = [prepared.digest(["a b", "c "], 100), prepared.digest(["a", "b c"], 100),
              prepared.digest(["a b", "c"], 101), prepared.digest(["a b", "c"], "100"),
              prepared.digest(["a b", "c"]), prepared.digest(["a b"], ["c"], 100)]
    assert len({base, *others}) == len(others) + 1


def test_a_vocabulary_is_learned_once_per_texts_and_size(tmp_path, learned):
    first = prepared.tokenizer(tmp_path / "cache", "vocabulary", TEXTS, 40, tmp_path / "run1" / "vocabulary.txt")
    again = prepared.tokenizer(tmp_path / "cache", "vocabulary", TEXTS, 40, tmp_path / "run2" / "vocabulary.txt")
    assert len(learned) == 1 and again.vocabulary == first.vocabulary
    assert (tmp_path / "run2" / "vocabulary.txt").read_text() == (tmp_path / "run1" / "vocabulary.txt").read_text()
    prepared.tokenizer(tmp_path / "cache", "vocabulary", TEXTS[:-1], 40, tmp_path / "run3" / "vocabulary.txt")
    prepared.tokenizer(tmp_path / "cache", "vocabulary", TEXTS, 45, tmp_path / "run4" / "vocabulary.txt")
    assert len(learned) == 3 and len(list((tmp_path / "cache").glob("vocabulary-*.txt"))) == 3


def test_a_resumed_run_keeps_its_own_vocabulary(tmp_path, learned):
    work = tmp_path / "run" / "vocabulary.txt"
    work.parent.mkdir()
    WordPieceTokenizer.learn(TEXTS[:4], 30).save(work)  # the vocabulary its first epochs used
    resumed = prepared.tokenizer(tmp_path / "cache", "vocabulary", TEXTS, 40, work)
    assert resumed.vocabulary == WordPieceTokenizer.load(work).vocabulary
    assert len(learned) == 1 and not (tmp_path / "cache").exists()


def test_next_sentence_pairs_are_cached_and_identical(tmp_path, monkeypatch):
    texts = imdb.load_split("unsup", max_examples=40)[0]
    tok = WordPieceTokenizer.learn(texts, 300)
    fresh = mlm.segment_pairs(texts, tok, 32, seed=3)
    built = []
    segment_pairs = mlm.segment_pairs
    monkeypatch.setattr(mlm, "segment_pairs", lambda *a, **k: built.append(1) or segment_pairs(*a, **k))
    first = prepared.nsp_pairs(tmp_path, texts, tok, 32, seed=3)
    cached = prepared.nsp_pairs(tmp_path, texts, tok, 32, seed=3)
    assert len(built) == 1
    for arrays in (first, cached):
        assert sorted(arrays) == sorted(fresh)
        for k in fresh:
            assert arrays[k].dtype == np.int32 and np.array_equal(arrays[k], fresh[k]), k
    prepared.nsp_pairs(tmp_path, texts, tok, 32, seed=4)
    prepared.nsp_pairs(tmp_path, texts, tok, 24, seed=3)
    assert len(built) == 3 and len(list(tmp_path.glob("nsp_pairs-*.npz"))) == 3


def test_packed_masked_lm_sequences_are_cached_and_identical(tmp_path, monkeypatch):
    texts = imdb.load_split("unsup", max_examples=40)[0]
    tok = WordPieceTokenizer.learn(texts, 300)
    fresh = mlm.packed_sequences(texts, tok, 32)
    built = []
    packed_sequences = mlm.packed_sequences
    monkeypatch.setattr(mlm, "packed_sequences", lambda *a, **k: built.append(1) or packed_sequences(*a, **k))
    first = prepared.mlm_sequences(tmp_path, texts, tok, 32)
    cached = prepared.mlm_sequences(tmp_path, texts, tok, 32)
    assert len(built) == 1
    for arrays in (first, cached):
        assert sorted(arrays) == ["segment_ids", "token_ids"]
        for k in fresh:
            assert arrays[k].dtype == np.int32 and np.array_equal(arrays[k], fresh[k]), k
    prepared.mlm_sequences(tmp_path, texts, tok, 24)
    assert len(built) == 2 and len(list(tmp_path.glob("mlm_sequences-*.npz"))) == 2


def test_language_model_windows_are_cached_and_identical(tmp_path):
    texts = imdb.load_split("unsup", max_examples=30)[0]
    preprocessor = CausalLMPreprocessor(WordPieceTokenizer.learn(texts, 300), 16)
    fresh = lm.packed_windows(preprocessor, texts)
    first = prepared.lm_windows(tmp_path, texts, preprocessor)
    cached = prepared.lm_windows(tmp_path, texts, preprocessor)
    assert cached.dtype == np.int32 and np.array_equal(first, fresh) and np.array_equal(cached, fresh)
    prepared.lm_windows(tmp_path, texts[1:], preprocessor)
    assert len(list(tmp_path.glob("lm_windows-*.npz"))) == 2


def test_a_failed_write_leaves_nothing_and_a_killed_writers_file_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    abandoned = tmp_path / f"{versioning._tmp_prefix()}{dead.stdout.strip()}-vocabulary-x.txt"
    abandoned.write_text("half a vocab")

    def broken(tmp):
        tmp.write_text("partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        prepared._atomic(tmp_path / "vocabulary-y.txt", broken)
    assert list(tmp_path.iterdir()) == []


def test_preparation_shows_progress(capsys):
    WordPieceTokenizer.learn(TEXTS, 40, verbose=2)
    tok = WordPieceTokenizer.learn(TEXTS, 40)
    mlm.segment_pairs(TEXTS, tok, 16, verbose=2)
    mlm.packed_sequences(TEXTS, tok, 16, verbose=2)
    lm.packed_windows(CausalLMPreprocessor(tok, 8), TEXTS, verbose=2)
    out = capsys.readouterr().out
    assert out.count(f"{len(TEXTS)}/{len(TEXTS)}") == 2 and "text" in out and out.count("sentence") >= 2


def test_a_damaged_cached_vocabulary_is_rebuilt_with_a_message(tmp_path, learned, capsys):
    fresh = prepared.tokenizer(tmp_path / "cache", "vocabulary", TEXTS, 40, tmp_path / "run1" / "vocabulary.txt")
    cached, = (tmp_path / "cache").glob("vocabulary-*.txt")
    lines = cached.read_text().splitlines(keepends=True)
    for damage in ("".join(lines[:10]).encode(), np.random.default_rng(0).bytes(300)):  # cut short, garbage
        cached.write_bytes(damage)
        again = prepared.tokenizer(tmp_path / "cache", "vocabulary", TEXTS, 40, tmp_path / "run2" / "vocabulary.txt")
        assert again.vocabulary == fresh.vocabulary
        assert f"the cached {cached} does not match its checksum (damaged); removed, rebuilding" in \
            capsys.readouterr().err
        (tmp_path / "run2" / "vocabulary.txt").unlink()
    assert len(learned) == 3
    assert [p.read_text() for p in (tmp_path / "cache").iterdir()] == ["".join(lines)]
    unchecked = cached.with_name(cached.name.rsplit("-", 1)[0] + ".txt")  # written before checksums
    cached.rename(unchecked)
    prepared.tokenizer(tmp_path / "cache", "vocabulary", TEXTS, 40, tmp_path / "run3" / "vocabulary.txt")
    assert "has no checksum in its name" in capsys.readouterr().err and not unchecked.exists()


def test_a_damaged_cached_array_file_is_rebuilt_with_a_message(tmp_path, capsys):
    texts = imdb.load_split("unsup", max_examples=20)[0]
    preprocessor = CausalLMPreprocessor(WordPieceTokenizer.learn(texts, 300), 16)
    fresh = prepared.lm_windows(tmp_path, texts, preprocessor)
    cached, = tmp_path.glob("lm_windows-*.npz")
    good = cached.read_bytes()
    for damage in (np.random.default_rng(0).bytes(len(good)), good[: len(good) // 2]):
        cached.write_bytes(damage)
        assert np.array_equal(prepared.lm_windows(tmp_path, texts, preprocessor), fresh)
        assert f"the cached {cached} does not match its checksum" in capsys.readouterr().err
        assert cached.read_bytes() == good  # rebuilt under the same name
    # A file whose checksum matches but does not load (an npz written by another program) is rebuilt too.
    bad = cached.with_name(cached.name.rsplit("-", 1)[0] + f"-{prepared._checksum(b'junk')}.npz")
    bad.write_bytes(b"junk")
    cached.unlink()
    assert np.array_equal(prepared.lm_windows(tmp_path, texts, preprocessor), fresh)
    assert f"the cached {bad} does not load (" in capsys.readouterr().err and not bad.exists()
