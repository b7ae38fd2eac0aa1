"""Marian (OPUS-MT) tokenization: SentencePiece pieces looked up in the checkpoint's `vocab.json`.

A Marian checkpoint ships two SentencePiece models (`source.spm`, `target.spm`) and one joint
vocabulary (`vocab.json`, piece -> id). Encoding splits a text into the source model's pieces and
looks each up in the vocabulary (unknown pieces become `<unk>`), then appends `</s>`; decoding
looks ids up, drops the special tokens and joins the pieces with a SentencePiece model. This is
what transformers' `MarianTokenizer` does, with the same `sentencepiece` library, so ids and texts
agree by construction (tests/models/test_pretrained_marian.py checks it on the bundled test
sentences and edge cases). The `sentencepiece` package is needed (`pip install sentencepiece`).

Tokenization runs in Python, not in TensorFlow ops: in `tf.data` it is a `tf.numpy_function`, and
an exported translator takes source token ids (`tokenizes_in_core_tensorflow = False`); its
translations are detokenized in the graph (`MarianPreprocessor.detokenize_tensor`).
"""

import json
import pathlib
import re

import keras
import numpy as np
import tensorflow as tf

from kformer.data.preprocessors.base import Preprocessor, as_text_list, is_text

SPECIAL_TOKENS = ("</s>", "<unk>", "<pad>")  # transformers' MarianTokenizer: eos, unk, pad
LANGUAGE_CODE = re.compile(r">>[^<>]*<<")  # a multilingual checkpoint's target token, `>>spa<<`


def _sentencepiece(model_bytes, file):
    try:
        import sentencepiece
    except ImportError:
        raise ImportError("Marian tokenization needs the `sentencepiece` package: pip install sentencepiece") from None
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model_bytes)
    except (RuntimeError, OSError) as err:
        raise ValueError(f"{file} is not a SentencePiece model: {err}") from None
    return processor


class MarianTokenizer:
    """Text <-> ids of a Marian checkpoint: SentencePiece pieces, then `vocab.json` ids.

    Args:
        source_model, target_model: bytes. The `source.spm` / `target.spm` SentencePiece models.
        vocabulary: dict of piece -> id (`vocab.json`, shared by both sides). Must hold
            `</s>`, `<unk>` and `<pad>`.

    Example:

        tokenizer = MarianTokenizer.from_folder("opus-mt-en-es")
        ids = tokenizer.encode("How are you?")  # ends with tokenizer.end_id
        tokenizer.decode(ids)  # 'How are you?'
    """

    def __init__(self, source_model, target_model, vocabulary):
        self.source_model, self.target_model = bytes(source_model), bytes(target_model)
        self._source = _sentencepiece(self.source_model, "source.spm")
        self._target = _sentencepiece(self.target_model, "target.spm")
        if not isinstance(vocabulary, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in vocabulary.items()):
            raise ValueError("vocab.json must map pieces (str) to ids (int).")
        missing = [token for token in SPECIAL_TOKENS if token not in vocabulary]
        if missing:
            raise ValueError(f"vocab.json lacks the special tokens {missing}; a Marian vocabulary holds "
                             f"{list(SPECIAL_TOKENS)}.")
        self.token_ids = dict(vocabulary)
        self.vocabulary_size = max(vocabulary.values()) + 1
        self.vocabulary = [None] * self.vocabulary_size  # id -> piece (None for an id no piece has)
        for token, index in vocabulary.items():
            if index < 0:
                raise ValueError(f"vocab.json maps {token!r} to {index}; ids must be >= 0.")
            self.vocabulary[index] = token
        self.end_id, self.unknown_id, self.padding_id = (vocabulary[t] for t in SPECIAL_TOKENS)
        self.special_ids = {vocabulary[t] for t in SPECIAL_TOKENS}
        self.language_codes = sorted(t for t in vocabulary if LANGUAGE_CODE.fullmatch(t))
        self._split = re.compile("(" + "|".join(map(re.escape, SPECIAL_TOKENS)) + ")")

    @classmethod
    def from_folder(cls, folder):
        """Read `source.spm`, `target.spm` and `vocab.json` from a checkpoint folder (each named when missing)."""
        folder = pathlib.Path(folder)
        files = {name: folder / name for name in ("source.spm", "target.spm", "vocab.json")}
        missing = [name for name, path in files.items() if not path.is_file()]
        if missing:
            raise ValueError(f"{folder} lacks {missing}: a Marian checkpoint's tokenizer is source.spm, target.spm "
                             "and vocab.json.")
        try:
            vocabulary = json.loads(files["vocab.json"].read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"{files['vocab.json']} is not valid JSON: {err}") from None
        return cls(files["source.spm"].read_bytes(), files["target.spm"].read_bytes(), vocabulary)

    def token_to_id(self, token):
        return self.token_ids[token]

    def pieces(self, text, side="source"):
        """The pieces of `text`: a leading `>>lang<<` code and the special tokens kept whole, the rest split
        by the `side`'s SentencePiece model."""
        model = self._source if side == "source" else self._target
        code = LANGUAGE_CODE.match(text)
        pieces = [code.group()] if code else []
        for part in self._split.split(text[code.end():] if code else text):
            if part in SPECIAL_TOKENS:
                pieces.append(part)
            elif part:
                pieces += model.encode(part, out_type=str)
        return pieces

    def encode(self, text, side="source"):
        """`text` -> ids, `</s>` last (as transformers' `MarianTokenizer(text)["input_ids"]`)."""
        return [self.token_ids.get(piece, self.unknown_id) for piece in self.pieces(text, side)] + [self.end_id]

    def decode(self, ids):
        """Ids -> text without the special tokens (as `batch_decode(..., skip_special_tokens=True)`).

        The pieces are joined by the source model, as transformers does for a shared vocabulary.
        """
        pieces = [self.vocabulary[i] if 0 <= i < self.vocabulary_size and self.vocabulary[i] is not None
                  else self._source.IdToPiece(int(i)) for i in ids if int(i) not in self.special_ids]
        text = self._source.DecodePieces([p for p in pieces if p])
        return text.replace("\u2581", " ").strip()


