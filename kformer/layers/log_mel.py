"""Whisper's log-mel spectrogram: waveforms `(batch, samples)` -> features `(batch, frames, num_mel_bins)`."""

import math

import keras
import numpy as np
from keras import ops

from kformer.layers.checks import check_positive_ints

# Slaney's mel scale (librosa's default, the Auditory Toolbox's): linear below 1 kHz, logarithmic above.
_MIN_LOG_HERTZ = 1000.0
_MIN_LOG_MEL = 15.0  # = 3 * 1000 / 200
_MELS_PER_LOG_HERTZ = 27.0 / np.log(6.4)
_LOG_HERTZ_PER_MEL = np.log(6.4) / 27.0  # as transformers writes both: its bank, bit for bit


def _is_finite_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _hertz_to_mel(hertz):
    hertz = np.asarray(hertz, np.float64)
    log_region = _MIN_LOG_MEL + np.log(np.maximum(hertz, _MIN_LOG_HERTZ) / _MIN_LOG_HERTZ) * _MELS_PER_LOG_HERTZ
    return np.where(hertz >= _MIN_LOG_HERTZ, log_region, 3.0 * hertz / 200.0)


def _mel_to_hertz(mels):
    mels = np.asarray(mels, np.float64)
    log_region = _MIN_LOG_HERTZ * np.exp(_LOG_HERTZ_PER_MEL * (mels - _MIN_LOG_MEL))
    return np.where(mels >= _MIN_LOG_MEL, log_region, 200.0 * mels / 3.0)


