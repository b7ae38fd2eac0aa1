"""Encoder-decoder speech recognition: audio in, text tokens out (Whisper: Radford et al. 2022, figure 1).

The encoder reads a log-mel spectrogram through two convolutions (the second halves the frames), adds
fixed sinusoids and runs pre-norm Transformer blocks; the decoder is a pre-norm Transformer decoder with
learned positions and its token table as the output projection. Decoding is the translator's
(`kformer.generation.protocol.EncoderDecoderTask`), with the forced prompt (`<|startoftranscript|>`,
language, task, `<|notimestamps|>`) and suppressed tokens of a `GenerationConfig`.
"""

import keras
import numpy as np
from keras import ops

from kformer import blocks, layers
from kformer.generation.config import GenerationConfig
from kformer.generation.protocol import EncoderDecoderTask
from kformer.generation.search import generate as generate_ids
from kformer.layers.checks import check_positive_ints, check_rates
from kformer.layers.log_mel import LogMelSpectrogram
from kformer.layers.position import Sinusoids
from kformer.models.input_checks import check_batch_size
from kformer.models.task import Task


@keras.saving.register_keras_serializable(package="kformer")
class SpeechToText(EncoderDecoderTask, Task):
    """Waveforms `(batch, samples)` + decoder ids `(batch, tgt_len)` -> logits `(batch, tgt_len, vocab)`.

    The log-mel features are the model's first layer
    (`kformer.layers.LogMelSpectrogram`), so every backend, `fit` and the
    served graph compute them the same way. With a preprocessor
    (`kformer.data.whisper.WhisperPreprocessor`: WAV files, WAV bytes or
    waveforms at any rate, resampled and padded to its window),
    `transcribe(audio)` maps recordings to text and `fit(audio,
    transcripts)` fine-tunes (teacher forcing after the forced prompt; see
    `WhisperPreprocessor.dataset`).

    Args:
        vocabulary_size: int. Output vocabulary (special tokens included).
        num_mel_bins: int. Log-mel features a frame. Defaults to `80`.
        sample_rate, fft_length, hop_length: ints. The spectrogram's
            (`LogMelSpectrogram`). Defaults to `16000`, `400`, `160`.
        max_source_positions: int. Encoder positions after the stride-2
            convolution: the longest input is `2 * max_source_positions`
            frames. Defaults to `1500` (Whisper's 30 s).
        max_target_positions: int. Learned decoder positions. Defaults to `448`.
        hidden_dim, num_heads, intermediate_dim: ints. Width, heads, MLP width.
        num_encoder_layers, num_decoder_layers: ints. Blocks per stack.
        dropout: float. After the position encodings and every sublayer.
            Defaults to `0.0`.
        activation: The convolutions' and feed-forwards' activation.
            Defaults to `"gelu"` (exact).
        preprocessor: `kformer.data.whisper.WhisperPreprocessor` or None.
        generation_config: `kformer.generation.GenerationConfig` (or its
            dict) or None: `transcribe`'s defaults (a checkpoint's forced
            prompt, suppressed tokens and length).

    Whisper's key projections have no bias. Here they keep one, at zero:
    a bias on the keys adds the same amount to every score of a query,
    which the softmax removes, so outputs and gradients do not depend on it.

    Example:

    >>> import numpy as np
    >>> model = SpeechToText(vocabulary_size=50, hidden_dim=16, num_heads=2, intermediate_dim=32,
    ...                      num_encoder_layers=1, num_decoder_layers=1, max_source_positions=50)
    >>> logits = model({"audio": np.zeros((2, 16000), "float32"), "decoder_token_ids": np.ones((2, 3), "int32")})
    >>> tuple(logits.shape)
    (2, 3, 50)
    """

    task_type = "speech_to_text"
    source_dtype = "float32"
    padding_id = None  # the end token ends a transcript and fills the rest: no id is banned from decoding

    def __init__(self, vocabulary_size, num_mel_bins=80, sample_rate=16000, fft_length=400, hop_length=160,
                 max_source_positions=1500, max_target_positions=448, hidden_dim=384, num_heads=6,
                 intermediate_dim=1536, num_encoder_layers=4, num_decoder_layers=4, dropout=0.0,
                 activation="gelu", preprocessor=None, generation_config=None, **kwargs):
        check_positive_ints(vocabulary_size=vocabulary_size, max_source_positions=max_source_positions,
                            max_target_positions=max_target_positions, hidden_dim=hidden_dim, num_heads=num_heads,
                            intermediate_dim=intermediate_dim, num_encoder_layers=num_encoder_layers,
                            num_decoder_layers=num_decoder_layers)
        check_rates(dropout=dropout)
        features = LogMelSpectrogram(sample_rate=sample_rate, fft_length=fft_length, hop_length=hop_length,
                                     num_mel_bins=num_mel_bins, name="log_mel")
        # Two convolutions of width 3; the second moves 2 frames at a time. Padding of 1 on each side, as
        # Whisper's (Keras's "same" would pad the strided one on the right only).
        convolutions = [keras.layers.Conv1D(hidden_dim, 3, strides=stride, activation=activation, name=f"conv_{i}")
                        for i, stride in ((1, 1), (2, 2))]
        # Fixed sinusoids, kept as a frozen table: checkpoints store theirs, and Whisper's encoder adds it as stored
        encoder_positions = layers.PositionEmbedding(max_source_positions, trainable=False, name="encoder_positions",
                                                     initializer=Sinusoids(layout="tensor2tensor"))
        decoder_embedding = layers.TokenAndPositionEmbedding(
            vocabulary_size, max_target_positions, hidden_dim, position="learned", name="decoder_embedding",
            embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02))
        block = dict(num_heads=num_heads, intermediate_dim=intermediate_dim, dropout=dropout,
                     normalize_first=True, activation=activation)
        encoder_blocks = [blocks.TransformerEncoderBlock(name=f"encoder_{i}", **block)
                          for i in range(num_encoder_layers)]
        decoder_blocks = [blocks.TransformerDecoderBlock(name=f"decoder_{i}", **block)
                          for i in range(num_decoder_layers)]
        encoder_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="encoder_final_norm")
        decoder_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="decoder_final_norm")

        audio = keras.Input((None,), dtype="float32", name="audio")
        decoder_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")
        x = features(audio)  # (batch, frames, num_mel_bins)
        for convolution in convolutions:
            x = convolution(ops.pad(x, [[0, 0], [1, 1], [0, 0]]))
        x = keras.layers.Dropout(dropout, name="encoder_dropout")(x + encoder_positions(x))
        for layer in encoder_blocks:
            x = layer(x)
        x = encoder_norm(x)
        y = keras.layers.Dropout(dropout, name="decoder_embedding_dropout")(decoder_embedding(decoder_ids))
        for layer in decoder_blocks:
            y = layer(y, x)
        logits = decoder_embedding(decoder_norm(y), reverse=True)
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(inputs={"audio": audio, "decoder_token_ids": decoder_ids}, outputs=logits, **kwargs)
        self.features, self.convolutions, self.encoder_positions = features, convolutions, encoder_positions
        self.encoder_blocks, self.decoder_blocks = encoder_blocks, decoder_blocks
        self.encoder_norm, self.decoder_norm = encoder_norm, decoder_norm
        self.decoder_embedding, self.output_projection = decoder_embedding, None
        self.vocabulary_size, self.num_mel_bins = vocabulary_size, num_mel_bins
        self.sample_rate, self.fft_length, self.hop_length = sample_rate, fft_length, hop_length
        self.max_source_positions, self.max_target_positions = max_source_positions, max_target_positions
        self.hidden_dim, self.num_heads, self.intermediate_dim = hidden_dim, num_heads, intermediate_dim
        self.num_encoder_layers, self.num_decoder_layers = num_encoder_layers, num_decoder_layers
        self.dropout, self.activation = dropout, activation
        self._set_preprocessor(preprocessor)
        self._set_generation_config(generation_config)

    @classmethod
    def from_config(cls, config):
        if isinstance(config.get("preprocessor"), dict):
            import kformer.data.whisper  # noqa: F401  (registers the preprocessor; data/ only when asked)
        return super().from_config(config)

    def transformer_blocks(self):
        return self, list(self.encoder_blocks), list(self.decoder_blocks)

    def input_limits(self):
        return {"decoder_token_ids": (self.vocabulary_size, self.max_target_positions)}

    def label_limits(self):
        return {self.output_names[0]: self.vocabulary_size}

    def _check_labels(self, x, y):
        if not self._raw(x):
            return super()._check_labels(x, y)
        texts = [y] if isinstance(y, str) else y
        if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
            raise ValueError("`y` must be the transcripts (a list of str), one per recording. Received: "
                             f"y={str(y)[:80]!r} ({type(y).__name__})")

    def validate_preprocessor(self, preprocessor=None):
        preprocessor = self.preprocessor if preprocessor is None else preprocessor
        if preprocessor is None:
            return
        if preprocessor.vocabulary_size > self.vocabulary_size:
            raise ValueError(f"The preprocessor's tokenizer has {preprocessor.vocabulary_size} tokens, more than the "
                             f"model's vocabulary_size={self.vocabulary_size}.")
        if preprocessor.sample_rate != self.sample_rate:
            raise ValueError(f"The preprocessor resamples to {preprocessor.sample_rate} Hz but the model's features "
                             f"are for sample_rate={self.sample_rate}.")

    def encode(self, audio):
        """The encoder: waveforms `(batch, samples)` -> `(outputs (batch, frames / 2, hidden_dim), mask)`
        (every frame is real: Whisper pads its window with silence and attends to all of it)."""
        x = self.features(audio)
        for convolution in self.convolutions:
            x = convolution(ops.pad(x, [[0, 0], [1, 1], [0, 0]]))
        x = x + self.encoder_positions(x)
        for block in self.encoder_blocks:
            x = block(x)
        x = self.encoder_norm(x)
        return x, ops.ones(ops.shape(x)[:2], "bool")

    # The decoding protocol's checks (`kformer.generation.protocol`)
    def decoding_limits(self):
        return {"vocabulary_size": self.vocabulary_size, "source_vocabulary_size": None,
                "position_limit": self.max_target_positions, "padding_id": None}

    def check_source(self, source):
        """Waveforms for `generate`: float `(batch, samples)`, finite, at most the encoder's window."""
        audio = np.asarray(ops.convert_to_numpy(source))
        window = 2 * self.max_source_positions * self.hop_length
        if audio.ndim != 2 or 0 in audio.shape or audio.dtype.kind != "f":
            raise ValueError(f"`audio` must be a non-empty float array (batch, samples) of waveforms at "
                             f"{self.sample_rate} Hz. Received: shape={audio.shape}, dtype={audio.dtype}")
        if audio.shape[1] > window:
            raise ValueError(f"`audio` holds {audio.shape[1]} samples a row, more than the encoder's window of "
                             f"{window} ({2 * self.max_source_positions} frames of {self.hop_length}). "
                             f"Received: shape={audio.shape}")
        if not np.all(np.isfinite(audio)):
            raise ValueError(f"`audio` must hold finite samples. Received: {int(np.sum(~np.isfinite(audio)))} NaN "
                             "or infinite")
        return audio.astype("float32")

    def default_generation_config(self):
        """The preprocessor's (its special tokens: start, forced prompt, end), else `GenerationConfig()`."""
        preprocessor = self.preprocessor
        if preprocessor is None:
            return GenerationConfig()
        return preprocessor.generation_config()

    def generate(self, audio, config=None, *, streamer=None, pad_batch=True, **overrides):
        """Waveforms in, token ids out: `kformer.models.generate(self, audio, config, ...)`, from
        `self.generation_config` when `config` is None. Returns the tokens after the start token (the
        forced prompt first), through the end token, then 0."""
        return generate_ids(self, audio, self._config_with(config, overrides), streamer=streamer,
                            pad_batch=pad_batch)

    def detect_language(self, audio):
        """The most likely language token of each recording, as transformers' `detect_language`: the
        decoder's first step after `<|startoftranscript|>`, over the preprocessor's language tokens.

        Args:
            audio: raw audio (see `transcribe`).

        Returns:
            list of str: each recording's language code (`"en"`).
        """
        preprocessor = self._require_preprocessor("detect_language")
        if not preprocessor.languages:
            raise ValueError("This checkpoint has no language tokens (an English-only model): nothing to detect.")
        return self._languages_of(preprocessor.encode(audio)["audio"])

    def _languages_of(self, waveforms):
        """`detect_language` of the preprocessor's waveforms `(batch, window)`."""
        preprocessor = self.preprocessor
        start = np.full((len(waveforms), 1), preprocessor.start_token_id, "int32")
        logits = ops.convert_to_numpy(self.predict_on_batch({"audio": waveforms, "decoder_token_ids": start}))
        codes = list(preprocessor.languages)
        ids = [preprocessor.languages[code] for code in codes]
        return [codes[i] for i in np.argmax(logits[:, -1, ids], axis=-1)]

    def transcribe(self, audio, config=None, *, language=None, task="transcribe", batch_size=8, **overrides):
        """Raw audio -> one transcript (str) per recording.

        Args:
            audio: a WAV path, WAV bytes, a waveform at the preprocessor's
                rate, a `(waveform, sample_rate)` pair, or a list mixing them
                (see `kformer.data.whisper.WhisperPreprocessor`); each at
                most the preprocessor's window (30 s).
            config: a `GenerationConfig`. Defaults to `self.generation_config`.
            language: str or None. The spoken language's code (`"en"`); None
                detects it per recording (`detect_language`) where the
                checkpoint has language tokens.
            task: `"transcribe"` or `"translate"` (into English).
            batch_size: int. Recordings a decoding call. Defaults to `8`.
            **overrides: `GenerationConfig` fields (`max_length=...`,
                `sampler=BeamSampler(num_beams=5)`).

        Returns:
            str, or a list of str (a list in, a list out).

        Example: `model.transcribe(["a.wav", wav_bytes], language="en")` -> `[" Hello.", " Thank you."]`.
        """
        preprocessor = self._require_preprocessor("transcribe")
        check_batch_size(batch_size)
        single = not isinstance(audio, list)
        waveforms = preprocessor.encode(audio)["audio"]
        if language is None and preprocessor.languages:
            languages = self._languages_of(waveforms)
        else:
            languages = [language] * len(waveforms)
        config = self._config_with(config, overrides)
        texts = [None] * len(waveforms)
        for code in dict.fromkeys(languages):  # one decoding call (or a few) a language
            rows = [i for i, c in enumerate(languages) if c == code]
            prompt = config.replace(forced_prompt_ids=preprocessor.prompt_ids(code, task))
            for start in range(0, len(rows), batch_size):
                chunk = rows[start:start + batch_size]
                ids = generate_ids(self, waveforms[chunk], prompt)
                for row, text in zip(chunk, preprocessor.detokenize(ids)):
                    texts[row] = text
        return texts[0] if single and len(texts) == 1 else texts