@keras.saving.register_keras_serializable(package="kformer")
class MarianPreprocessor(Preprocessor):
    """Source (+ target) texts -> a Marian `Translator`'s inputs; generated ids -> texts.

    `call(sources)` gives `{"encoder_token_ids"}`; `call(sources, targets)`
    gives `({"encoder_token_ids", "decoder_token_ids"}, labels)`: int32
    `(batch, sequence_length)` padded with `<pad>`, sources and labels
    `pieces + </s>` (cut to `sequence_length` with `</s>` kept last, as
    transformers truncates), decoder inputs `<pad> + labels[:-1]` (Marian
    starts its decoder from the padding id). The model has no Keras mask on
    its logits, so train with a loss that skips the padding label:
    `LabelSmoothedCrossEntropy(ignore_id=model.padding_id)`. `translate`
    reads `start_token_id`, `end_token_id` and the checkpoint's `decoding_defaults`.

    Args:
        tokenizer: `MarianTokenizer`.
        sequence_length: int. Longest source / decoder sequence (ids past it are cut; the last kept is `</s>`).
        target_language: str or None. A multilingual checkpoint's target code (`">>spa<<"`), put
            before every source. Defaults to `None`.
        decoding_defaults: dict. `translate`'s defaults from the checkpoint's generation config
            (`strategy`, `num_beams`, `max_length`). Defaults to `None` (greedy).

    Example:

        translator = kformer.models.from_pretrained("hf://Helsinki-NLP/opus-mt-en-es")
        translator.preprocessor.encode(["How are you?"])["encoder_token_ids"]  # pieces' ids, </s>, then <pad>
        translator.translate(["How are you?"])  # the checkpoint's beam width and length
    """

    tokenizes_in_core_tensorflow = False  # SentencePiece in Python: the export takes source ids

    def __init__(self, tokenizer, sequence_length=512, target_language=None, decoding_defaults=None, **kwargs):
        super().__init__(sequence_length, **kwargs)
        if not isinstance(tokenizer, MarianTokenizer):
            raise ValueError(f"`tokenizer` must be a MarianTokenizer. Received: {type(tokenizer).__name__}")
        loading = tokenizer.vocabulary is None  # `from_config`: the files arrive with `load_assets`
        if target_language is not None and not loading and target_language not in tokenizer.language_codes:
            raise ValueError(f"`target_language` must be one of the checkpoint's codes {tokenizer.language_codes[:8]}"
                             f"{' ...' if len(tokenizer.language_codes) > 8 else ''}. "
                             f"Received: target_language={target_language!r}")
        self.tokenizer = tokenizer
        self.target_language = target_language
        self.decoding_defaults = dict(decoding_defaults or {})

    # What `Translator` reads of a preprocessor
    @property
    def source_tokenizer(self):
        return self.tokenizer

    @property
    def target_tokenizer(self):
        return self.tokenizer

    @property
    def start_token_id(self):
        return self.tokenizer.padding_id

    @property
    def end_token_id(self):
        return self.tokenizer.end_id

    number_slot_id = None  # numbers are pieces like any other

    def is_raw(self, x):
        return is_text(x)

    def _ids(self, texts, side, prefix="", start=None):
        """Python texts -> int32 `(batch, sequence_length)` padded with `<pad>` (`start` first when given)."""
        out = np.full((len(texts), self.sequence_length), self.tokenizer.padding_id, "int32")
        for row, text in enumerate(texts):
            ids = self.tokenizer.encode(prefix + text, side)
            if len(ids) > self.sequence_length:  # cut, `</s>` kept last
                ids = ids[:self.sequence_length - 1] + [self.tokenizer.end_id]
            if start is not None:
                ids = [start] + ids[:-1]  # shifted right: the decoder input of `target + </s>`
            out[row, :len(ids)] = ids
        return out

    def _texts(self, x):
        return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in np.asarray(x).reshape(-1)]

    def inputs(self, x):
        prefix = "" if self.target_language is None else self.target_language
        ids = tf.numpy_function(lambda t: self._ids(self._texts(t), "source", prefix), [x], tf.int32, stateful=False)
        return {"encoder_token_ids": tf.ensure_shape(ids, [None, self.sequence_length])}

    def encode(self, x, chunk_size=2048):
        texts = as_text_list(x)
        if not texts:
            raise ValueError("`x` is empty: expected at least one input.")
        prefix = "" if self.target_language is None else self.target_language
        return {"encoder_token_ids": self._ids(texts, "source", prefix)}

    def call(self, x, y=None, sample_weight=None):
        inputs = self.inputs(x)
        if y is None:
            return keras.utils.pack_x_y_sample_weight(inputs, None, sample_weight)

        def targets(t):
            texts = self._texts(t)
            labels = self._ids(texts, "target")
            return self._ids(texts, "target", start=self.start_token_id), labels

        decoder, labels = tf.numpy_function(targets, [y], (tf.int32, tf.int32), stateful=False)
        inputs["decoder_token_ids"] = tf.ensure_shape(decoder, [None, self.sequence_length])
        labels = tf.ensure_shape(labels, [None, self.sequence_length])
        return keras.utils.pack_x_y_sample_weight(inputs, labels, sample_weight)

    def detokenize(self, token_ids, sources=None):
        """Generated ids `(batch, length)` -> list of str, each row read up to its first `</s>`."""
        texts = []
        for row in np.asarray(token_ids):
            row = [int(i) for i in row]
            if self.end_token_id in row:
                row = row[:row.index(self.end_token_id)]
            texts.append(self.tokenizer.decode(row))
        return texts

    def detokenize_tensor(self, token_ids, sources=None):
        """`detokenize` in core TensorFlow ops (the served graph): ids `(batch, length)` -> tf.string `[batch]`.

        Each row up to its first `</s>`, special tokens dropped, pieces joined, `▁` read as a space, the ends
        stripped: what SentencePiece's decoding does with these pieces (tests compare the two).
        """
        pieces = tf.constant(["" if token is None or i in self.tokenizer.special_ids else token
                              for i, token in enumerate(self.tokenizer.vocabulary)])
        ids = tf.cast(token_ids, tf.int32)
        before_end = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, self.end_token_id), tf.int32), axis=1), 0)
        text = tf.strings.reduce_join(tf.where(before_end, tf.gather(pieces, ids), ""), axis=1)
        return tf.strings.strip(tf.strings.regex_replace(text, "\u2581", " "))

    def save_assets(self, dir_path):
        folder = pathlib.Path(dir_path)
        (folder / "source.spm").write_bytes(self.tokenizer.source_model)
        (folder / "target.spm").write_bytes(self.tokenizer.target_model)
        (folder / "vocab.json").write_text(json.dumps(self.tokenizer.token_ids, ensure_ascii=False), encoding="utf-8")

    def load_assets(self, dir_path):
        self.tokenizer = MarianTokenizer.from_folder(dir_path)

    def get_config(self):
        return {**super().get_config(), "target_language": self.target_language,
                "decoding_defaults": self.decoding_defaults}

    @classmethod
    def from_config(cls, config):
        return cls(tokenizer=_Unloaded(), **config)


class _Unloaded(MarianTokenizer):
    """The tokenizer of a preprocessor being loaded: its files arrive with `load_assets`."""

    def __init__(self):
        self.vocabulary, self.language_codes, self.padding_id, self.end_id = None, [], 0, 0
