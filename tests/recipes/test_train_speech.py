"""The speech recipe end to end on the bundled FSDD sample: train, score, held-out speaker, save, export."""

import json
import subprocess
import sys

import numpy as np
import pytest

from kformer import models
from recipes import train_speech
from tests.helpers import assert_figures

pytestmark = pytest.mark.slow


@pytest.mark.only_backend("torch")  # with its export (the TensorFlow worker), served in-process; the model trains
# on all three
def test_speech_recipe(tmp_path):
    import tensorflow as tf

    run_dir = train_speech.main([
        "--epochs=1", "--max-examples=16", "--train-utterances=16", "--test-passes=1", "--batch-size=8",
        "--verbose=2", "--seed=3", f"--output-dir={tmp_path}"])
    assert run_dir == tmp_path / "conformer_speech_tiny_fsdd" / "1"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in ("test_digit_error_rate", "ood_speaker_digit_error_rate", "ood_isolated_digit_error_rate"):
        assert metrics[key] >= 0.0
    for key in ("test_utterance_accuracy", "ood_speaker_utterance_accuracy", "ood_isolated_utterance_accuracy"):
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["isolated_examples"] == 16  # --max-examples of the bundled test recordings, one digit each
    assert metrics["train_examples"] == 16 and metrics["test_examples"] <= 16
    assert {"reference", "transcript"} <= set(metrics["samples"][0])
    card = (run_dir / "README.md").read_text()
    assert "## Out of distribution" in card and "| ood_speaker_digit_error_rate |" in card
    assert "| ood_isolated_utterance_accuracy |" in card and "as published" in card
    assert "speech_to_text" in card
    assert_figures(run_dir, names=("curves.png", "attention.png", "spectrogram.png"), min_pixels=(100, 300))
    model = models.load(run_dir)
    wav = (train_speech_recording()).read_bytes()
    transcript = model.transcribe([wav])[0]
    served = tf.saved_model.load(str(run_dir)).signatures["speech_to_text"](wav_bytes=tf.constant([wav]))
    assert served["transcript"].numpy()[0].decode() == transcript
    check = subprocess.run([sys.executable, "-m", "kformer.cli", "check-serving", str(run_dir)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def train_speech_recording():
    from kformer.data import spoken_digits

    return spoken_digits.BUNDLED_DATA_DIR / "fsdd" / "recordings" / "8_jackson_0.wav"


@pytest.mark.only_backend("torch")  # argument checks only
def test_speech_recipe_flags():
    args = train_speech.parse_args(["--ood-speaker=none"])
    assert args.ood_speaker is None and args.preset == "conformer_speech_tiny"
    assert (args.epochs, args.patience, args.clip_norm) == (14, 14, 1.0)  # the schedule runs to its end
    assert train_speech.parse_args(["--clip-norm=0"]).clip_norm == 0.0
    with pytest.raises(SystemExit):
        train_speech.parse_args(["--clip-norm=-1"])
    optimizer = models.adamw(1e-3, 10, global_clipnorm=1.0)
    assert optimizer.global_clipnorm == 1.0 and models.adamw(1e-3, 10).global_clipnorm is None
    with pytest.raises(SystemExit):
        train_speech.parse_args(["--preset=vit_tiny"])
    assert train_speech.TRAIN_EDGE_SECONDS[0] == 0.0  # some training utterances start right at the speech
    assert train_speech.edit_distance("4071", "471") == 1 and train_speech.edit_distance("", "12") == 2
    assert np.isclose(train_speech.edit_distance("123", "321"), 2)
