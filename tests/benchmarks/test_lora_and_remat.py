import csv

import keras
import pytest

from benchmarks import lora, remat
from kformer import models
from kformer.data import imdb
from kformer.data.preprocessors import BertPreprocessor
from kformer.data.wordpiece import WordPieceTokenizer


def _rows(path):
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.once("the benchmark's smallest setting: two recipe processes; LoRA itself is tested on every backend "
                  "in tests/models/test_lora.py")
def test_lora_rows_from_a_pretrained_mini_bert(tmp_path):
    keras.utils.set_random_seed(0)
    tokenizer = WordPieceTokenizer.learn(imdb.load_split("train", max_examples=200)[0], 400)  # kformer's normalizer
    backbone = models.bert(preset="bert_tiny", vocabulary_size=tokenizer.vocabulary_size, sequence_length=32,
                           num_layers=1)
    models.bert_pretrainer(backbone, preprocessor=BertPreprocessor(tokenizer, 32, mask_positions=True)).save(
        tmp_path / "model.keras")
    results = tmp_path / "rows.csv"
    lora.main([str(tmp_path / "model.keras"), f"--backends={keras.backend.backend()}", "--epochs=1",
               "--max-examples=32", "--batch-size=16", f"--results={results}"])
    rows = _rows(results)
    assert [r["method"] for r in rows] == ["full", "lora (rank 8, query,value)"]
    full, adapted = rows
    assert full["trained_percent"] == "100.0" and 0 < float(adapted["trained_percent"]) < 5
    for row in rows:
        assert 0 <= float(row["test_accuracy"]) <= 1 and float(row["step_ms"]) > 0 and float(row["peak_rss_mb"]) > 0
        assert row["epochs_run"] == "1" and row["backend"] == keras.backend.backend()


@pytest.mark.once("the benchmark's smallest setting: two processes; the same gradients with rematerialized "
                  "blocks are tested on every backend in tests/training/test_remat.py")
def test_remat_rows_with_and_without(tmp_path):
    results = tmp_path / "rows.csv"
    remat.main([f"--backends={keras.backend.backend()}", "--preset=bert_tiny", "--sequence-length=16",
                "--batch-size=2", "--steps=1", f"--results={results}"])
    rows = _rows(results)
    assert [r["remat"] for r in rows] == ["False", "True"]
    assert rows[0]["loss_first_step"] == rows[1]["loss_first_step"]  # the same model and batch
    assert all(float(r["step_ms"]) > 0 and float(r["peak_rss_mb"]) > 0 for r in rows)
