"""AudioPreprocessor: any input kind and sample rate -> the same log-mel features; SpecAugment; clear errors."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from kformer.data import spoken_digits
from kformer.data.preprocessors import AudioPreprocessor
from kformer.data.preprocessors.audio import resample, spec_augment

pytestmark = pytest.mark.tf_only  # TensorFlow ops on every backend: checked once
RECORDING = spoken_digits.BUNDLED_DATA_DIR / "fsdd" / "recordings" / "7_jackson_0.wav"


def tone(seconds, rate, hertz=440.0):
    return (0.5 * np.sin(2 * np.pi * hertz * np.arange(int(seconds * rate)) / rate)).astype("float32")


def test_shapes_and_padding_masks():
    preprocessor = AudioPreprocessor()  # 8 kHz: frames of 200 samples every 80
    out = preprocessor.encode([tone(1.0, 8000), tone(0.5, 8000)])
    assert out["features"].shape == (2, 98, 40) and out["features"].dtype == np.float32
    assert out["padding_mask"].dtype == bool
    assert out["padding_mask"].sum(axis=1).tolist() == [98, (4000 - 200) // 80 + 1]
    assert not out["features"][1, 48:].any()  # padding frames are zeros
    assert abs(out["features"][0].mean()) < 1e-3  # normalized per recording
    short = preprocessor.encode([tone(0.01, 8000)])  # padded with silence to 7 frames
    assert short["padding_mask"].sum() == 7 and np.isfinite(short["features"]).all()


def test_every_input_kind_gives_the_same_features():
    preprocessor = AudioPreprocessor()
    wav = RECORDING.read_bytes()
    waveform = spoken_digits.read_wav(RECORDING)
    int16 = np.round(waveform * 32768).astype(np.int16)
    out = preprocessor.encode([str(RECORDING), wav, waveform, (waveform, 8000), int16])
    for i in range(1, 5):
        np.testing.assert_allclose(out["features"][i], out["features"][0], atol=1e-4)
    assert preprocessor.encode(tf.constant([wav]))["features"].shape == out["features"][:1].shape


@pytest.mark.parametrize("rate", [16000, 44100, 11025, 4000])
def test_any_sample_rate_is_resampled(rate):
    resampled = resample(tf.constant(tone(1.0, rate)), rate, 8000).numpy()
    assert resampled.shape == (8000,)
    np.testing.assert_allclose(resampled[200:-200], tone(1.0, 8000)[200:-200], atol=0.05)  # linear interpolation
    from scipy.signal import resample_poly  # an independent resampler makes the recording at `rate`

    speech = spoken_digits.read_wav(RECORDING)
    other = np.clip(resample_poly(speech, rate, 8000), -1, 1).astype("float32")
    out = AudioPreprocessor().encode([(other, rate), speech])
    lengths = out["padding_mask"].sum(axis=1)
    assert abs(int(lengths[0]) - int(lengths[1])) <= 1
    frames = int(lengths.min())
    a, b = out["features"][0, 2:frames - 2], out["features"][1, 2:frames - 2]
    if rate < 8000:  # what 4 kHz audio holds: the mel bins below 2 kHz
        a, b = a[:, :24], b[:, :24]
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.9


def test_downsampling_filters_out_what_the_new_rate_cannot_hold():
    high = tone(1.0, 16000, hertz=6000.0)  # above 4 kHz, the Nyquist frequency of 8 kHz
    resampled = resample(tf.constant(high), 16000, 8000).numpy()
    assert np.abs(resampled[200:-200]).max() < 0.05  # not folded back to 2 kHz


def test_spec_augment_masks_training_batches_only():
    preprocessor = AudioPreprocessor()
    audio = [tone(1.0, 8000, 300.0 + 100 * i) + 0.01 * np.random.default_rng(i).normal(size=8000).astype("float32")
             for i in range(4)]
    labels = np.array([[1, 2], [3, 0], [4, 4], [5, 0]], "int32")
    plain = next(iter(preprocessor.dataset(audio, labels, batch_size=4, pad_to_multiple=16)))
    augmented = next(iter(preprocessor.dataset(audio, labels, batch_size=4, augment=True, seed=3)))
    encoded = preprocessor.encode(audio)
    assert plain[0]["features"].shape == (4, 112, 40)  # 98 frames padded to a multiple of 16
    np.testing.assert_allclose(plain[0]["features"][:, :98], encoded["features"], atol=1e-5)
    np.testing.assert_array_equal(plain[1], labels)
    np.testing.assert_array_equal(augmented[0]["padding_mask"][:, :98], encoded["padding_mask"])
    zeros = (augmented[0]["features"].numpy()[:, :98] == 0)
    assert zeros.any() and not (plain[0]["features"].numpy()[:, :98] == 0).any()
    bands = zeros.all(axis=1).sum() + zeros.all(axis=2).sum()  # masked mel bins and frames
    assert bands > 0
    inputs = {"features": tf.ones((2, 50, 40)), "padding_mask": tf.ones((2, 50), tf.bool)}
    seed = tf.constant([7, 8], tf.int64)
    np.testing.assert_array_equal(spec_augment(inputs, seed)["features"], spec_augment(inputs, seed)["features"])


def test_shuffled_batches_hold_recordings_of_similar_length():
    preprocessor = AudioPreprocessor()
    rng = np.random.default_rng(0)
    seconds = rng.uniform(0.1, 1.0, 48)
    audio = [tone(s, 8000, 300.0 + 7 * i) for i, s in enumerate(seconds)]
    labels = np.arange(1, 49, dtype="int32")[:, None]  # label = recording number + 1
    lengths = preprocessor.encode(audio)["padding_mask"].sum(axis=1)

    def epoch(sort_window):
        ds = preprocessor.dataset(audio, labels, batch_size=4, shuffle=True, seed=5, sort_window=sort_window,
                                 pad_to_multiple=1)
        assert ds.cardinality() == 12
        return [(b[0]["padding_mask"].numpy().sum(axis=1), b[1].numpy()[:, 0] - 1, b[0]["features"].shape[1])
                for b in ds]

    for sort_window in (1, 4):
        batches = epoch(sort_window)
        assert len(batches) == 12
        rows = np.concatenate([b[1] for b in batches])
        assert sorted(rows.tolist()) == list(range(48))  # every recording once, labels with their own audio
        for real, rows, _ in batches:
            np.testing.assert_array_equal(real, lengths[rows])
    padded = {w: sum(width * 4 - real.sum() for real, _, width in epoch(w)) for w in (1, 4)}
    assert padded[4] < 0.5 * padded[1]  # sorted windows of 16 recordings: far less padding
    assert [b[1].tolist() for b in epoch(4)] == [b[1].tolist() for b in epoch(4)]  # seeded
    with pytest.raises(ValueError, match="sort_window"):
        preprocessor.dataset(audio, labels, shuffle=True, sort_window=0)


def test_config_round_trip():
    preprocessor = AudioPreprocessor(sample_rate=16000, num_mel_bins=24, frame_step_ms=20.0)
    config = json.loads(json.dumps(keras.saving.serialize_keras_object(preprocessor)))
    again = keras.saving.deserialize_keras_object(config)
    assert again.get_config() == preprocessor.get_config()
    out = again.encode([tone(1.0, 16000)])
    assert out["features"].shape == (1, 49, 24)


@pytest.mark.parametrize("audio, message", [
    ([np.zeros(100, "int32")], r"`audio\[0\]` must hold float samples in \[-1, 1\] or int16"),
    ([np.zeros(0, "float32")], r"`audio\[0\]` is empty"),
    ([tone(0.1, 8000), b"RIFF0000WAVEjunk"], r"`audio\[1\]` is not a readable WAV file: no `fmt ` chunk"),
    ([b"not a wav file"], r"`audio\[0\]` is not a WAV file"),
    ([np.full(100, 3.0, "float32")], r"in \[-1, 1\].*peak of 3"),
    ([np.array([0.1, np.nan], "float32")], r"finite samples"),
    (["no/such/file.wav"], r"not a WAV file's path"),
    ([(tone(0.1, 8000), 0)], r"positive int rate"),
    ([np.zeros((2, 2, 2), "float32")], r"1-D waveform"),
    ([], r"non-empty list"),
])
def test_bad_audio_gets_a_clear_error(audio, message):
    with pytest.raises(ValueError, match=message):
        AudioPreprocessor().encode(audio)


def _wav(tag, bits, data, rate=8000, channels=1, size=None):
    """A WAV file of `data` (sample bytes) with a `fmt ` chunk saying `tag` (1 PCM, 3 float), `bits` and `rate`."""
    import struct

    fmt = struct.pack("<HHIIHH", tag, channels, rate, (rate * channels * bits // 8) % 2 ** 32, channels * bits // 8,
                      bits)
    size = len(data) if size is None else size
    return (b"RIFF" + struct.pack("<I", 28 + len(fmt) + len(data)) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt))
            + fmt + b"data" + struct.pack("<I", size) + data)


def test_every_sample_width_a_wav_file_holds_gives_the_16_bit_features():
    """Issue 75 (10): 8-, 24- and 32-bit PCM and float WAV files failed inside TensorFlow's `decode_wav`
    (16-bit only) with a graph error. They are decoded; a recording stored in each width (the same samples,
    shifted: no rounding) gives its 16-bit features, and 8 bits its samples within 8-bit rounding."""
    from kformer.data.preprocessors.audio import read_wav

    pcm = np.round(spoken_digits.read_wav(RECORDING) * 32768).astype(np.int64)  # the recording's 16-bit samples
    files = {"PCM 16": _wav(1, 16, pcm.astype("<i2").tobytes()),
             "PCM 24": _wav(1, 24, b"".join(int(v).to_bytes(3, "little", signed=True) for v in pcm << 8)),
             "PCM 32": _wav(1, 32, (pcm << 16).astype("<i4").tobytes()),
             "float 32": _wav(3, 32, (pcm / 32768).astype("<f4").tobytes()),
             "float 64": _wav(3, 64, (pcm / 32768).astype("<f8").tobytes()),
             "stereo": _wav(1, 16, np.repeat(pcm, 2).astype("<i2").tobytes(), channels=2)}
    for name, data in files.items():
        decoded, rate = read_wav(data)
        np.testing.assert_array_equal(decoded, pcm / 32768, err_msg=name)
        assert rate == 8000
    out = AudioPreprocessor().encode(list(files.values()))
    for i, name in enumerate(files):  # the 16-bit re-encoding rounds by at most one step
        np.testing.assert_allclose(out["features"][i], out["features"][0], atol=1e-2, err_msg=name)
    eight = (np.clip(np.round(pcm / 256), -128, 127) + 128).astype("u1")
    np.testing.assert_allclose(read_wav(_wav(1, 8, eight.tobytes()))[0], pcm / 32768, atol=1 / 128 + 1e-6)


@pytest.mark.parametrize("audio, message", [
    (_wav(1, 16, bytes(1600), rate=0), r"`audio\[0\]` has a sample rate of 0 Hz in its header"),
    (_wav(1, 16, bytes(1600), rate=4_000_000_000), r"a sample rate of 4000000000 Hz"),
    (_wav(1, 16, bytes(1600), size=10 ** 6), r"its data chunk claims 1000000 bytes, but the file holds 1600"),
    (_wav(6, 8, bytes(100)), r"holds format 6 audio of 8 bits and 1 channels; expected PCM of 8, 16, 24 or 32"),
    (b"RIFF" + bytes(4) + b"WAVE" + b"junk" * 10, r"is not a readable WAV file: no `fmt ` chunk"),
    (_wav(1, 16, bytes(2 * 8000 * 61)), r"`audio\[0\]` is 61.0 s long, over this preprocessor's max_seconds=60.0"),
], ids=["rate 0", "rate 4e9", "data past the end", "A-law", "junk chunks", "too long"])
def test_damaged_or_unreadable_wav_files_are_named(audio, message):
    """Each failed inside TensorFlow (`InvalidArgumentError: Graph execution error`, or a bare RuntimeError)."""
    with pytest.raises(ValueError, match=message):
        AudioPreprocessor().encode([audio])


def test_empty_wav_and_bad_arguments():
    empty = tf.audio.encode_wav(np.zeros((0, 1), "float32"), 8000).numpy()
    with pytest.raises(ValueError, match=r"holds no audio"):
        AudioPreprocessor().encode([empty])
    with pytest.raises(ValueError, match=r"`num_mel_bins` must be a positive int. Received: num_mel_bins=0"):
        AudioPreprocessor(num_mel_bins=0)
    with pytest.raises(ValueError, match=r"`frame_step_ms` must not exceed"):
        AudioPreprocessor(frame_length_ms=10, frame_step_ms=20)
    with pytest.raises(tf.errors.InvalidArgumentError, match="empty"):  # the served graph refuses it too
        AudioPreprocessor().inputs(tf.constant([empty]))


def test_drawn_wav_headers_give_features_or_a_named_error():
    """Issue 75 (10): WAV files whose format, width, channels, rate and data size are drawn from strategies
    give finite features or a ValueError naming `audio[0]`, never an error from inside TensorFlow."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    preprocessor = AudioPreprocessor()

    @settings(max_examples=40)
    @given(tag=st.sampled_from([1, 3, 6, 0xFFFE, 0]), bits=st.sampled_from([0, 8, 12, 16, 24, 32, 64]),
           channels=st.integers(0, 3), rate=st.sampled_from([0, 1, 4000, 8000, 44100, 10 ** 6, 2 ** 32 - 1]),
           samples=st.integers(0, 3000), size=st.one_of(st.none(), st.integers(0, 2 ** 32 - 1)))
    def check(tag, bits, channels, rate, samples, size):
        data = np.random.default_rng(samples).integers(0, 256, samples * max(1, bits // 8) * max(1, channels),
                                                       dtype=np.uint8).tobytes()
        if tag == 3 and bits in (32, 64):  # float samples in [-1, 1]
            data = np.random.default_rng(samples).uniform(-1, 1, len(data) // (bits // 8)).astype(
                f"<f{bits // 8}").tobytes()
        wav = _wav(tag, bits, data, rate=rate, channels=channels, size=size)
        try:
            out = preprocessor.encode([wav])
        except ValueError as error:
            outcomes.append("refused")
            assert "`audio[0]`" in str(error), error
            return
        outcomes.append("encoded")
        assert np.isfinite(out["features"]).all() and out["padding_mask"].any()

    outcomes = []
    check()
    assert {"refused", "encoded"} <= set(outcomes), sorted(set(outcomes))  # both kinds were drawn
