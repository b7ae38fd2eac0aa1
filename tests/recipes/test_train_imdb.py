import csv
import json
import os
import pathlib
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest

from kformer import models
from kformer.data.wordpiece import WordPieceTokenizer
from recipes import common, train_imdb
from tests.helpers import assert_figures

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAGS = ["--max-examples=96", "--sequence-length=32", "--preset=imdb_tiny",
         "--vocabulary-size=300", "--verbose=2"]


@pytest.mark.only_backend("tensorflow")  # the main job's backend; the killed-run test below runs this recipe on
# torch, and fit, save, load and the export's TensorFlow worker are checked on every backend in
# tests/models/test_tasks.py and tests/export/test_export.py
def test_recipe_trains_saves_exports_and_never_overwrites(tmp_path, monkeypatch, capsys):
    learned = []
    learn = WordPieceTokenizer.learn.__func__
    monkeypatch.setattr(WordPieceTokenizer, "learn",
                        classmethod(lambda cls, *a, **k: learned.append(1) or learn(cls, *a, **k)))
    flags = FLAGS + ["--epochs=1", f"--output-dir={tmp_path}"]
    first = train_imdb.main(flags)
    assert first == tmp_path / "imdb_tiny" / "1"
    config = json.loads((first / "config.json").read_text())
    assert config["preset"] == "imdb_tiny" and config["sequence_length"] == 32
    metrics = json.loads((first / "metrics.json").read_text())
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["test_examples"] == 96
    # short inputs: test and validation reviews cut to first sentences and 10-30-word crops
    short = ("ood_first_sentence_accuracy", "ood_crop_10_30_accuracy")
    assert all(0.0 <= metrics[k] <= 1.0 and 0.0 <= metrics[f"val_{k}"] <= 1.0 for k in short)
    assert metrics["val_examples"] == 10 and metrics["crop_augmentation"] is False
    assert metrics["window_augmentation"] == 0.3  # the default: short token windows in training
    with open(first / "training_log.csv") as f:  # the kept weights' validation accuracy
        assert metrics["val_accuracy"] == pytest.approx(float(next(csv.DictReader(f))["val_accuracy"]))
    out = capsys.readouterr().out
    assert (f"test accuracy: {metrics['test_accuracy']:.4f} on 96 reviews; on their first sentences "
            f"{metrics['ood_first_sentence_accuracy']:.4f}, on 10-30-word crops "
            f"{metrics['ood_crop_10_30_accuracy']:.4f}") in out and "validation accuracy: " in out
    model = models.load(first)  # the task with its preprocessor: raw text in
    vocabulary = model.preprocessor.tokenizer.vocabulary
    assert vocabulary[:2] == ["[PAD]", "[UNK]"] and len(vocabulary) == model.vocabulary_size
    probabilities = model.predict(["A wonderful film.", "Dull."], verbose=0)
    assert probabilities.shape == (2, 2) and np.allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    assert model.class_names == ["negative", "positive"]
    assert (first / "saved_model.pb").is_file()
    assert (first / "assets.extra" / "tf_serving_warmup_requests").is_file()
    assert (first / "training_log.csv").is_file() and (first / "logs").is_dir()
    card = (first / "README.md").read_text()  # the model card
    assert card.startswith("# imdb_tiny: TextClassifier (imdb_tiny)") and "--max-examples=96" in card
    assert f"| test_accuracy | {metrics['test_accuracy']:.4g} |" in card and "## Known limits" in card
    assert "## Out of distribution" in card and "10-30 consecutive words" in card
    assert "| window_augmentation | 0.3 |" in card.split("## Training and decoding")[1]  # a setting, not a score
    assert f"| ood_crop_10_30_accuracy | {metrics['ood_crop_10_30_accuracy']:.4g} |" in card
    facts = json.loads((first / "assets.extra" / "model_card.json").read_text())
    assert facts["parameters"] == model.count_params() and facts["task_type"] == "text_classification"
    assert not (tmp_path / "imdb_tiny" / "_training").exists()
    assert_figures(first)  # curves.png and attention.png, shown in the card
    assert set(facts["figures"]) == {"curves.png", "attention.png"}
    before = (first / "model.keras").read_bytes()
    # model overrides and short training crops; the vocabulary (learned on the reviews) is the same
    second = train_imdb.main(flags + ["--no-export", "--no-plots", "--crop-augmentation", "--ngram-buckets=64",
                                      "--no-mask-padding", "--window-augmentation=0"])
    assert second == tmp_path / "imdb_tiny" / "2"
    second_metrics = json.loads((second / "metrics.json").read_text())
    assert second_metrics["crop_augmentation"] is True and second_metrics["window_augmentation"] == 0.0
    config = json.loads((second / "config.json").read_text())
    assert config["ngram_buckets"] == 64 and config["mask_padding"] is False
    with open(second / "training_log.csv") as f:
        assert float(next(csv.DictReader(f))["loss"]) > 0  # trained (on 86 reviews and 86 crops)
    assert not list(second.glob("*.png")) and ".png)" not in (second / "README.md").read_text()
    assert (first / "model.keras").read_bytes() == before
    assert not list((tmp_path / "imdb_tiny").glob(".tmp-*"))
    assert len(learned) == 1  # the second run reused the cached vocabulary
    cached, = (tmp_path / "imdb_tiny" / "_prepared").glob("vocabulary-*.txt")
    second_model = models.load(second)
    assert second_model.preprocessor.tokenizer.vocabulary == vocabulary == cached.read_text().split("\n")[:-1]
    assert second_model.ngram_buckets == 64 and second_model.mask_padding is False


