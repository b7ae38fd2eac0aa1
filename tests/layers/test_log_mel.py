"""LogMelSpectrogram: Whisper's log-mel features, checked against transformers' WhisperFeatureExtractor."""

import pathlib
import wave

import keras
import numpy as np
import pytest

from kformer.layers import LogMelSpectrogram
from tests.helpers import JIT, run_layer_test, to_numpy

transformers = pytest.importorskip("transformers")  # the reference only; kformer never imports it
resample_poly = pytest.importorskip("scipy.signal").resample_poly
from transformers.audio_utils import mel_filter_bank, spectrogram, window_function  # noqa: E402

RECORDINGS = pathlib.Path(__file__).resolve().parents[2] / "data" / "fsdd" / "recordings"
SAMPLES = 480000  # Whisper's 30 s at 16 kHz


def read_wav(name):
    """An 8 kHz FSDD recording as float32 in [-1, 1]."""
    with wave.open(str(RECORDINGS / name)) as f:
        assert (f.getnchannels(), f.getsampwidth(), f.getframerate()) == (1, 2, 8000)
        return np.frombuffer(f.readframes(f.getnframes()), "<i2").astype("float32") / 32768.0


def whisper_audio():
    """Two recordings upsampled to 16 kHz, a 440 Hz tone and digital silence, of different lengths."""
    speech = [resample_poly(read_wav(name), 2, 1).astype("float32") for name in ("3_jackson_0.wav", "7_theo_5.wav")]
    tone = 0.5 * np.sin(2 * np.pi * 440.0 * np.arange(32000) / 16000)
    return [*speech, tone.astype("float32"), np.zeros(16000, "float32")]


def pad(audio, samples=SAMPLES):
    """`(len(audio), samples)`: each waveform cut or followed by zeros, as the extractor's
    `padding="max_length", truncation=True`."""
    return np.stack([np.pad(a[:samples], (0, max(0, samples - len(a)))) for a in audio])


def reference(waveform, fft_length, hop_length, bank):
    """`WhisperFeatureExtractor._np_extract_fbank_features` for one waveform with other settings."""
    log_spec = spectrogram(waveform, window_function(fft_length, "hann"), frame_length=fft_length,
                           hop_length=hop_length, power=2.0, mel_filters=bank, log_mel="log10")[:, :-1]
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).T  # (frames, num_mel_bins)


@pytest.fixture(scope="module")
def whisper():
    """(padded waveforms, the extractor's features, its float64 NumPy path's), both `(batch, frames, 80)`."""
    audio = whisper_audio()
    extractor = transformers.WhisperFeatureExtractor()
    padded = pad(audio)
    called = extractor(audio, sampling_rate=16000, return_tensors="np").input_features  # torch.stft if installed
    numpy_path = extractor._np_extract_fbank_features(padded, "cpu")
    return padded, called.transpose(0, 2, 1), numpy_path.transpose(0, 2, 1)


