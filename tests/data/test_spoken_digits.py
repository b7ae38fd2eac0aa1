"""FSDD recordings (bundled, tfds) and the digit-string utterances built from them."""

import collections

import numpy as np
import pytest

from kformer.data import spoken_digits

pytestmark = pytest.mark.tf_only  # numpy and tfds: no Keras backend code


def test_bundled_sample_follows_the_official_split():
    test = spoken_digits.load_recordings("test")
    train = spoken_digits.load_recordings("train")
    assert {r.index for r in test} <= set(range(5)) and min(r.index for r in train) >= 5
    assert len(test) == len(train) == 30 and {r.speaker for r in test} == {"george", "jackson", "theo"}
    assert all(r.waveform.dtype == np.float32 and np.abs(r.waveform).max() <= 1 for r in test)
    without = spoken_digits.load_recordings("all", exclude_speakers=("theo",))
    assert len(without) == 40 and "theo" not in {r.speaker for r in without}
    with pytest.raises(ValueError, match=r"`split` must be one of"):
        spoken_digits.load_recordings("validation")
    with pytest.raises(ValueError, match=r"No FSDD recordings in .*nowhere"):
        spoken_digits.load_recordings("test", data_dir="/nowhere")


def test_utterances_join_one_speaker_and_are_seeded():
    recordings = spoken_digits.load_recordings("test")
    audio, texts = spoken_digits.make_utterances(recordings, count=20, seed=4)
    again, same = spoken_digits.make_utterances(recordings, count=20, seed=4)
    assert texts == same and all(np.array_equal(a, b) for a, b in zip(audio, again))
    assert all(1 <= len(t) <= 7 and t.isdigit() for t in texts)
    lengths = {(r.speaker, r.digit): len(r.waveform) for r in recordings}
    for waveform, text in zip(audio, texts):  # recordings plus 2 to 8 silences of 0.05 to 0.3 s
        speech = [min(n for (s, d), n in lengths.items() if d == digit) for digit in text]
        assert len(waveform) >= sum(speech) + 400 * (len(text) + 1)


def test_edge_silences_are_drawn_apart_from_the_gaps():
    recordings = spoken_digits.load_recordings("test")
    audio, texts = spoken_digits.make_utterances(recordings, count=6, seed=2, edge_seconds=(0.0, 0.0))
    by_digit = {}
    for r in recordings:
        by_digit.setdefault(r.digit, []).append(r.waveform)
    for waveform, text in zip(audio, texts):  # starts and ends right at a recording of its first and last digit
        assert any(np.array_equal(waveform[:len(w)], np.clip(w, -1, 1)) for w in by_digit[text[0]])
        assert any(np.array_equal(waveform[-len(w):], np.clip(w, -1, 1)) for w in by_digit[text[-1]])
    single, digit = spoken_digits.make_utterances(recordings, count=3, seed=2, min_digits=1, max_digits=1,
                                                  edge_seconds=(0.0, 0.0))
    assert all(any(np.array_equal(a, w) for w in by_digit[d]) for a, d in zip(single, digit))  # as published
    default, _ = spoken_digits.make_utterances(recordings, count=6, seed=2)
    same, _ = spoken_digits.make_utterances(recordings, count=6, seed=2, edge_seconds=(0.05, 0.3))
    assert all(np.array_equal(a, b) for a, b in zip(default, same))  # edges default to the gaps


def test_test_utterances_use_each_test_recording_exactly_passes_times():
    recordings = spoken_digits.load_recordings("test")
    _, texts = spoken_digits.make_utterances(recordings, passes=3, seed=0)
    assert collections.Counter("".join(texts)) == collections.Counter(r.digit for r in recordings * 3)
    with pytest.raises(ValueError, match="one of `count` and `passes`"):
        spoken_digits.make_utterances(recordings, count=3, passes=1)


def test_tfds_path_splits_by_file_index():
    import tensorflow as tf
    import tensorflow_datasets as tfds

    names = ["3_theo_1.wav", "3_theo_7.wav", "9_lucas_4.wav"]

    def fake(self, split, **kwargs):
        return tf.data.Dataset.from_tensor_slices({
            "audio": tf.zeros((3, 800), tf.int64), "label": tf.constant([3, 3, 9], tf.int64),
            "audio/filename": tf.constant(names)})

    with tfds.testing.mock_data(as_dataset_fn=fake):
        test = spoken_digits.load_recordings_tfds("test")
        train = spoken_digits.load_recordings_tfds("train")
        lucas = spoken_digits.load_recordings_tfds("all", speakers=["lucas"])
    assert [(r.digit, r.speaker, r.index) for r in test] == [("3", "theo", 1), ("9", "lucas", 4)]
    assert [r.index for r in train] == [7] and train[0].waveform.shape == (800,)
    assert [r.speaker for r in lucas] == ["lucas"]
