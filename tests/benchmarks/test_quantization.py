import csv

import keras
import pytest

from benchmarks import quantization
from kformer import models
from kformer.data import imdb
from kformer.data.preprocessors import TextClassifierPreprocessor
from kformer.data.wordpiece import WordPieceTokenizer


@pytest.fixture(scope="module")
def tokenizer():
    """One vocabulary for both models: learned once."""
    return WordPieceTokenizer.learn(imdb.load_split("train", max_examples=200)[0], 400)


@pytest.mark.once("the benchmark's smallest setting; quantized save, load and export are tested on every backend "
                  "in tests/models/test_quantized.py and tests/export/test_export.py")
def test_float_and_int8_rows_from_a_saved_classifier(tokenizer, tmp_path):
    keras.utils.set_random_seed(0)
    task = models.text_classifier(preset="imdb_tiny", vocabulary_size=tokenizer.vocabulary_size, sequence_length=32,
                                  class_names=["negative", "positive"],
                                  preprocessor=TextClassifierPreprocessor(tokenizer, 32))
    task.save(tmp_path / "model.keras")
    results = tmp_path / "rows.csv"
    quantization.main([str(tmp_path / "model.keras"), "--modes=int8", "--max-test-examples=16", "--single=2",
                       f"--results={results}"])
    with results.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["mode"] for r in rows] == ["float", "int8"]
    for row in rows:
        assert 0 <= float(row["test_accuracy"]) <= 1 and row["test_examples"] == "16"
        assert float(row["keras_mb"]) > 0 and float(row["saved_model_mb"]) > 0 and float(row["served_p50_ms"]) > 0
        assert float(row["served_max_abs_diff"]) < 1e-3  # the served graph answers as the task in process
        assert row["commit"] and row["machine"] and row["backend"] == keras.backend.backend()


@pytest.mark.once("the benchmark's smallest setting; a quantized language model saves and loads on every backend in "
                  "tests/models/test_quantized.py")
def test_language_model_rows_give_perplexities(tokenizer, tmp_path):
    from kformer.data.preprocessors import CausalLMPreprocessor

    keras.utils.set_random_seed(0)
    task = models.causal_lm(preset="gpt_tiny", vocabulary_size=tokenizer.vocabulary_size, sequence_length=32,
                            num_layers=1, preprocessor=CausalLMPreprocessor(tokenizer, 32))
    task.save(tmp_path / "model.keras")
    results = tmp_path / "lm.csv"
    quantization.main([str(tmp_path / "model.keras"), "--modes=int8", "--no-saved-model",
                       f"--lm-results={results}"])
    with results.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["mode"] for r in rows] == ["float", "int8"]
    for row in rows:  # an untrained model: about the vocabulary size
        assert 1 < float(row["validation_perplexity"]) < 10 * tokenizer.vocabulary_size
        assert int(row["validation_windows"]) > 0 and float(row["keras_mb"]) > 0 and row["saved_model_mb"] == ""