@pytest.mark.once("the filter bank is NumPy, made in __init__; no backend code runs")
@pytest.mark.parametrize("kwargs", [
    {},  # Whisper
    {"num_mel_bins": 128},  # Whisper large-v3
    {"sample_rate": 8000, "fft_length": 256, "hop_length": 80, "num_mel_bins": 40, "min_frequency": 20.0,
     "max_frequency": 3800.0},
])
def test_mel_filter_bank_equals_transformers(kwargs):
    layer = LogMelSpectrogram(**kwargs)
    sample_rate = layer.sample_rate
    want = mel_filter_bank(num_frequency_bins=1 + layer.fft_length // 2, num_mel_filters=layer.num_mel_bins,
                           min_frequency=layer.min_frequency, max_frequency=layer.max_frequency or sample_rate / 2,
                           sampling_rate=sample_rate, norm="slaney", mel_scale="slaney")
    assert layer.mel_filters.shape == want.shape == (1 + layer.fft_length // 2, layer.num_mel_bins)
    np.testing.assert_allclose(layer.mel_filters, want, rtol=0, atol=1e-7)


def test_features_equal_the_whisper_feature_extractor(whisper):
    padded, called, numpy_path = whisper
    features = to_numpy(LogMelSpectrogram()(padded))
    assert features.shape == called.shape == (4, 3000, 80) and features.dtype == np.float32
    for name, want in (("extractor", called), ("float64 NumPy path", numpy_path)):
        worst = np.abs(features - want).max(axis=(1, 2))  # speech, speech, tone, silence
        assert worst.max() < 1e-4, f"max abs difference from the {name}: {worst}"
    np.testing.assert_array_equal(features[3], -1.5)  # silence: (log10(1e-10) + 4) / 4


def test_any_length_other_settings_and_the_config_round_trip():
    """Unpadded 8 kHz speech of the recording's own length, an odd window; a clone from the config."""
    waveform = read_wav("5_george_0.wav")
    layer = LogMelSpectrogram(sample_rate=8000, fft_length=255, hop_length=80, num_mel_bins=40, min_frequency=20.0,
                              max_frequency=3800.0, name="features")
    features = to_numpy(layer(waveform[None]))[0]
    want = reference(waveform, 255, 80, layer.mel_filters)
    assert features.shape == want.shape == layer.compute_output_shape((1, len(waveform)))[1:]
    assert np.abs(features - want).max() < 1e-4, np.abs(features - want).max()
    config = layer.get_config()
    clone = LogMelSpectrogram.from_config(config)
    assert clone.get_config() == config and config["max_frequency"] == 3800.0
    np.testing.assert_array_equal(to_numpy(clone(waveform[None]))[0], features)


def test_layer_contract(tmp_path):
    """Eager and symbolic shapes, config round trip and `.keras` reload (no weights: nothing to fit)."""
    audio = pad(whisper_audio()[2:], 1600)  # 0.1 s of tone, 0.1 s of silence
    run_layer_test(LogMelSpectrogram, {}, audio, (2, 10, 80), run_fit=False, run_mixed_precision=False,
                   tmp_path=tmp_path)


def test_compiled_with_unknown_lengths_and_float32_under_mixed_precision():
    audio = pad(whisper_audio()[:2], 8000)
    waveforms = keras.Input((None,), name="waveforms")
    layer = LogMelSpectrogram(dtype="mixed_float16")
    model = keras.Model(waveforms, layer(waveforms))
    assert layer.compute_dtype == "float32"
    assert tuple(model.output.shape) == (None, None, 80) and model.output.dtype == "float32"
    model.compile(jit_compile=JIT)  # XLA on TensorFlow and JAX
    for samples in (8000, 4000):
        want = np.stack([reference(a[:samples].astype("float64"), 400, 160, layer.mel_filters) for a in audio])
        np.testing.assert_allclose(model.predict(audio[:, :samples], verbose=0), want, atol=1e-4)


@pytest.mark.tf_only
def test_traces_into_a_tensorflow_graph_of_unknown_shape():
    import tensorflow as tf

    layer = LogMelSpectrogram()
    graph = tf.function(layer, input_signature=[tf.TensorSpec([None, None], tf.float32)]).get_concrete_function()
    audio = pad(whisper_audio()[:2], 8000)
    np.testing.assert_allclose(graph(tf.constant(audio)).numpy(), to_numpy(layer(audio)), atol=1e-6)


@pytest.mark.once("argument checks in __init__, before any backend code")
@pytest.mark.parametrize("kwargs, message", [
    ({"sample_rate": 0}, r"sample_rate=0"),
    ({"sample_rate": 16000.0}, r"sample_rate=16000.0"),
    ({"fft_length": 1}, r"fft_length=1"),
    ({"hop_length": 0}, r"hop_length=0"),
    ({"num_mel_bins": -80}, r"num_mel_bins=-80"),
    ({"min_frequency": -1.0}, r"min_frequency=-1.0"),
    ({"min_frequency": 8000.0}, r"min_frequency=8000.0"),
    ({"min_frequency": "0"}, r"min_frequency='0'"),
    ({"max_frequency": 9000.0}, r"sample_rate / 2 = 8000.0\]. Received: max_frequency=9000.0"),
    ({"min_frequency": 100.0, "max_frequency": 100.0}, r"max_frequency=100.0"),
    ({"max_frequency": float("nan")}, r"max_frequency=nan"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LogMelSpectrogram(**kwargs)


@pytest.mark.parametrize("shape, message", [
    ((16000,), r"`inputs` must be waveforms \(batch, samples\). Received: inputs.shape=\(16000,\)"),
    ((1, 16000, 1), r"Received: inputs.shape=\(1, 16000, 1\)"),
    ((1, 200), r"more than fft_length // 2 = 200 samples.*inputs.shape=\(1, 200\)"),
])
def test_bad_inputs_are_named(shape, message):
    layer = LogMelSpectrogram()
    with pytest.raises(ValueError, match=message):
        layer(np.zeros(shape, "float32"))
    with pytest.raises(ValueError, match=message):
        layer.compute_output_shape(shape)
