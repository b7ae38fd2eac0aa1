"""Free Spoken Digit Dataset (FSDD) recordings and the digit-string utterances built from them.

FSDD (Jackson et al., CC BY-SA 4.0): 3,000 recordings `{digit}_{speaker}_{index}.wav`, 6 speakers,
8 kHz mono. Official split: indices 0-4 are test, 5-49 train. `make_utterances` joins recordings of
one speaker, with short seeded silences between them, into utterances of 1-7 digits whose
transcript is the digit string ("407").

    from kformer.data import spoken_digits
    train = spoken_digits.load_recordings("train")          # bundled sample; data_dir= for all 3,000
    audio, transcripts = spoken_digits.make_utterances(train, count=100, seed=0)
"""

import collections
import io
import pathlib
import re
import wave

import numpy as np

BUNDLED_DATA_DIR = pathlib.Path(__file__).resolve().parents[2] / "data"
SAMPLE_RATE = 8000
SPLITS = ("train", "test", "all")
TEST_INDICES = range(0, 5)  # the dataset README's split: 0-4 test, 5-49 train
FILE_NAME = re.compile(r"^(\d)_([a-z]+)_(\d+)\.wav$")
Recording = collections.namedtuple("Recording", "waveform digit speaker index")
Recording.__doc__ = """One FSDD recording.

Args:
    waveform: float32 `(samples,)` at 8 kHz, in [-1, 1].
    digit: str. The digit spoken, "0" to "9".
    speaker: str. The speaker's name.
    index: int. The recording's number (0-4: official test split).

Example:

>>> Recording(np.zeros(80, "float32"), "7", "theo", 3).speaker
'theo'
"""


def _in_split(index, split):
    return split == "all" or (index in TEST_INDICES) == (split == "test")


def _check_split(split):
    if split not in SPLITS:
        raise ValueError(f"`split` must be one of {SPLITS}. Received: split={split!r}")


def load_recordings(split, data_dir=None, speakers=None, exclude_speakers=()):
    """The FSDD recordings of `split` from `data_dir/fsdd/recordings/` (default: the bundled sample).

    Args:
        split: `"train"` (indices 5-49), `"test"` (0-4) or `"all"`.
        data_dir: folder holding `fsdd/recordings/*.wav` (the full data set),
            or None for the sample bundled in `data/fsdd/`.
        speakers: iterable of speaker names to keep, or None for all.
        exclude_speakers: speaker names to leave out. Defaults to `()`.

    Returns:
        list of `Recording`, sorted by file name.

    Example:

    >>> test = load_recordings("test")
    >>> sorted({r.digit for r in test}) == list("0123456789"), test[0].waveform.dtype
    (True, dtype('float32'))
    """
    _check_split(split)
    folder = pathlib.Path(data_dir or BUNDLED_DATA_DIR) / "fsdd" / "recordings"
    if not folder.is_dir():
        raise ValueError(f"No FSDD recordings in {folder}: expected `{{digit}}_{{speaker}}_{{index}}.wav` files "
                         "(pass the directory holding fsdd/recordings/ as data_dir / --data-dir)")
    recordings = []
    for path in sorted(folder.glob("*.wav")):
        match = FILE_NAME.match(path.name)
        if not match:
            continue
        digit, speaker, index = match.group(1), match.group(2), int(match.group(3))
        if not _in_split(index, split) or speaker in exclude_speakers or (speakers and speaker not in speakers):
            continue
        recordings.append(Recording(read_wav(path), digit, speaker, index))
    if not recordings:
        raise ValueError(f"No {split} recordings in {folder} for speakers={speakers}, "
                         f"exclude_speakers={list(exclude_speakers)}")
    return recordings


def read_wav(path_or_bytes):
    """A 16-bit PCM mono WAV file (path or bytes) at 8 kHz -> float32 waveform in [-1, 1].

    Args:
        path_or_bytes: path of a WAV file, or its bytes.

    Example:

    >>> path = BUNDLED_DATA_DIR / "fsdd" / "recordings" / "0_george_0.wav"
    >>> read_wav(path).shape
    (2384,)
    """
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else pathlib.Path(path_or_bytes).read_bytes()
    try:
        with wave.open(io.BytesIO(data)) as f:
            params, frames = f.getparams(), f.readframes(f.getnframes())
    except (wave.Error, EOFError) as err:
        raise ValueError(f"Corrupt FSDD recording {path_or_bytes if not isinstance(path_or_bytes, bytes) else ''}: "
                         f"expected 16-bit PCM WAV ({err})") from err
    if params.sampwidth != 2 or params.framerate != SAMPLE_RATE:
        raise ValueError(f"FSDD recording {path_or_bytes}: expected 16-bit samples at {SAMPLE_RATE} Hz. Received: "
                         f"{8 * params.sampwidth}-bit at {params.framerate} Hz")
    samples = np.frombuffer(frames, "<i2").reshape(-1, params.nchannels).mean(axis=1)
    return (samples / 32768.0).astype(np.float32)


