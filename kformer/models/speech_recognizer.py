"""Speech recognition: a Conformer encoder with a CTC head (Graves et al. 2006) over characters."""

import keras
import numpy as np
from keras import ops

from kformer.layers.checks import check_positive_ints, check_rates
from kformer.models.conformer import ConformerEncoder
from kformer.models.registry import builder, register
from kformer.models.task import Task

DIGITS = tuple("0123456789")
BLANK = 0  # CTC blank id; token i of the vocabulary is id i + 1


def greedy_ctc_decode(logits, padding_mask):
    """Best path decoding: `(batch, frames, vocabulary + 1)` logits -> `(batch, frames)` int32 token ids.

    Takes the most likely id of each real frame, keeps the first of each run
    of repeats and drops blanks; what is dropped (and padding) is 0. Keras ops:
    the same function runs in process (`SpeechRecognizer.transcribe`) and in the
    served graph (`kformer.export`'s `speech_to_text`).

    Args:
        logits: float `(batch, frames, vocabulary + 1)`, blank at index 0.
        padding_mask: bool `(batch, frames)`, True = real frame.

    Returns:
        int32 `(batch, frames)`: token ids (`1 ..`), 0 where nothing is emitted.

    Example:

    >>> logits = np.eye(3)[[[1, 1, 0, 1, 2, 2]]] * 5.0  # ids 1 1 blank 1 2 2
    >>> np.asarray(greedy_ctc_decode(logits, np.ones((1, 6), bool))).tolist()
    [[1, 0, 0, 1, 2, 0]]
    """
    best = ops.cast(ops.argmax(logits, axis=-1), "int32")  # (batch, frames)
    best = ops.where(padding_mask, best, BLANK)
    previous = ops.pad(best[:, :-1], [[0, 0], [1, 0]], constant_values=BLANK)
    return ops.where(ops.not_equal(best, previous), best, BLANK)


