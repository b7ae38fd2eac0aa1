import gzip

import numpy as np
import pytest

from kformer.data import imdb

pytestmark = pytest.mark.once("file reading and numpy")


def test_bundled_sample_is_real_balanced_and_clean():
    texts, labels = imdb.load_split("train")
    assert len(texts) == 5000 and labels.sum() == 2500
    assert not any("<br" in t for t in texts)
    test_texts, test_labels = imdb.load_split("test", max_examples=10)
    assert len(test_texts) == 10 and set(np.unique(test_labels)) <= {0, 1}


def test_clean_text_strips_html_breaks():
    assert imdb.clean_text("Great.<br /><br />Loved it<BR>!") == "Great. Loved it !"


def test_missing_and_corrupt_files_name_the_path(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path / "imdb" / "train.jsonl.gz")):
        imdb.load_split("train", tmp_path)
    (tmp_path / "imdb").mkdir()
    (tmp_path / "imdb" / "train.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="Corrupt IMDB file"):
        imdb.load_split("train", tmp_path)
    with gzip.open(tmp_path / "imdb" / "test.jsonl.gz", "wt") as f:
        f.write('{"text": "no label"}\n')
    with pytest.raises(ValueError, match="'label'"):
        imdb.load_split("test", tmp_path)
    with gzip.open(tmp_path / "imdb" / "unsup.jsonl.gz", "wt") as f:
        pass
    with pytest.raises(ValueError, match="IMDB file .*unsup.jsonl.gz is empty"):
        imdb.load_split("unsup", tmp_path)
    with pytest.raises(ValueError, match="split='dev'"):
        imdb.load_split("dev")


def test_split_is_deterministic_and_disjoint():
    texts = [f"review {i}" for i in range(100)]
    labels = np.arange(100) % 2
    (a, _), (b, _) = imdb.train_validation_split(texts, labels, seed=3)
    (a2, _), (b2, _) = imdb.train_validation_split(texts, labels, seed=3)
    assert a == a2 and b == b2 and len(b) == 10 and not set(a) & set(b)


def test_tfds_path_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=12):  # offline
        texts, labels = imdb.load_split_tfds("train", max_examples=5)
        unsup, _ = imdb.load_split_tfds("unsup")
    assert len(texts) == 5 and all(isinstance(t, str) and t for t in texts)
    assert labels.dtype == np.int32 and set(np.unique(labels)) <= {0, 1}
    assert len(unsup) == 12
    with pytest.raises(ValueError, match="split='validation'"):
        imdb.load_split_tfds("validation")


def test_max_examples_takes_a_balanced_subset_of_a_label_sorted_file(tmp_path):
    (tmp_path / "imdb").mkdir()
    with gzip.open(tmp_path / "imdb" / "train.jsonl.gz", "wt") as f:  # like the full files: sorted
        for i in range(40):
            f.write(f'{{"text": "review {i}", "label": {int(i >= 20)}}}\n')
    texts, labels = imdb.load_split("train", tmp_path, max_examples=10)
    assert len(texts) == 10 and labels.sum() == 5
    assert texts == sorted(texts, key=lambda t: int(t.split()[1]))  # file order kept
    assert imdb.load_split("train", tmp_path, max_examples=10)[0] == texts  # deterministic