def load_recordings_tfds(split, speakers=None, exclude_speakers=()):
    """As `load_recordings`, from TensorFlow Datasets' `spoken_digit` (downloads it once; needs the network).

    `spoken_digit` has one split holding all recordings; the official split
    is made here from each file name's index.

    Args:
        split, speakers, exclude_speakers: as in `load_recordings`.

    Example:

    >>> import tensorflow as tf, tensorflow_datasets as tfds
    >>> def fake(self, split, **kwargs):
    ...     return tf.data.Dataset.from_tensors({"audio": tf.zeros(800, tf.int64), "label": tf.constant(4, tf.int64),
    ...                                          "audio/filename": tf.constant("4_theo_2.wav")})
    >>> with tfds.testing.mock_data(as_dataset_fn=fake):
    ...     [(r.digit, r.speaker, r.index) for r in load_recordings_tfds("test")]
    [('4', 'theo', 2)]
    """
    import tensorflow_datasets as tfds

    _check_split(split)
    try:
        ds = tfds.load("spoken_digit", split="train")
    except Exception as err:  # offline: DownloadError, ConnectionError, ... from deep inside tfds
        raise ValueError(f"Could not load tensorflow_datasets' spoken_digit (it downloads on first use and "
                         f"needs the network): {type(err).__name__}: {err}. Offline, read the bundled sample "
                         "or pass --data-dir.") from err
    recordings = []
    for example in tfds.as_numpy(ds):
        name = example["audio/filename"]
        match = FILE_NAME.match(name.decode() if isinstance(name, bytes) else str(name))
        if not match:
            continue
        digit, speaker, index = match.group(1), match.group(2), int(match.group(3))
        if not _in_split(index, split) or speaker in exclude_speakers or (speakers and speaker not in speakers):
            continue
        waveform = (np.asarray(example["audio"], np.float64) / 32768.0).astype(np.float32)
        recordings.append(Recording(waveform, digit, speaker, index))
    if not recordings:
        raise ValueError(f"No {split} recordings in tensorflow_datasets' spoken_digit for speakers={speakers}, "
                         f"exclude_speakers={list(exclude_speakers)}")
    return sorted(recordings, key=lambda r: (r.digit, r.speaker, r.index))


def make_utterances(recordings, count=None, seed=0, min_digits=1, max_digits=7, passes=None,
                    gap_seconds=(0.05, 0.3), edge_seconds=None):
    """Join recordings of one speaker into digit-string utterances: `(waveforms, transcripts)`.

    Each utterance takes 1-7 (`min_digits`-`max_digits`) recordings of one
    speaker, chosen with `numpy.random.default_rng(seed)`, separated and
    surrounded by silences of `gap_seconds` (uniform; the silences before the
    first and after the last recording of `edge_seconds`): Gaussian noise at
    half the level of the recordings' own first and last 10 ms.

    Args:
        recordings: list of `Recording`.
        count: int. Utterances to make, each from random recordings of a
            random speaker (weighted by their recordings).
        passes: int. Instead of `count`: shuffle each speaker's recordings
            `passes` times and cut each shuffle into utterances, so every
            recording is used exactly `passes` times (test sets).
        seed, min_digits, max_digits: ints. Defaults `0`, `1`, `7`.
        gap_seconds: `(low, high)` floats. Defaults to `(0.05, 0.3)`.
        edge_seconds: `(low, high)` floats for the leading and trailing
            silences; `(0.0, 0.3)` also makes utterances that start or end
            right at the speech, as trimmed recordings do. Defaults to
            `gap_seconds`.

    Returns:
        `(list of float32 waveforms at 8 kHz, list of str transcripts)`.

    Example:

    >>> audio, transcripts = make_utterances(load_recordings("test"), count=3, seed=1)
    >>> len(audio), all(1 <= len(t) <= 7 for t in transcripts)
    (3, True)
    """
    if (count is None) == (passes is None):
        raise ValueError(f"Pass one of `count` and `passes`. Received: count={count!r}, passes={passes!r}")
    if not 1 <= min_digits <= max_digits:
        raise ValueError(f"Expected 1 <= min_digits <= max_digits. Received: min_digits={min_digits}, "
                         f"max_digits={max_digits}")
    if not recordings:
        raise ValueError("`recordings` is empty: expected at least one Recording.")
    rng = np.random.default_rng(seed)
    by_speaker = collections.defaultdict(list)
    for recording in recordings:
        by_speaker[recording.speaker].append(recording)
    speakers = sorted(by_speaker)
    groups = []
    if passes is not None:
        for _ in range(passes):
            for speaker in speakers:
                order = list(rng.permutation(len(by_speaker[speaker])))
                while order:
                    take = int(rng.integers(min_digits, max_digits + 1))
                    groups.append([by_speaker[speaker][i] for i in order[:take]])
                    order = order[take:]
    else:
        weights = np.array([len(by_speaker[s]) for s in speakers], float)
        for _ in range(count):
            pool = by_speaker[speakers[rng.choice(len(speakers), p=weights / weights.sum())]]
            take = int(rng.integers(min_digits, max_digits + 1))
            groups.append([pool[i] for i in rng.choice(len(pool), take, replace=take > len(pool))])
    audio = [_join(group, rng, gap_seconds, edge_seconds or gap_seconds) for group in groups]
    return audio, ["".join(r.digit for r in group) for group in groups]


def _join(group, rng, gap_seconds, edge_seconds):
    edge = SAMPLE_RATE // 100
    level = 0.5 * float(np.median([np.std(np.concatenate([r.waveform[:edge], r.waveform[-edge:]])) for r in group]))

    def silence(seconds):
        return rng.normal(0.0, level, int(rng.uniform(*seconds) * SAMPLE_RATE)).astype(np.float32)

    parts = [silence(edge_seconds)]
    for i, recording in enumerate(group):
        parts += [recording.waveform, silence(edge_seconds if i == len(group) - 1 else gap_seconds)]
    return np.clip(np.concatenate(parts), -1.0, 1.0)