@keras.saving.register_keras_serializable(package="kformer")
class SpeechRecognizer(Task):
    """`features` `(batch, frames, num_features)` + `padding_mask` -> CTC logits `(batch, (frames - 3) // 4, vocabulary + 1)`.

    A `ConformerEncoder` (Gulati et al. 2020) and a linear CTC head: index 0
    is the blank, index `i + 1` the vocabulary's token `i`. Compiled with no
    loss (`compile(optimizer)`; a loss given to `compile` replaces it), `fit` minimizes the CTC loss
    (`keras.ops.ctc_loss`) of label ids `(batch, label_length)`, 0-padded, or of
    transcripts (strings). With an `AudioPreprocessor`, `fit`, `predict` and
    `transcribe` take raw audio: WAV paths, WAV bytes or waveforms.

    Args:
        vocabulary: list of str. The output tokens, one character each;
            transcripts are their concatenation. Defaults to the digits 0-9.
        num_features, num_layers, hidden_dim, num_heads, kernel_size, intermediate_dim, dropout: as
            in `ConformerEncoder`.
        preprocessor: `AudioPreprocessor` or None.

    Attributes: `encoder`, `head`.

    Example:

    >>> import numpy as np
    >>> model = SpeechRecognizer(num_features=16, num_layers=1, hidden_dim=16, num_heads=2, kernel_size=3)
    >>> inputs = {"features": np.zeros((1, 40, 16), "float32"), "padding_mask": np.ones((1, 40), bool)}
    >>> model.predict(inputs, verbose=0).shape
    (1, 9, 11)
    """

    task_type = "speech_recognition"

    def __init__(self, vocabulary=DIGITS, num_features=40, num_layers=4, hidden_dim=144, num_heads=4,
                 kernel_size=15, intermediate_dim=None, dropout=0.1, preprocessor=None, **kwargs):
        vocabulary = check_vocabulary(vocabulary)
        check_positive_ints(num_features=num_features, num_layers=num_layers, hidden_dim=hidden_dim,
                            num_heads=num_heads, kernel_size=kernel_size)
        check_rates(dropout=dropout)
        encoder = ConformerEncoder(num_features=num_features, num_layers=num_layers, hidden_dim=hidden_dim,
                                   num_heads=num_heads, kernel_size=kernel_size, intermediate_dim=intermediate_dim,
                                   dropout=dropout, name="encoder")
        head = keras.layers.Dense(len(vocabulary) + 1, dtype="float32", name="logits")
        inputs = {"features": keras.Input((None, num_features), name="features"),
                  "padding_mask": keras.Input((None,), dtype="bool", name="padding_mask")}
        super().__init__(inputs=inputs, outputs=head(encoder(inputs)), **kwargs)
        self.encoder, self.head = encoder, head
        self.vocabulary, self.num_features, self.num_layers = list(vocabulary), num_features, num_layers
        self.hidden_dim, self.num_heads, self.kernel_size = hidden_dim, num_heads, kernel_size
        self.intermediate_dim, self.dropout = intermediate_dim, dropout
        self._set_preprocessor(preprocessor)

    def validate_preprocessor(self, preprocessor=None):
        preprocessor = self.preprocessor if preprocessor is None else preprocessor
        if preprocessor is not None and getattr(preprocessor, "num_mel_bins", None) != self.num_features:
            raise ValueError(f"The preprocessor must make {self.num_features} features per frame for this model. "
                             f"Received: num_mel_bins={getattr(preprocessor, 'num_mel_bins', None)}")

    def output_padding_mask(self, padding_mask):
        """Input `padding_mask` `(batch, frames)` -> the logits' `(batch, (frames - 3) // 4)` mask."""
        return self.encoder.output_padding_mask(padding_mask)

    # ---- training: CTC -------------------------------------------------------------------------------------
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y is None or y_pred is None or getattr(self, "_compile_loss", None) is not None:
            return super().compute_loss(x, y, y_pred, sample_weight, training)  # compiled with a loss: that one
        labels = ops.cast(y, "int32")
        label_lengths = ops.sum(ops.cast(labels > 0, "int32"), axis=1)
        frames = ops.sum(ops.cast(self.output_padding_mask(x["padding_mask"]), "int32"), axis=1)
        losses = ops.ctc_loss(labels, ops.cast(y_pred, "float32"), label_lengths, frames, mask_index=BLANK)
        losses = losses / ops.cast(ops.maximum(label_lengths, 1), "float32")  # per token
        if sample_weight is not None:
            losses = losses * ops.cast(ops.reshape(sample_weight, (-1,)), "float32")
        loss = ops.mean(losses)
        for extra in self.losses:
            loss = loss + ops.cast(extra, "float32")
        return loss

    def fit(self, x=None, y=None, *args, **kwargs):
        validation = kwargs.get("validation_data")
        if isinstance(validation, tuple) and len(validation) >= 2:
            kwargs["validation_data"] = (validation[0], self.encode_transcripts(validation[1]), *validation[2:])
        return super().fit(x, self.encode_transcripts(y), *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        return super().evaluate(x, self.encode_transcripts(y), *args, **kwargs)

    def encode_transcripts(self, transcripts):
        """Transcripts (str) -> int32 label ids `(batch, longest)`, 0-padded; id arrays pass through.

        Example:

        >>> model = SpeechRecognizer(num_features=8, num_layers=1, hidden_dim=8, num_heads=2, kernel_size=3)
        >>> model.encode_transcripts(["407", "9"]).tolist()
        [[5, 1, 8], [10, 0, 0]]
        """
        if transcripts is None or not (isinstance(transcripts, (list, tuple)) or (
                isinstance(transcripts, np.ndarray) and transcripts.dtype.kind in "OSU")):
            return transcripts
        if not all(isinstance(t, str) for t in transcripts):
            return np.asarray(transcripts)
        index = {token: i + 1 for i, token in enumerate(self.vocabulary)}
        width = max([len(t) for t in transcripts] + [1])
        ids = np.zeros((len(transcripts), width), "int32")
        for row, text in enumerate(transcripts):
            unknown = sorted(set(text) - set(index))
            if unknown or not text:
                raise ValueError(f"`y`[{row}] must be a non-empty transcript of the vocabulary's tokens "
                                 f"{''.join(self.vocabulary)!r}. Received: {text!r}")
            ids[row, :len(text)] = [index[c] for c in text]
        return ids

    # ---- inference ---------------------------------------------------------------------------------------------
    def decode_ids(self, logits, padding_mask):
        """Logits and the input `padding_mask` -> `greedy_ctc_decode`'s token ids (0 = nothing)."""
        return greedy_ctc_decode(logits, self.output_padding_mask(padding_mask))

    def transcribe(self, audio, batch_size=32):
        """Raw audio -> one transcript (str) per recording, by greedy CTC decoding.

        Args:
            audio: a WAV path, WAV bytes, a waveform, a `(waveform, sample_rate)`
                pair, or a list mixing them (see `AudioPreprocessor`); or model
                inputs `{"features", "padding_mask"}`.
            batch_size: int. Recordings per forward pass. Defaults to `32`.

        Returns:
            list of str.

        Example: `recognizer.transcribe(["a.wav", wav_bytes, waveform])` -> `["407", "12", "9"]`.
        """
        check_positive_ints(batch_size=batch_size)  # range() would return nothing for -1, fail bare for 0 and 2.5
        if isinstance(audio, dict):
            inputs = audio
        else:
            inputs = self._require_preprocessor("transcribe").encode(audio)
        texts = []
        table = np.array([""] + self.vocabulary, dtype=object)
        for start in range(0, len(inputs["padding_mask"]), batch_size):
            batch = {k: v[start:start + batch_size] for k, v in inputs.items()}
            logits = self.predict_on_batch(batch)
            ids = ops.convert_to_numpy(self.decode_ids(logits, batch["padding_mask"]))
            texts += ["".join(table[row]) for row in ids]
        return texts

    def transformer_blocks(self):
        return None  # the Conformer blocks are read by `attention_probabilities`

    def attention_probabilities(self, inputs, layer=0):
        """Self-attention probabilities of Conformer block `layer`: `(batch, heads, frames', frames')`.

        Args:
            inputs: model inputs `{"features", "padding_mask"}` (numpy).
            layer: int. Which block. Defaults to `0`.
        """
        encoder = self.encoder
        x = encoder.subsampling(inputs["features"])
        mask = encoder.output_padding_mask(inputs["padding_mask"])
        for block in encoder.conformer_blocks[:layer]:
            x = block(x, padding_mask=mask)
        block = encoder.conformer_blocks[layer]
        x = block._half_step(x, block.feed_forward_1_norm, block.feed_forward_1, False)
        _, probabilities = block.self_attention(block.self_attention_norm(x), padding_mask=mask,
                                                return_attention_scores=True)
        return probabilities


def check_vocabulary(vocabulary):
    """A list of distinct one-character str tokens, or a ValueError naming `vocabulary`.

    Example:

    >>> check_vocabulary("012")
    ['0', '1', '2']
    """
    tokens = list(vocabulary) if isinstance(vocabulary, (str, list, tuple)) else None
    if not tokens or not all(isinstance(t, str) and len(t) == 1 for t in tokens) or len(set(tokens)) != len(tokens):
        raise ValueError("`vocabulary` must be distinct one-character tokens (a str or a list of str). "
                         f"Received: vocabulary={vocabulary!r}")
    return tokens


@register("conformer_speech_tiny", num_features=40, num_layers=4, hidden_dim=96, num_heads=4, kernel_size=15,
          intermediate_dim=192, dropout=0.1)
@builder
def speech_recognizer(**kwargs):
    """Build a `SpeechRecognizer`: `speech_recognizer(preset="conformer_speech_tiny")`.

    Args:
        preset: str. `"conformer_speech_tiny"`: 4 Conformer blocks of width
            96 (4 heads, kernel 15, feed-forward 192) on 40 log-mel features,
            digit tokens; sized for a CPU.
        **kwargs: `SpeechRecognizer` arguments; they replace the preset's.

    Example:

    >>> speech_recognizer(preset="conformer_speech_tiny").output.shape
    (None, None, 11)
    """
    return SpeechRecognizer(**kwargs)