@pytest.mark.only_backend("torch")  # the backup mechanics run on all three in tests/reliability; a tiny recipe
# process costs least on torch (no graph to trace or compile)
def test_killed_run_resumes_from_the_next_epoch(tmp_path, capsys):
    # 3 batches an epoch in groups of 2: the kill leaves half a group's gradients in the backup (that they
    # resume to the same weights: tests/training/test_accumulation.py)
    flags = FLAGS + ["--epochs=3", "--no-export", "--gradient-accumulation-steps=2", f"--output-dir={tmp_path}"]
    killed = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "recipes" / "kill_after_first_epoch.py"),
         "recipes.train_imdb", *flags], cwd=ROOT, capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    work = tmp_path / "imdb_tiny" / "_training"
    assert (work / "backup").is_dir() and not (tmp_path / "imdb_tiny" / "1").exists()
    run_dir = train_imdb.main(flags)
    out = capsys.readouterr().out
    assert f"taking over the lock {work.with_suffix('.lock')} of a run that no longer runs" in out  # the killed run's
    assert "Epoch 1/3" not in out and "Epoch 2/3" in out and "Epoch 3/3" in out
    with open(run_dir / "training_log.csv") as f:
        epochs = [int(row["epoch"]) for row in csv.DictReader(f)]
    assert epochs == [0, 1, 2]  # epoch 0 from the killed run, 1-2 from the rerun: nothing lost or repeated


# Bad flags: one table for every recipe in tests/reliability/test_recipe_flags.py.


def test_missing_data_file_exits_with_the_path(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        train_imdb.main([f"--data-dir={tmp_path}", f"--output-dir={tmp_path}"])
    assert str(tmp_path / "imdb" / "train.jsonl.gz") in str(exit_info.value.code)


@pytest.mark.only_backend("torch")  # the TFDS loader itself is tested in tests/data
def test_tfds_flag_trains_on_tfds_imdb_reviews(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=40):  # offline stand-in for the download
        run_dir = train_imdb.main(FLAGS + ["--epochs=1", "--tfds", "--no-export", f"--output-dir={tmp_path}"])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test_examples"] == 40 and metrics["train_examples"] == 36


def test_model_flags_default_to_the_preset_and_need_a_preset(capsys, tmp_path):
    args = train_imdb.parse_args([])
    assert args.ngram_buckets is None and args.crop_augmentation is False
    # the main job (bundled sample) masks padding and trains on short windows; full data keeps the preset's
    assert args.window_augmentation == 0.3 and args.mask_padding is True
    full = train_imdb.parse_args([f"--data-dir={tmp_path}"])
    assert full.window_augmentation == 0.0 and full.mask_padding is None
    assert train_imdb.parse_args([f"--data-dir={tmp_path}", "--window-augmentation=0.5"]).window_augmentation == 0.5
    assert train_imdb.parse_args(["--no-mask-padding"]).mask_padding is False
    for flags in (["--window-augmentation=1.5"], ["--from-pretrained=some/bert", "--window-augmentation=0.3"]):
        with pytest.raises(SystemExit):
            train_imdb.parse_args(flags)
    assert train_imdb.parse_args(["--ngram-buckets=0", "--mask-padding"]).mask_padding is True
    for flags in (["--ngram-buckets=-1"], ["--ngram-buckets=1"], ["--from-pretrained=some/bert", "--ngram-buckets=16"]):
        with pytest.raises(SystemExit):
            train_imdb.parse_args(flags)
    assert "not --from-pretrained" in capsys.readouterr().err


def test_schedule_flag_keeps_the_rate_or_warms_up_and_decays_it_over_the_epochs(capsys):
    assert train_imdb.learning_rate(train_imdb.parse_args(["--learning-rate=2e-3"]), 1000) == 2e-3
    args = train_imdb.parse_args(["--schedule=cosine", "--epochs=2", "--batch-size=32", "--learning-rate=1e-3"])
    schedule = train_imdb.learning_rate(args, 1000)  # 32 steps an epoch (the last batch partial), 64 in all
    rates = [float(schedule(step)) for step in (0, 6, 20, 63, 64)]
    assert rates[0] == 0.0 and rates[1] == pytest.approx(1e-3)  # warmup: 10 % of the steps
    assert 1e-3 > rates[2] > rates[3] > 0.0 and rates[4] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(SystemExit):
        train_imdb.parse_args(["--schedule=linear"])
    assert "--schedule: invalid choice: 'linear' (choose from" in capsys.readouterr().err


@pytest.mark.only_backend("torch")  # the swap is Keras's (SwapEMAWeights); passes on all three
def test_ema_flag_validates_keeps_and_saves_the_moving_average(tmp_path):
    flags = FLAGS + ["--epochs=2", "--no-export", "--no-plots", f"--output-dir={tmp_path}"]
    plain, averaged = train_imdb.main(flags + ["--ema=0"]), train_imdb.main(flags + ["--ema=0.9"])
    logs = []
    for run_dir in (plain, averaged):
        with open(run_dir / "training_log.csv") as f:
            logs.append([{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)])
    # the same training steps (the average does not feed back), validated on other weights
    assert [r["loss"] for r in logs[0]] == pytest.approx([r["loss"] for r in logs[1]], rel=1e-5)
    assert [r["val_loss"] for r in logs[0]] != pytest.approx([r["val_loss"] for r in logs[1]], rel=1e-3)
    assert json.loads((averaged / "metrics.json").read_text())["ema"] == 0.9
    # the saved model holds the average of the best validation epoch (first best, as EarlyStopping keeps)
    best = max(logs[1], key=lambda r: r["val_accuracy"])
    texts, labels = common.load_imdb(train_imdb.parse_args(flags))["validation"]
    model = models.load(averaged)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    val_loss = model.evaluate(model.preprocessor.dataset(texts, labels, batch_size=32), verbose=0)
    assert val_loss == pytest.approx(best["val_loss"], rel=1e-4)