def slaney_mel_filter_bank(num_frequency_bins, num_mel_bins, min_frequency, max_frequency, sample_rate):
    """Triangular mel filters on Slaney's mel scale, each divided by its width in Hz ("slaney" norm).

    The bank of librosa's `filters.mel(norm="slaney")` and of transformers'
    `audio_utils.mel_filter_bank(..., norm="slaney", mel_scale="slaney")`,
    which Whisper's feature extractor uses; computed in float64.

    Args:
        num_frequency_bins: int. STFT bins, `fft_length // 2 + 1`.
        num_mel_bins: int. Filters.
        min_frequency: float. Lower edge of the first filter, in Hz.
        max_frequency: float. Upper edge of the last filter, in Hz.
        sample_rate: int. Samples per second of the waveform.

    Returns:
        float64 array `(num_frequency_bins, num_mel_bins)`: `power @ bank` is
        the mel spectrogram.

    Example:

    >>> bank = slaney_mel_filter_bank(201, 80, 0.0, 8000.0, 16000)
    >>> bank.shape, int((bank > 0).sum(axis=0).min())  # every filter covers at least one bin
    ((201, 80), 1)
    """
    # num_mel_bins + 2 edges equally spaced in mels: filter i rises from edge i to i + 1, falls to i + 2.
    edges = _mel_to_hertz(np.linspace(_hertz_to_mel(min_frequency), _hertz_to_mel(max_frequency), num_mel_bins + 2))
    # transformers spaces the bins up to `sample_rate // 2` (the same as sample_rate / 2 for even rates).
    bin_frequencies = np.linspace(0, sample_rate // 2, num_frequency_bins)
    distance = edges[None, :] - bin_frequencies[:, None]  # (bins, num_mel_bins + 2)
    widths = np.diff(edges)
    rising = -distance[:, :-2] / widths[:-1]
    falling = distance[:, 2:] / widths[1:]
    triangles = np.maximum(0.0, np.minimum(rising, falling))  # (bins, num_mel_bins)
    return triangles * (2.0 / (edges[2:] - edges[:-2]))[None, :]


@keras.saving.register_keras_serializable(package="kformer")
class LogMelSpectrogram(keras.layers.Layer):
    """Whisper's log-mel features of waveforms, in `keras.ops` (Radford et al. 2022, section 2.2).

    Power spectrogram of centred frames (reflect-padded by `fft_length // 2`,
    periodic Hann window, last frame dropped: `samples // hop_length` frames
    for an even `fft_length`), Slaney mel filters, `log10` floored at `1e-10`
    and at 8 decades below the loudest value of each example, then
    `(x + 4) / 4`. Equals transformers' `WhisperFeatureExtractor` within
    1e-4 for waveforms already padded or cut to 30 s (480,000 samples at
    16 kHz): padding is the caller's. No weights.

    Args:
        sample_rate: int. Samples per second of the input. Defaults to `16000`.
        fft_length: int. Window and FFT size in samples. Defaults to `400` (25 ms).
        hop_length: int. Samples between frames. Defaults to `160` (10 ms).
        num_mel_bins: int. Features per frame (80; 128 for Whisper large-v3).
            Defaults to `80`.
        min_frequency: float. Lowest mel filter edge in Hz. Defaults to `0.0`.
        max_frequency: float. Highest mel filter edge in Hz, at most
            `sample_rate / 2`. Defaults to `None`: `sample_rate / 2`.
        **kwargs: Passed to `keras.layers.Layer` (`name`, ...). The layer
            always computes in float32: a `dtype` (a model's mixed policy) is
            replaced, since a half-precision waveform would move the features
            by far more than 1e-4.

    Call arguments:
        inputs: float waveforms `(batch, samples)`, more than
            `fft_length // 2` samples (the reflect padding).

    Returns:
        float32 `(batch, frames, num_mel_bins)`, about -1.5 (silence) to 1.5.

    Example:

    >>> import numpy as np
    >>> features = LogMelSpectrogram()(np.zeros((2, 16000), "float32"))  # one second of silence
    >>> tuple(features.shape), float(np.asarray(features)[0, 0, 0])  # (log10(1e-10) + 4) / 4
    ((2, 100, 80), -1.5)
    """

    def __init__(self, sample_rate=16000, fft_length=400, hop_length=160, num_mel_bins=80,
                 min_frequency=0.0, max_frequency=None, **kwargs):
        super().__init__(**{**kwargs, "dtype": "float32"})
        check_positive_ints(sample_rate=sample_rate, fft_length=fft_length, hop_length=hop_length,
                            num_mel_bins=num_mel_bins)
        if fft_length < 2:
            raise ValueError(f"`fft_length` must be at least 2. Received: fft_length={fft_length}")
        nyquist = sample_rate / 2
        if not _is_finite_number(min_frequency) or not 0.0 <= min_frequency < nyquist:
            raise ValueError(f"`min_frequency` must be a number in [0, sample_rate / 2 = {nyquist}). "
                             f"Received: min_frequency={min_frequency!r}")
        if max_frequency is not None and (not _is_finite_number(max_frequency)
                                          or not min_frequency < max_frequency <= nyquist):
            raise ValueError(f"`max_frequency` must be None or a number in (min_frequency = {min_frequency}, "
                             f"sample_rate / 2 = {nyquist}]. Received: max_frequency={max_frequency!r}")
        self.sample_rate = sample_rate
        self.fft_length = fft_length
        self.hop_length = hop_length
        self.num_mel_bins = num_mel_bins
        self.min_frequency = min_frequency
        self.max_frequency = max_frequency
        self.mel_filters = slaney_mel_filter_bank(  # float64 (fft_length // 2 + 1, num_mel_bins)
            fft_length // 2 + 1, num_mel_bins, min_frequency, nyquist if max_frequency is None else max_frequency,
            sample_rate)
        self._mel_filters = self.mel_filters.astype("float32")
        # Periodic Hann, given to ops.stft as an array: tf.signal's periodic window is symmetric for odd lengths.
        self._window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(fft_length) / fft_length)).astype("float32")

    def _num_frames(self, inputs_shape):
        if len(inputs_shape) != 2:
            raise ValueError("`inputs` must be waveforms (batch, samples). "
                             f"Received: inputs.shape={tuple(inputs_shape)}")
        samples, pad = inputs_shape[1], self.fft_length // 2
        if samples is None:
            return None
        if samples <= pad:
            raise ValueError(f"`inputs` must have more than fft_length // 2 = {pad} samples (the reflect padding). "
                             f"Received: inputs.shape={tuple(inputs_shape)}")
        return (samples + 2 * pad - self.fft_length) // self.hop_length  # the centred frames less the last

    def call(self, inputs):
        self._num_frames(inputs.shape)
        waveforms = ops.cast(inputs, "float32")  # (batch, samples)
        # 1. Power spectrum. ops.stft is each backend's FFT (tf.signal, jax.scipy, torch.stft) of centred,
        # reflect-padded frames, as Whisper's torch.stft. A float32 DFT matmul of gathered frames and a strided
        # convolution gave the same features within the tolerance and measured slower on every backend; an FFT
        # also keeps the spectrum off the TF32 matmuls that TensorFlow and JAX use for float32 on recent GPUs.
        real, imag = ops.stft(waveforms, self.fft_length, self.hop_length, self.fft_length, window=self._window)
        power = (ops.square(real) + ops.square(imag))[:, :-1]  # (batch, frames, fft_length // 2 + 1)
        # 2. Mel filter bank.
        mel = ops.matmul(power, self._mel_filters)  # (batch, frames, num_mel_bins)
        # 3. log10, floored at 1e-10 and at 8 decades below the loudest value of each example.
        log_mel = ops.log10(ops.maximum(mel, 1e-10))
        log_mel = ops.maximum(log_mel, ops.max(log_mel, axis=(1, 2), keepdims=True) - 8.0)
        # 4. Scale to about [-1, 1].
        return (log_mel + 4.0) / 4.0

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0], self._num_frames(inputs_shape), self.num_mel_bins)

    def get_config(self):
        return {**super().get_config(), "sample_rate": self.sample_rate, "fft_length": self.fft_length,
                "hop_length": self.hop_length, "num_mel_bins": self.num_mel_bins,
                "min_frequency": self.min_frequency, "max_frequency": self.max_frequency}
