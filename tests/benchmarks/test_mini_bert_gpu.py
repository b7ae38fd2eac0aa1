"""benchmarks/mini_bert_gpu.py: the recipe's arrays, then training on them where TensorFlow is missing."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from benchmarks import mini_bert_gpu
from kformer.data.preprocessors import BertPreprocessor
from kformer.data.wordpiece import WordPieceTokenizer
from recipes import common, pretrain_mini_bert

RECIPE = ["--max-examples=40", "--vocabulary-size=300", "--sequence-length=32"]
# `train` as on a machine without TensorFlow: importing it fails.
WITHOUT_TF = ("import runpy, sys; sys.modules['tensorflow'] = None; sys.argv = ['mini_bert_gpu'] + sys.argv[1:]; "
              "runpy.run_module('benchmarks.mini_bert_gpu', run_name='__main__')")


def run_train(*argv):
    env = {**os.environ, "KERAS_BACKEND": keras.backend.backend()}
    return subprocess.run([sys.executable, "-c", WITHOUT_TF, "train", *map(str, argv)], capture_output=True,
                          text=True, env=env, timeout=600)


@pytest.mark.only_backend("torch")
def test_prepare_saves_the_recipes_data_and_train_runs_all_stages_without_tensorflow(tmp_path):
    arrays = tmp_path / "arrays"
    mini_bert_gpu.prepare([str(arrays), "--", *RECIPE])
    with np.load(arrays / "arrays.npz") as saved:
        columns = {k: saved[k] for k in saved.files}
    config = json.loads((arrays / "config.json").read_text())
    # the recipe's own splits and packing: the same validation reviews, the same ids
    splits = common.load_imdb(pretrain_mini_bert.parse_args(RECIPE))
    tokenizer = WordPieceTokenizer.load(arrays / "vocabulary.txt")
    assert config["vocabulary_size"] == tokenizer.vocabulary_size and config["sequence_length"] == 32
    for split in ("train", "validation", "test"):
        texts, labels = splits[split]
        np.testing.assert_array_equal(columns[f"{split}_labels"], labels)
        np.testing.assert_array_equal(columns[f"{split}_token_ids"],
                                      BertPreprocessor(tokenizer, 32).encode(texts)["token_ids"])
    pairs = len(columns["nsp_labels"])
    assert columns["pair_token_ids"].shape == columns["pair_segment_ids"].shape == (pairs, 32)

    out = tmp_path / "results"
    done = run_train(arrays, "--out", out, "--pretrain-epochs=2", "--batch-size=64", "--finetune-epochs=1",
                     "--finetune-batch-size=8", "--patience=1", "--finetune-at=1", "--objective=mlm",
                     "--pretrain-dropout=0", "--verbose=0")
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    cut = pairs - max(1, pairs // 20)  # the recipe's held-out 5 %
    assert metrics["pretraining_pairs"] == cut and metrics["pretraining_steps"] == 2 * -(-cut // 64)
    per_epoch = -(-len(columns["train_labels"]) // 8)
    assert metrics["scratch_epochs"] == -(-(metrics["pretraining_steps"] + per_epoch) // per_epoch)
    for key in ("masked_token_accuracy", "test_accuracy", "scratch_test_accuracy", "scratch_short_test_accuracy",
                "test_accuracy_after_epoch_1"):
        assert 0.0 <= metrics[key] <= 1.0, key
    assert metrics["gain_points"] == round(100 * (metrics["test_accuracy"] - metrics["scratch_test_accuracy"]), 2)
    rows = (out / "pretrain_log.csv").read_text().splitlines()
    assert len(rows) == 3 and "val_mlm_logits_sparse_categorical_accuracy" in rows[0]
    assert {p.name for p in out.glob("*_log.csv")} == {"pretrain_log.csv", "finetune_log.csv", "scratch_log.csv",
                                                       "scratch_short_log.csv", "finetune_at_1_log.csv"}
    mini_bert_gpu.plot([str(out), "--out", str(tmp_path / "curves.png")])
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("flags, message", [
    ([], "arrays.npz not found: run `prepare"),
    (["--pretrain-epochs=3", "--finetune-at=3"], "--finetune-at epochs must be in [1, 2]. Received: [3]"),
    (["--finetune-at=1,x"], "--finetune-at must be comma-separated integers. Received: '1,x'"),
    (["--batch-size=0"], "--batch-size must be >= 1. Received: 0"),
])
def test_train_names_the_bad_flag_or_missing_arrays(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        mini_bert_gpu.train([str(tmp_path), "--out", str(tmp_path / "out"), *flags])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_train_never_overwrites_a_finished_runs_results(tmp_path, capsys):
    (tmp_path / "arrays.npz").write_bytes(b"")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "metrics.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_:
        mini_bert_gpu.train([str(tmp_path), "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and "already holds a run's metrics.json" in capsys.readouterr().err
    assert (tmp_path / "out" / "metrics.json").read_text() == "{}"


def test_recipe_flags_keep_the_recipes_defaults():
    """`prepare` parses the recipe's data flags itself (it imports no recipe): the same defaults."""
    from recipes import pretrain_mini_bert

    ours, recipe = mini_bert_gpu.recipe_flags([]), pretrain_mini_bert.parse_args(["--no-keep-freed-memory"])
    for name in ("data_dir", "preset", "seed", "vocabulary_size", "sequence_length", "max_examples"):
        assert getattr(ours, name) == getattr(recipe, name), name
