"""The small Keras ASR CTC example anchor and its speech section in benchmarks/quality_vs_anchor.py."""

import json

import numpy as np
import pytest

from benchmarks import quality_vs_anchor
from benchmarks.anchors import speech


@pytest.mark.only_backend("jax")  # the anchor is plain Keras; its script runs on every backend
def test_speech_anchor_trains_on_the_recipes_utterances(tmp_path):
    model = speech.build()
    logits = np.asarray(model.predict(np.zeros((2, 50, speech.FFT_LENGTH // 2 + 1), "float32"), verbose=0))
    assert logits.shape == (2, 25, 11)  # the first convolution halves the frames
    assert speech.spectrogram(np.zeros(8000, "float32")).shape == (49, 193)
    report = quality_vs_anchor.main(["--task", "speech", "--only", "anchor", "--epochs", "1", "--max-examples", "8",
                                     "--recipe-args", "--train-utterances 8 --test-passes 1", "--verbose", "0",
                                     "--output-dir", str(tmp_path)])
    result = report["anchor"]["keras ASR CTC example (small)"]
    assert result["test_digit_error_rate"] >= 0 and 0 <= result["test_utterance_accuracy"] <= 1
    assert result["epochs"] == 1 and result["parameters"] > 100_000
    assert json.loads((tmp_path / "quality_vs_anchor_speech.json").read_text())["task"] == "speech"
