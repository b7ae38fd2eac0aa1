"""benchmarks/mlm_bert_gpu.py: the MLM-BERT example's arrays, then its training where TensorFlow is missing."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from benchmarks import mlm_bert_gpu
from benchmarks.anchors import mlm_bert
from kformer.data import imdb

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# `train` as on a machine without TensorFlow: importing it fails.
WITHOUT_TF = ("import runpy, sys; sys.modules['tensorflow'] = None; sys.argv = ['mlm_bert_gpu'] + sys.argv[1:]; "
              "runpy.run_module('benchmarks.mlm_bert_gpu', run_name='__main__')")


def run_train(*argv):
    env = {**os.environ, "KERAS_BACKEND": keras.backend.backend()}
    return subprocess.run([sys.executable, "-c", WITHOUT_TF, "train", *map(str, argv)], capture_output=True,
                          text=True, env=env, timeout=600, cwd=REPO_ROOT)


def test_the_example_backbone_has_its_published_sizes():
    encoder = mlm_bert.backbone(1000)
    embeddings = 1000 * 128 + 256 * 128  # words, learned positions
    attention = 4 * (128 * 128 + 128)  # 8 heads of 16: query, key, value, output
    feed_forward = 2 * (128 * 128 + 128)
    assert encoder.count_params() == embeddings + attention + feed_forward + 2 * 2 * 128
    features = encoder(np.ones((2, 256), "int32"))
    assert tuple(features.shape) == (2, 256, 128)


@pytest.mark.only_backend("torch")
def test_prepare_saves_the_recipes_splits_and_train_runs_without_tensorflow(tmp_path):
    arrays = tmp_path / "arrays"
    mlm_bert_gpu.prepare([str(arrays), "--max-examples=40"])
    with np.load(arrays / "arrays.npz") as saved:
        columns = {k: saved[k] for k in saved.files}
    train = imdb.load_split("train", None, 40)
    (_, train_labels), (_, validation_labels) = imdb.train_validation_split(*train, seed=1337)
    np.testing.assert_array_equal(columns["train_labels"], train_labels)  # the recipe's validation split
    np.testing.assert_array_equal(columns["validation_labels"], validation_labels)
    assert len(columns["pretraining"]) == len(train_labels) + 40  # train + unlabeled reviews, never test
    assert columns["pretraining"].shape[1] == columns["test_ids"].shape[1] == 256
    assert columns["pretraining"].max() < int(columns["vocabulary_size"]) - 1  # [mask], the last id, unused

    out = tmp_path / "results"
    done = run_train(arrays, "--out", out, "--epochs=3", "--pretrain-seconds=0.001", "--finetune-epochs=2",
                     "--verbose=0")
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and metrics["requested_epochs"] == 3  # the time budget stopped it
    assert metrics["finetune_epochs"] == "1 frozen + 1" and metrics["device"] == "cpu"
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and 0.0 <= metrics["masked_token_accuracy"] <= 1.0
    pretrain = (out / "pretrain_log.csv").read_text().splitlines()
    finetune = (out / "finetune_log.csv").read_text().splitlines()
    assert len(pretrain) == 2 and "val_sparse_categorical_accuracy" in pretrain[0]
    assert len(finetune) == 3 and [row.split(",")[0] for row in finetune[1:]] == ["0", "1"]  # frozen, then not
    again = run_train(arrays, "--out", out)
    assert again.returncode == 2 and "already holds a run's metrics.json" in again.stderr

    mlm_bert_gpu.plot([str(out), "--kformer", str(REPO_ROOT / "docs/results/mini_bert_gpu/seed1337"),
                       "--out", str(tmp_path / "curves.png")])
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("flags, message", [
    ([], "arrays.npz not found: run `prepare"),
    (["--epochs=0"], "--epochs must be >= 1. Received: 0"),
    (["--finetune-epochs=0"], "--finetune-epochs must be >= 1. Received: 0"),
    (["--pretrain-seconds=-5"], "--pretrain-seconds must be > 0. Received: -5.0"),
])
def test_train_names_the_bad_flag_or_missing_arrays(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        mlm_bert_gpu.train([str(tmp_path), "--out", str(tmp_path / "out"), *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_prepare_names_a_missing_data_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        mlm_bert_gpu.prepare([str(tmp_path), "--data-dir", "/no/such/folder"])
    assert exit_.value.code == 2 and "--data-dir '/no/such/folder' is not a folder" in capsys.readouterr().err
