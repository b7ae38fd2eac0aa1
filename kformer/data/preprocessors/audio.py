"""Speech: WAV bytes, WAV files or float waveforms at any sample rate -> log-mel features + padding mask.

One TensorFlow function (`example_features`: decode, resample, log-mel,
per-utterance normalization) makes the features of `fit`'s tf.data
pipeline, of `predict` / `transcribe` and of the exported `speech_to_text`
signature; every op in it is core TensorFlow (`tf.audio`, `tf.signal`), which
a stock TF Serving runs. In-process raw inputs of every kind are written as
16-bit WAV bytes first, the form the served graph receives.
"""

import math
import os

import keras
import numpy as np
import tensorflow as tf

from kformer.data.pipeline import data_options, without_autograph
from kformer.data.preprocessors.base import Preprocessor

LOG_FLOOR = 1e-6  # added to the mel energies before the log: digital silence stays finite
ANTIALIAS_TAPS = 32  # half-width of the windowed-sinc low-pass run before downsampling


@keras.saving.register_keras_serializable(package="kformer")
class AudioPreprocessor(Preprocessor):
    """Audio of any sample rate -> `features` `(batch, frames, num_mel_bins)` + `padding_mask` `(batch, frames)`.

    Each recording is decoded (`tf.audio.decode_wav`, mixed down to mono),
    resampled to `sample_rate` (a windowed-sinc low-pass, then linear
    interpolation), cut into `frame_length_ms` frames every `frame_step_ms`
    (`tf.signal.stft`, Hann window), turned into `num_mel_bins` log-mel
    energies and normalized per recording (mean 0, variance 1 per mel bin).
    Raw inputs: a 1-D string tensor of WAV bytes, or a list mixing WAV file
    paths, WAV bytes, float waveforms in [-1, 1] (or int16 samples) at
    `sample_rate`, and `(waveform, sample_rate)` pairs. `dataset(...,
    augment=True)` adds SpecAugment masks (Park et al. 2019) to training
    batches only.

    Args:
        sample_rate: int. Rate the audio is resampled to. Defaults to `8000`.
        num_mel_bins: int. Features per frame. Defaults to `40`.
        frame_length_ms, frame_step_ms: floats. Defaults `25.0`, `10.0`.
        max_seconds: float. Longer audio is refused with a clear error.
            Defaults to `60.0`.
        **kwargs: Passed to `keras.layers.Layer`.

    Example:

    >>> import numpy as np
    >>> preprocessor = AudioPreprocessor()
    >>> tone = np.sin(np.arange(8000) * 0.3).astype("float32") * 0.5
    >>> out = preprocessor.encode([tone, (tone[:4000], 4000)])
    >>> out["features"].shape, out["padding_mask"].sum(axis=1).tolist()
    ((2, 98, 40), [98, 98])
    """

    def __init__(self, sample_rate=8000, num_mel_bins=40, frame_length_ms=25.0, frame_step_ms=10.0,
                 max_seconds=60.0, **kwargs):
        kwargs.pop("sequence_length", None)
        super().__init__(**kwargs)
        for name, value in (("sample_rate", sample_rate), ("num_mel_bins", num_mel_bins)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
        for name, value in (("frame_length_ms", frame_length_ms), ("frame_step_ms", frame_step_ms),
                            ("max_seconds", max_seconds)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
                raise ValueError(f"`{name}` must be a positive number. Received: {name}={value!r}")
        self.sample_rate, self.num_mel_bins = sample_rate, num_mel_bins
        self.frame_length_ms, self.frame_step_ms = float(frame_length_ms), float(frame_step_ms)
        self.max_seconds = float(max_seconds)
        self.frame_length = max(2, round(sample_rate * self.frame_length_ms / 1000))
        self.frame_step = max(1, round(sample_rate * self.frame_step_ms / 1000))
        if self.frame_step > self.frame_length:
            raise ValueError("`frame_step_ms` must not exceed `frame_length_ms`. Received: "
                             f"frame_length_ms={frame_length_ms}, frame_step_ms={frame_step_ms}")
        self.fft_length = 2 ** math.ceil(math.log2(self.frame_length))
        self.mel_matrix = tf.signal.linear_to_mel_weight_matrix(
            num_mel_bins, self.fft_length // 2 + 1, sample_rate, 20.0, sample_rate / 2).numpy()
        self.min_samples = self.frame_length + 6 * self.frame_step  # 7 frames: one after 4x subsampling

    # ---- the TensorFlow function every path runs -------------------------------------------------------
    def decode(self, wav_bytes):
        """WAV bytes (a scalar string) -> mono float32 waveform `(samples,)` at `sample_rate`.

        Graph errors (INVALID_ARGUMENT) for bytes that are not a WAV file,
        for empty audio and for audio over `max_seconds`.
        """
        head = wav_bytes + b"\0" * 12  # b"" said only "Data too short"; substr needs 12 bytes to look at
        riff = tf.logical_and(tf.equal(tf.strings.substr(head, 0, 4), "RIFF"),
                              tf.equal(tf.strings.substr(head, 8, 4), "WAVE"))
        with tf.control_dependencies([tf.debugging.Assert(riff, [
                "`wav_bytes` holds an item that is not a WAV file (expected RIFF/WAVE bytes); its length in bytes:",
                tf.strings.length(wav_bytes)])]):
            audio, rate = tf.audio.decode_wav(tf.identity(wav_bytes))  # (samples, channels) floats in [-1, 1]
        waveform = tf.reduce_mean(audio, axis=1)
        samples = tf.shape(waveform)[0]
        checks = [
            tf.debugging.assert_positive(samples, message="The audio is empty: expected at least one sample."),
            tf.debugging.assert_less_equal(
                tf.cast(samples, tf.float32) / tf.cast(rate, tf.float32), self.max_seconds,
                message=f"The audio is longer than this preprocessor's max_seconds={self.max_seconds}.")]
        with tf.control_dependencies(checks):
            return resample(tf.identity(waveform), rate, self.sample_rate)

    def features(self, waveform):
        """Waveform `(samples,)` at `sample_rate` -> normalized log-mel `(frames, num_mel_bins)`.

        Audio shorter than 7 frames is padded with silence to 7 frames.
        """
        waveform = tf.pad(waveform, [[0, tf.maximum(0, self.min_samples - tf.shape(waveform)[0])]])
        stft = tf.signal.stft(waveform, self.frame_length, self.frame_step, self.fft_length)
        power = tf.math.square(tf.abs(stft))  # (frames, fft_length // 2 + 1)
        log_mel = tf.math.log(tf.matmul(power, tf.constant(self.mel_matrix)) + LOG_FLOOR)
        mean, variance = tf.nn.moments(log_mel, axes=[0], keepdims=True)
        return (log_mel - mean) * tf.math.rsqrt(variance + 1e-3)  # (frames, num_mel_bins)

    def example_features(self, wav_bytes):
        """WAV bytes (a scalar string) -> log-mel `(frames, num_mel_bins)`: `features(decode(wav_bytes))`."""
        return self.features(self.decode(wav_bytes))

    def inputs(self, x):
        """WAV bytes `(batch,)` -> `{"features": (batch, frames, num_mel_bins), "padding_mask": (batch, frames)}`.

        Each recording is featurized alone, then right-padded with zeros to the
        longest of the batch; `padding_mask` is True on real frames.
        """
        ragged = tf.map_fn(self.example_features, x, fn_output_signature=tf.RaggedTensorSpec(
            [None, self.num_mel_bins], tf.float32, ragged_rank=0))
        ragged = tf.RaggedTensor.from_tensor(ragged) if isinstance(ragged, tf.Tensor) else ragged
        features = ragged.to_tensor(shape=[None, None, self.num_mel_bins])
        mask = tf.sequence_mask(ragged.row_lengths(), tf.shape(features)[1])
        return {"features": features, "padding_mask": mask}

    # ---- raw inputs in process ---------------------------------------------------------------------------
    def is_raw(self, x):
        if isinstance(x, (str, bytes, tuple)):
            return True
        if isinstance(x, list):
            return len(x) > 0
        if isinstance(x, np.ndarray):
            return x.dtype.kind in "OSUfi" and x.ndim in (1, 2)
        if isinstance(x, tf.Tensor):
            return x.dtype == tf.string or (x.dtype.is_floating and x.shape.rank in (1, 2))
        return False

    def _raw_tensor(self, x):
        return tf.constant(to_wav_batch(x, self.sample_rate, self.max_seconds), dtype=tf.string)

    def encode(self, x, chunk_size=256):
        """Raw audio (see the class docstring) -> `{"features", "padding_mask"}` as numpy."""
        return super().encode(x, chunk_size=chunk_size)

    def dataset(self, x, y=None, sample_weight=None, *, batch_size=32, shuffle=False, seed=0, augment=False,
                pad_to_multiple=32, sort_window=16):
        """Batched `tf.data.Dataset` of `(inputs, y[, sample_weight])`, features computed once and cached.

        Args:
            x: raw audio (see the class docstring).
            y: None, or int labels `(rows, label_length)` (a speech task's
                token ids, 0 = padding), padded to the same width in every batch.
            sample_weight: None or `(rows,)` floats.
            batch_size: int. Defaults to `32`.
            shuffle: bool. Reshuffled every epoch with `seed`. Defaults to `False`.
            sort_window: int. With `shuffle`, each run of `sort_window` batches'
                worth of shuffled recordings is sorted by length before it is cut
                into batches, and those batches are shuffled: a batch holds
                recordings of similar length, so little of it is padding (the
                same number of batches; 1 turns it off). Defaults to `16`.
            seed: int. Shuffling and SpecAugment seed. Defaults to `0`.
            augment: bool. SpecAugment (`spec_augment`) on each batch, new
                masks every epoch: for training data only. Defaults to `False`.
            pad_to_multiple: int. Frames are padded to a multiple of it, so
                compiled steps see few shapes. Defaults to `32`.
        """
        x = self._raw_tensor(x)
        count = int(tf.shape(x)[0])
        for name, column in (("y", y), ("sample_weight", sample_weight)):
            if column is not None and len(column) != count:
                raise ValueError(f"`{name}` has {len(column)} rows but `x` has {count}: expected one per "
                                 f"recording. Received: len({name})={len(column)}, len(x)={count}")
        columns = tuple(c for c in (x, y, sample_weight) if c is not None)
        ds = tf.data.Dataset.from_tensor_slices(columns).map(
            without_autograph(lambda audio, *rest: (self.example_features(audio), *rest)),
            num_parallel_calls=tf.data.AUTOTUNE).cache()
        if not isinstance(sort_window, int) or isinstance(sort_window, bool) or sort_window < 1:
            raise ValueError(f"`sort_window` must be a positive int (batches). Received: sort_window={sort_window!r}")
        label_shapes = tuple([np.shape(c)[1]] if np.ndim(c) > 1 else [] for c in columns[1:])
        if shuffle:
            ds = ds.shuffle(count, seed=seed, reshuffle_each_iteration=True)
            if sort_window > 1:
                ds = _sorted_by_length(ds, batch_size * sort_window, (self.num_mel_bins, *label_shapes))
        ds = ds.map(lambda features, *rest: ((features, tf.shape(features)[0]), *rest))
        ds = ds.padded_batch(batch_size, padded_shapes=(([None, self.num_mel_bins], []), *label_shapes))
        if shuffle and sort_window > 1:
            ds = ds.shuffle(sort_window, seed=seed + 1, reshuffle_each_iteration=True)
        ds = ds.map(without_autograph(lambda packed, *rest: (_pack(*packed, pad_to_multiple), *rest)))
        if augment:
            seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
            ds = tf.data.Dataset.zip(ds, seeds).map(without_autograph(
                lambda batch, s: (spec_augment(batch[0], s), *batch[1:])))
        ds = ds.apply(tf.data.experimental.assert_cardinality(-(-count // batch_size)))
        return ds.prefetch(2).with_options(data_options())

    def get_config(self):
        config = super().get_config()
        del config["sequence_length"]
        return {**config, "sample_rate": self.sample_rate, "num_mel_bins": self.num_mel_bins,
                "frame_length_ms": self.frame_length_ms, "frame_step_ms": self.frame_step_ms,
                "max_seconds": self.max_seconds}


def _sorted_by_length(ds, window, shapes):
    """Elements `(features (frames, bins), *labels)` -> the same elements, each run of `window` sorted by frames."""
    ds = ds.map(lambda features, *rest: ((features, tf.shape(features)[0]), *rest))
    ds = ds.padded_batch(window, padded_shapes=(([None, shapes[0]], []), *[list(s) for s in shapes[1:]]))

    def sort(packed, *rest):
        order = tf.argsort(packed[1], stable=True)
        return (tf.gather(packed[0], order), tf.gather(packed[1], order)), *[tf.gather(c, order) for c in rest]
    ds = ds.map(without_autograph(sort)).unbatch()
    return ds.map(without_autograph(lambda packed, *rest: (packed[0][:packed[1]], *rest)))


def _pack(features, lengths, pad_to_multiple):
    """Padded `(batch, frames, bins)` and real lengths -> the inputs dict, frames padded to a multiple."""
    frames = tf.shape(features)[1]
    features = tf.pad(features, [[0, 0], [0, (-frames) % pad_to_multiple], [0, 0]])
    return {"features": features, "padding_mask": tf.sequence_mask(lengths, tf.shape(features)[1])}


def spec_augment(inputs, seed, frequency_masks=2, frequency_width=8, time_masks=2, time_fraction=0.05):
    """SpecAugment (Park et al. 2019) without time warping: zero random mel bands and frame spans.

    Each recording of the batch gets `frequency_masks` bands of 0 to
    `frequency_width` mel bins and `time_masks` spans of 0 to
    `time_fraction` of its real frames, drawn with stateless ops from `seed`.

    Args:
        inputs: dict `features` `(batch, frames, bins)`, `padding_mask` `(batch, frames)`.
        seed: int64 tensor of shape `(2,)`.
        frequency_masks, frequency_width, time_masks: ints. Defaults `2`, `8`, `2`.
        time_fraction: float. Longest time mask as a fraction of the frames. Defaults to `0.05`.

    Returns:
        `inputs` with masked `features` (the padding mask unchanged).

    Example:

    >>> import numpy as np
    >>> inputs = {"features": tf.ones((2, 50, 40)), "padding_mask": tf.ones((2, 50), tf.bool)}
    >>> masked = spec_augment(inputs, tf.constant([1, 2], tf.int64))["features"]
    >>> 0 < float(tf.reduce_mean(masked)) < 1
    True
    """
    features, mask = inputs["features"], inputs["padding_mask"]
    batch, frames, bins = tf.shape(features)[0], tf.shape(features)[1], tf.shape(features)[2]
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
    keep = tf.ones_like(features, tf.bool)
    for i, (count, size, axis) in enumerate([(frequency_masks, None, 2), (time_masks, time_fraction, 1)]):
        for j in range(count):
            uniform = tf.random.stateless_uniform([2, batch], seed=seed + [i * 16 + j, 0])
            extent = tf.cast(lengths, tf.float32) if axis == 1 else tf.cast(tf.fill([batch], bins), tf.float32)
            widest = extent * size if axis == 1 else tf.fill([batch], float(frequency_width))
            width = tf.cast(uniform[0] * (widest + 1), tf.int32)
            start = tf.cast(uniform[1] * tf.maximum(extent - tf.cast(width, tf.float32), 0.0), tf.int32)
            positions = tf.range(frames if axis == 1 else bins)[None]
            band = (positions >= start[:, None]) & (positions < (start + width)[:, None])  # (batch, frames or bins)
            keep &= ~(band[:, :, None] if axis == 1 else band[:, None, :])
    return {**inputs, "features": tf.where(keep, features, 0.0)}


def resample(waveform, rate, target_rate):
    """Waveform `(samples,)` at `rate` (an int tensor) -> `(round(samples * target_rate / rate),)` at `target_rate`.

    Identity when the rates agree. Otherwise a Hann-windowed sinc low-pass
    at the lower Nyquist frequency (against aliasing when downsampling),
    then linear interpolation at the new sample times. Core TensorFlow ops.

    Args:
        waveform: float32 `(samples,)`.
        rate: int scalar (tensor or Python int). The waveform's sample rate.
        target_rate: int. The rate wanted.

    Example:

    >>> tone = tf.sin(tf.range(16000, dtype=tf.float32) * 0.1)
    >>> resample(tone, 16000, 8000).shape
    TensorShape([8000])
    """
    rate = tf.cast(rate, tf.float32)
    target = tf.constant(float(target_rate))

    def convert():
        cutoff = 0.5 * tf.minimum(1.0, target / rate)  # cycles per input sample
        n = tf.range(-ANTIALIAS_TAPS, ANTIALIAS_TAPS + 1, dtype=tf.float32)
        x = 2.0 * cutoff * n
        sinc = tf.where(tf.equal(x, 0.0), 1.0, tf.sin(math.pi * x) / (math.pi * tf.where(tf.equal(x, 0.0), 1.0, x)))
        taps = sinc * (0.5 + 0.5 * tf.cos(math.pi * n / (ANTIALIAS_TAPS + 1)))
        taps /= tf.reduce_sum(taps)
        filtered = tf.nn.conv1d(waveform[None, :, None], taps[:, None, None], 1, "SAME")[0, :, 0]
        count = tf.cast(tf.round(tf.cast(tf.shape(waveform)[0], tf.float32) * target / rate), tf.int32)
        position = tf.cast(tf.range(count), tf.float32) * rate / target
        left = tf.minimum(tf.cast(tf.floor(position), tf.int32), tf.shape(waveform)[0] - 1)
        right = tf.minimum(left + 1, tf.shape(waveform)[0] - 1)
        fraction = position - tf.cast(left, tf.float32)
        return tf.gather(filtered, left) * (1.0 - fraction) + tf.gather(filtered, right) * fraction
    return tf.cond(tf.equal(rate, target), lambda: tf.identity(waveform), convert)


def to_wav_batch(x, sample_rate, max_seconds=None):
    """Raw audio -> list of WAV bytes (16-bit PCM), checked one by one with errors naming the item.

    Args:
        x: WAV bytes, a WAV file path, a float waveform in [-1, 1] or int16
            samples `(samples,)` at `sample_rate`, a `(waveform, rate)` pair,
            a list of those, a 2-D array `(batch, samples)` of waveforms, or
            a 1-D string array / tensor of WAV bytes.
        sample_rate: int. The rate of waveforms given without one.
        max_seconds: float or None. Longer recordings are a ValueError naming them.

    Example:

    >>> wav = to_wav_batch([np.zeros(80, "float32")], 8000)[0]
    >>> wav[:4], wav[8:12]
    (b'RIFF', b'WAVE')
    """
    if isinstance(x, tf.Tensor):
        x = x.numpy()
    if isinstance(x, (str, bytes, tuple)) or (isinstance(x, np.ndarray) and x.ndim == 1 and x.dtype.kind in "fi"):
        x = [x]
    if isinstance(x, np.ndarray) and x.dtype.kind in "fi" and x.ndim == 2:
        x = list(x)
    if isinstance(x, np.ndarray) and x.dtype.kind in "OSU":
        x = list(x.reshape(-1))
    if not isinstance(x, list) or not x:
        raise ValueError("`audio` must be WAV bytes, a WAV file path, a waveform, a (waveform, sample_rate) "
                         f"pair or a non-empty list of those. Received: {type(x).__name__}")
    return [_to_wav(item, sample_rate, f"audio[{i}]", max_seconds) for i, item in enumerate(x)]


def _check_seconds(samples, rate, max_seconds, name):
    if max_seconds is not None and samples / rate > max_seconds:
        raise ValueError(f"`{name}` is {samples / rate:.1f} s long, over this preprocessor's "
                         f"max_seconds={max_seconds}")


def _to_wav(item, sample_rate, name, max_seconds=None):
    if isinstance(item, np.str_):
        item = str(item)
    if isinstance(item, np.bytes_):
        item = bytes(item)
    if isinstance(item, str):
        if not os.path.isfile(item):
            raise ValueError(f"`{name}` is a string but not a WAV file's path. Received: {name}={item!r}")
        name = f"{name} ({item})"
        with open(item, "rb") as f:
            item = f.read()
    if isinstance(item, bytes):
        waveform, rate, kind = _parse_wav(item, name)  # every header field checked, every width decoded
        if kind == "PCM16":
            _check_seconds(len(waveform), rate, max_seconds, name)
            return item  # what the graph's decode_wav reads, as the served model reads it
        item = (waveform, rate)  # 8-, 24-, 32-bit or float samples: checked and re-encoded as 16-bit PCM below
    rate = sample_rate
    if isinstance(item, tuple):
        if len(item) != 2 or not isinstance(item[1], (int, np.integer)) or isinstance(item[1], bool) or item[1] < 1:
            raise ValueError(f"`{name}` must be a (waveform, sample_rate) pair with a positive int rate. "
                             f"Received: {name}={_short(item)}")
        item, rate = item[0], int(item[1])
    if isinstance(item, tf.Tensor):
        item = item.numpy()
    if not isinstance(item, np.ndarray):
        raise ValueError(f"`{name}` must be WAV bytes, a WAV path or a waveform array. Received: "
                         f"{type(item).__name__}")
    if item.ndim == 2 and 1 in item.shape:
        item = item.reshape(-1)
    if item.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D waveform (samples,). Received: {name}.shape={item.shape}")
    if item.dtype == np.int16:
        item = item.astype(np.float32) / 32768.0
    elif item.dtype.kind != "f":
        raise ValueError(f"`{name}` must hold float samples in [-1, 1] or int16 samples. Received: "
                         f"{name}.dtype={item.dtype}")
    if item.size == 0:
        raise ValueError(f"`{name}` is empty: expected at least one sample. Received: {name}.shape={item.shape}")
    if not np.all(np.isfinite(item)):
        raise ValueError(f"`{name}` must hold finite samples. Received: {int(np.sum(~np.isfinite(item)))} "
                         "NaN or infinite")
    peak = float(np.max(np.abs(item)))
    if peak > 1.0 + 1e-6:
        raise ValueError(f"`{name}` must hold float samples in [-1, 1] (or int16 samples). Received: a peak of "
                         f"{peak:.4g}")
    _check_seconds(len(item), rate, max_seconds, name)
    return tf.audio.encode_wav(np.clip(item, -1.0, 1.0).astype(np.float32)[:, None], rate).numpy()


MAX_SAMPLE_RATE = 768_000  # the highest rate audio interfaces record; a header past it is damaged or forged
_FORMATS = {1: "PCM", 3: "float", 0xFFFE: "extensible"}


def read_wav(data, name="wav_bytes"):
    """WAV bytes -> (mono float32 waveform in [-1, 1], sample rate), for every sample width a WAV file holds.

    PCM of 8 (unsigned), 16, 24 or 32 bits, 32- or 64-bit float, and WAVE_FORMAT_EXTENSIBLE
    holding either; channels are averaged. Anything else, a sample rate of 0 or past
    `MAX_SAMPLE_RATE`, a data chunk that claims more bytes than the file holds, or no samples,
    is a ValueError naming `name` (TensorFlow's `decode_wav` reads 16-bit PCM only and answered
    the rest with graph errors).

    Args:
        data: bytes. The whole WAV file.
        name: str. The argument's name, for the message. Defaults to `"wav_bytes"`.

    Returns:
        (float32 array `(samples,)`, int sample rate).

    Example:

    >>> import wave, io
    >>> buffer = io.BytesIO()
    >>> with wave.open(buffer, "wb") as f:
    ...     f.setnchannels(1); f.setsampwidth(1); f.setframerate(8000); f.writeframes(bytes([0, 128, 255]))
    >>> waveform, rate = read_wav(buffer.getvalue())
    >>> [round(float(v), 3) for v in waveform], rate
    ([-1.0, 0.0, 0.992], 8000)
    """
    return _parse_wav(data, name)[:2]


def _parse_wav(data, name):
    """`read_wav`, plus the sample format: (waveform, rate, "PCM16" or another name)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError(f"`{name}` is not a WAV file (expected RIFF/WAVE bytes). Received: {len(data)} bytes "
                         f"starting {data[:12]!r}")
    fmt, samples, position = None, None, 12
    while position + 8 <= len(data) and samples is None:
        chunk, size = data[position:position + 4], int.from_bytes(data[position + 4:position + 8], "little")
        body = position + 8
        if chunk == b"fmt ":
            if size < 16 or body + size > len(data):
                raise ValueError(f"`{name}` has a damaged `fmt ` chunk ({size} bytes). Received: {len(data)} bytes")
            fmt = data[body:body + size]
        elif chunk == b"data":
            if size == 0xFFFFFFFF:  # a streaming writer's placeholder: the samples run to the end of the file
                size = len(data) - body
            if body + size > len(data):
                raise ValueError(f"`{name}`: its data chunk claims {size} bytes, but the file holds "
                                 f"{len(data) - body} after its header (a cut-off or damaged file)")
            samples = data[body:body + size]
        position = body + size + (size % 2)  # chunks are padded to an even length
    if fmt is None or samples is None:
        raise ValueError(f"`{name}` is not a readable WAV file: no {'`fmt `' if fmt is None else '`data`'} chunk. "
                         f"Received: {len(data)} bytes")
    tag, channels, rate = (int.from_bytes(fmt[i:j], "little") for i, j in ((0, 2), (2, 4), (4, 8)))
    bits = int.from_bytes(fmt[14:16], "little")
    if tag == 0xFFFE and len(fmt) >= 26:  # WAVE_FORMAT_EXTENSIBLE: the sub-format's first two bytes are the tag
        tag = int.from_bytes(fmt[24:26], "little")
    dtypes = {(1, 8): "u1", (1, 16): "<i2", (1, 24): "i3", (1, 32): "<i4", (3, 32): "<f4", (3, 64): "<f8"}
    if (tag, bits) not in dtypes or channels < 1:
        raise ValueError(f"`{name}` holds {_FORMATS.get(tag, f'format {tag}')} audio of {bits} bits and {channels} "
                         "channels; expected PCM of 8, 16, 24 or 32 bits or 32/64-bit float, 1 or more channels")
    if not 1 <= rate <= MAX_SAMPLE_RATE:
        raise ValueError(f"`{name}` has a sample rate of {rate} Hz in its header; expected 1 to {MAX_SAMPLE_RATE} "
                         "(a damaged or forged file)")
    width = bits // 8 * channels
    frames = len(samples) // width
    if frames == 0:
        raise ValueError(f"`{name}` holds no audio: expected at least one sample. Received: 0 samples")
    raw = np.frombuffer(samples[:frames * width], np.uint8)
    kind = dtypes[(tag, bits)]
    if kind == "i3":  # 24-bit little-endian: sign-extend each 3-byte sample into an int32
        triples = raw.reshape(-1, 3).astype(np.int32)
        values = (triples[:, 0] | triples[:, 1] << 8 | triples[:, 2] << 16) << 8 >> 8
        audio = values.astype(np.float32) / 2 ** 23
    elif kind == "u1":
        audio = (raw.astype(np.float32) - 128.0) / 128.0
    elif kind.startswith("<i"):
        audio = np.frombuffer(raw, kind).astype(np.float32) / 2 ** (bits - 1)
    else:
        audio = np.frombuffer(raw, kind).astype(np.float32)
        if not np.all(np.isfinite(audio)):
            raise ValueError(f"`{name}` holds NaN or infinite float samples")
        audio = np.clip(audio, -1.0, 1.0)
    return audio.reshape(frames, channels).mean(axis=1), rate, f"{_FORMATS[tag]}{bits}"


def _short(value):
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."
