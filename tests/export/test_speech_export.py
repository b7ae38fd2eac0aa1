"""The `speech_to_text` signature: WAV bytes in, the transcript `SpeechRecognizer.transcribe` gives out,
answered by a client with TensorFlow only and loadable by a stock TF Serving (`kformer check-serving`)."""

import pathlib
import pickle
import subprocess
import sys

import keras
import numpy as np
import pytest

from kformer import export, models
from kformer.data import spoken_digits
from kformer.data.preprocessors import AudioPreprocessor

RECORDINGS = spoken_digits.BUNDLED_DATA_DIR / "fsdd" / "recordings"
# JAX and torch exports run in the same TensorFlow worker (tests/export/test_export.py covers it)
pytestmark = pytest.mark.only_backend("tensorflow")


@pytest.fixture(scope="module")
def recognizer():
    keras.utils.set_random_seed(0)
    model = models.speech_recognizer(preset="conformer_speech_tiny", num_features=16, num_layers=1, hidden_dim=16,
                                     num_heads=2, kernel_size=3, intermediate_dim=32, dropout=0.0,
                                     preprocessor=AudioPreprocessor(num_mel_bins=16))
    kernel, bias = model.head.get_weights()
    model.head.set_weights([kernel * 30.0, bias])  # untrained, but emitting varied digits, not only blanks
    return model


def test_served_transcripts_equal_transcribe(recognizer, tmp_path):
    import tensorflow as tf

    path = export.export_for_serving(recognizer, tmp_path / "speech")
    wavs = [(RECORDINGS / name).read_bytes() for name in ("0_george_0.wav", "5_theo_0.wav", "9_jackson_0.wav")]
    waveform = spoken_digits.read_wav(RECORDINGS / "2_george_0.wav")
    from scipy.signal import resample_poly

    wide = tf.audio.encode_wav(np.clip(resample_poly(waveform, 2, 1), -1, 1).astype("float32")[:, None], 16000)
    wavs.append(wide.numpy())  # 16 kHz: resampled in the graph
    batch = np.array(wavs, dtype=object)
    requests = [(str(path), "speech_to_text", {"wav_bytes": batch}, False),
                (str(path), "serving_default", {"wav_bytes": batch[:1]}, False),
                (str(path), "speech_to_text", {"wav_bytes": np.array([b"not a wav"], dtype=object)}, False),
                (str(path), "speech_to_text", {"wav_bytes": np.array(
                    [tf.audio.encode_wav(np.zeros((0, 1), "float32"), 8000).numpy()], dtype=object)}, False),
                (str(path), "speech_to_text", {"wav_bytes": np.array([], dtype=object)}, False),
                (str(path), "speech_to_text", {"wav_bytes": np.array([b""], dtype=object)}, False)]
    with open(tmp_path / "requests.pkl", "wb") as f:
        pickle.dump(requests, f)
    client = pathlib.Path(__file__).with_name("serving_client.py")
    run = subprocess.run([sys.executable, str(client), str(tmp_path / "requests.pkl"), str(tmp_path / "results.pkl")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    with open(tmp_path / "results.pkl", "rb") as f:
        answer = pickle.load(f)
    assert not answer["kformer_imported"]
    assert [error for _, error in answer["warmup"][str(path)]] == [None, None]
    served, first, junk, empty, no_rows, no_bytes = answer["results"]
    # an empty batch answers an empty batch (a ragged-tensor rank error before); b"" says it is not a WAV file
    assert no_rows["transcript"].shape == (0,) and no_rows["token_ids"].shape == (0, 0), no_rows
    assert "InvalidArgument" in no_bytes["error"] and "not a WAV file (expected RIFF/WAVE bytes)" in no_bytes["error"]
    want = recognizer.transcribe(wavs)
    assert [t.decode() for t in served["transcript"]] == want
    assert any(want) and len(set(want)) > 1  # a real comparison: digits emitted, and not the same everywhere
    assert [t.decode() for t in first["transcript"]] == want[:1]
    features = recognizer.preprocessor.encode(wavs)
    ids = keras.ops.convert_to_numpy(recognizer.decode_ids(recognizer.predict(features, verbose=0),
                                                           features["padding_mask"]))
    np.testing.assert_array_equal(served["token_ids"], ids)
    assert "InvalidArgument" in junk["error"] and "RIFF" in junk["error"]
    assert "InvalidArgument" in empty["error"] and "empty" in empty["error"]
    check = subprocess.run([sys.executable, "-m", "kformer.cli", "check-serving", str(path)],
                           capture_output=True, text=True)
    assert check.returncode == 0 and "speech_to_text: ok" in check.stdout, check.stdout + check.stderr


def test_export_needs_the_audio_preprocessor(recognizer, tmp_path):
    bare = models.SpeechRecognizer.from_config({**recognizer.get_config(), "preprocessor": None})
    with pytest.raises(ValueError, match="needs its preprocessor"):
        export.export_for_serving(bare, tmp_path / "bare")
