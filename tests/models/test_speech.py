"""SpeechRecognizer: CTC training on every backend, transcribe on raw audio, .keras round trip."""

import keras
import numpy as np
import pytest

from kformer import models
from kformer.data import spoken_digits
from kformer.data.preprocessors import AudioPreprocessor
from kformer.models.speech_recognizer import greedy_ctc_decode
from tests.helpers import to_numpy

RECORDINGS = spoken_digits.BUNDLED_DATA_DIR / "fsdd" / "recordings"


def tiny(**kwargs):
    keras.utils.set_random_seed(0)
    return models.speech_recognizer(preset="conformer_speech_tiny", **{
        "num_features": 16, "num_layers": 1, "hidden_dim": 16, "num_heads": 2, "kernel_size": 3,
        "intermediate_dim": 32, "preprocessor": AudioPreprocessor(num_mel_bins=16), **kwargs})


def test_greedy_decoding_collapses_repeats_and_drops_blanks_and_padding():
    path = [[2, 2, 0, 2, 3, 3, 1, 1], [1, 0, 1, 1, 4, 4, 4, 4]]
    logits = np.eye(5, dtype="float32")[path] * 4.0
    mask = np.array([[True] * 8, [True] * 5 + [False] * 3])
    ids = to_numpy(greedy_ctc_decode(logits, mask))
    assert ids.tolist() == [[2, 0, 0, 2, 3, 0, 1, 0], [1, 0, 1, 0, 4, 0, 0, 0]]


def test_fit_transcribe_and_reload(tmp_path):
    model = tiny()
    audio, texts = spoken_digits.make_utterances(spoken_digits.load_recordings("train"), count=8, seed=0,
                                                 max_digits=2)
    model.compile(keras.optimizers.Adam(3e-3))
    history = model.fit(audio, texts, batch_size=4, epochs=2, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    assert np.isfinite(model.evaluate(audio[:4], texts[:4], verbose=0))
    wav = (RECORDINGS / "4_george_0.wav").read_bytes()
    inputs = [str(RECORDINGS / "4_george_0.wav"), wav, spoken_digits.read_wav(RECORDINGS / "4_george_0.wav")]
    transcripts = model.transcribe(inputs)
    assert len(transcripts) == 3 and len(set(transcripts)) == 1  # the same recording three ways
    assert all(set(t) <= set("0123456789") for t in transcripts)
    model.save(tmp_path / "speech.keras")
    reloaded = keras.saving.load_model(tmp_path / "speech.keras", safe_mode=True)
    assert isinstance(reloaded, models.SpeechRecognizer) and isinstance(reloaded.preprocessor, AudioPreprocessor)
    assert reloaded.vocabulary == list("0123456789")
    features = model.preprocessor.encode(inputs)
    np.testing.assert_allclose(to_numpy(reloaded.predict(features, verbose=0)),
                               to_numpy(model.predict(features, verbose=0)), atol=1e-5)
    assert reloaded.transcribe(inputs) == transcripts


def test_ctc_loss_is_per_label_token_and_ignores_padding():
    model = tiny(dropout=0.0)
    inputs = model.preprocessor.encode([spoken_digits.read_wav(RECORDINGS / "1_theo_0.wav")] * 2)
    longer = {"features": np.pad(inputs["features"], [[0, 0], [0, 40], [0, 0]], constant_values=3.0),
              "padding_mask": np.pad(inputs["padding_mask"], [[0, 0], [0, 40]])}
    labels = np.array([[2, 0, 0], [2, 0, 0]], "int32")
    loss = float(model.compute_loss(inputs, labels, model(inputs)))
    padded = float(model.compute_loss(longer, labels, model(longer)))
    np.testing.assert_allclose(padded, loss, rtol=1e-4)
    per_row = to_numpy(keras.ops.ctc_loss(labels, model(inputs), np.array([1, 1]),
                                          to_numpy(model.output_padding_mask(inputs["padding_mask"])).sum(1)))
    np.testing.assert_allclose(loss, per_row.mean(), rtol=1e-4)


@pytest.mark.once("the argument is checked before any audio is read or the model runs")
@pytest.mark.parametrize("batch_size", [-1, 0, 2.5])
def test_transcribe_refuses_a_batch_size_that_is_not_a_positive_int(batch_size):
    """Issue 75 (7): -1 returned [] and 0 or 2.5 failed inside `range()`."""
    with pytest.raises(ValueError, match=f"`batch_size` must be a positive int. Received: batch_size={batch_size}"):
        tiny().transcribe([np.zeros(800, "float32")], batch_size=batch_size)


def test_bad_arguments_name_the_argument():
    model = tiny()
    with pytest.raises(ValueError, match=r"`y`\[1\] must be a non-empty transcript.*Received: '4a'"):
        model.encode_transcripts(["12", "4a"])
    with pytest.raises(ValueError, match="`vocabulary` must be distinct one-character tokens"):
        models.SpeechRecognizer(vocabulary=["ab", "c"])
    with pytest.raises(ValueError, match="must make 16 features per frame.*num_mel_bins=40"):
        tiny(preprocessor=AudioPreprocessor())
    with pytest.raises(ValueError, match="`transcribe` needs a preprocessor"):
        tiny(preprocessor=None).transcribe([np.zeros(800, "float32")])
    with pytest.raises(ValueError, match=r"`audio\[0\]` must hold float samples"):
        model.transcribe([np.zeros(800, "int64")])
