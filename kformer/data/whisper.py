"""Whisper's audio and text ends: recordings -> 16 kHz waveforms padded to the 30-second window, and token ids
-> text through its byte-level BPE vocabulary with its special tokens.

`WhisperPreprocessor.from_folder` reads a Hugging Face Whisper folder's tokenizer (`tokenizer.json`, or
`vocab.json` + `added_tokens.json`) and `generation_config.json` (language and task tokens, suppressed
tokens, length). The log-mel features are the model's first layer (`kformer.layers.LogMelSpectrogram`),
not the preprocessor's.
"""

import json
import pathlib

import keras
import numpy as np
import tensorflow as tf

from kformer.data.bpe import NUL_MESSAGE
from kformer.data.preprocessors import as_strings
from kformer.data.preprocessors.audio import AudioPreprocessor

TASKS = ("transcribe", "translate")


def _byte_decoder():
    """GPT-2's byte-level alphabet, reversed: each of the 256 printable characters -> its byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    codes, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes)}


BYTE_DECODER = _byte_decoder()


def read_merges(folder):
    """A Whisper tokenizer folder's BPE merges (`"a b"` strings, in rank order): `tokenizer.json`'s, else
    `merges.txt`'s; `[]` when it has neither (the preprocessor then detokenizes only).

    Args:
        folder: str or path. The checkpoint (or tokenizer) folder.

    Example:

    >>> read_merges("/no/such/folder")
    []
    """
    folder = pathlib.Path(folder)
    fast = folder / "tokenizer.json"
    if fast.is_file():
        merges = json.loads(fast.read_text(encoding="utf-8")).get("model", {}).get("merges") or []
        return [m if isinstance(m, str) else " ".join(m) for m in merges]
    if (folder / "merges.txt").is_file():
        lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
        return [line for line in lines if line and not line.startswith("#version")]
    return []


def read_vocabulary(folder):
    """A Whisper tokenizer folder -> (tokens by id, the ids of the added special tokens).

    `tokenizer.json` (transformers' fast tokenizer) where it exists, else `vocab.json` and
    `added_tokens.json`; a ValueError naming the file when neither gives a complete vocabulary.

    Args:
        folder: str or path. The checkpoint (or tokenizer) folder.

    Example:

    >>> read_vocabulary("/no/such/folder")
    Traceback (most recent call last):
    ...
    ValueError: /no/such/folder has no Whisper tokenizer: expected tokenizer.json, or vocab.json (and added_tokens.json).
    """
    folder = pathlib.Path(folder)
    fast = folder / "tokenizer.json"
    if fast.is_file():
        data = json.loads(fast.read_text(encoding="utf-8"))
        vocabulary = data.get("model", {}).get("vocab")
        added = {item["content"]: item["id"] for item in data.get("added_tokens", [])}
        source = fast
    elif (folder / "vocab.json").is_file():
        vocabulary = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        extra = folder / "added_tokens.json"
        added = json.loads(extra.read_text(encoding="utf-8")) if extra.is_file() else {}
        source = folder / "vocab.json"
    else:
        raise ValueError(f"{folder} has no Whisper tokenizer: expected tokenizer.json, or vocab.json (and "
                         "added_tokens.json).")
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise ValueError(f"{source}: no byte-level BPE vocabulary (a token -> id object) in it.")
    table = {**vocabulary, **added}
    size = max(table.values()) + 1
    tokens = [None] * size
    for token, i in table.items():
        tokens[i] = token
    missing = [i for i, token in enumerate(tokens) if token is None]
    if missing:
        raise ValueError(f"{source}: ids {missing[:5]} ({len(missing)} in all) have no token; the vocabulary must "
                         f"cover every id from 0 to {size - 1}.")
    return tokens, sorted(set(added.values()))


@keras.saving.register_keras_serializable(package="kformer")
class WhisperPreprocessor(AudioPreprocessor):
    """Audio of any sample rate -> `{"audio": (batch, window)}` waveforms for `SpeechToText`; ids -> text.

    Each recording is decoded and resampled to 16 kHz as `AudioPreprocessor`
    does (WAV files, WAV bytes, waveforms, `(waveform, rate)` pairs), then
    padded with silence (or refused, when longer) to `chunk_seconds`, the
    window Whisper was trained on. `detokenize` joins the byte-level pieces
    up to the end token, without the special tokens.

    Args:
        tokens: list of str. The token of each id (byte-level BPE pieces,
            then the special tokens).
        special_ids: ids of the special tokens (not part of any text).
        start_token_id, end_token_id: ints. `<|startoftranscript|>`, `<|endoftext|>`.
        languages: dict. Language code -> its token's id (`{"en": 50259}`);
            empty for an English-only checkpoint.
        task_ids: dict. `"transcribe"` / `"translate"` -> token id.
        no_timestamps_id: int or None. `<|notimestamps|>`.
        decoding_defaults: dict. `GenerationConfig` fields of the checkpoint
            (`suppress_token_ids`, `begin_suppress_token_ids`).
        max_new_tokens: int. Tokens generated after the forced prompt, at
            most (transformers' Whisper `max_length`). Defaults to `448`.
        max_target_positions: int. The decoder's positions, which bound the
            prompt and the tokens together. Defaults to `448`.
        default_language: str or None. The language `generation_config()`
            puts in its forced prompt. Defaults to `"en"` where there is one.
        merges: list of str or None. The BPE merges (`"a b"`), for
            `tokenize` and training data (`dataset`); None: detokenizing only.
        sample_rate: int. Defaults to `16000`.
        chunk_seconds: float. The window. Defaults to `30.0`.
        **kwargs: Passed to `keras.layers.Layer`.

    Example:

    >>> tokens = ["a", "b", "Ġc", "<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>"]
    >>> preprocessor = WhisperPreprocessor(tokens, [3, 4, 5], start_token_id=4, end_token_id=3, no_timestamps_id=5)
    >>> preprocessor.encode([np.zeros(8000, "float32")])["audio"].shape
    (1, 480000)
    >>> preprocessor.detokenize(np.array([[5, 0, 1, 2, 3, 0]]))
    ['ab c']
    """

    def __init__(self, tokens, special_ids, start_token_id, end_token_id, languages=None, task_ids=None,
                 no_timestamps_id=None, decoding_defaults=None, max_new_tokens=448, max_target_positions=448,
                 default_language=None, merges=None, sample_rate=16000, chunk_seconds=30.0, **kwargs):
        kwargs.pop("num_mel_bins", None)
        kwargs.pop("max_seconds", None)
        super().__init__(sample_rate=sample_rate, max_seconds=chunk_seconds, **kwargs)
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
            raise ValueError(f"`tokens` must be a list of str, one per id. Received: {type(tokens).__name__}")
        self.tokens = list(tokens)
        self.special_ids = sorted(int(i) for i in special_ids)
        for name, value in (("start_token_id", start_token_id), ("end_token_id", end_token_id)):
            if not isinstance(value, int) or not 0 <= value < len(self.tokens):
                raise ValueError(f"`{name}` must be a token id in [0, {len(self.tokens)}). Received: {name}={value!r}")
        self.start_token_id, self.end_token_id = start_token_id, end_token_id
        self.languages = dict(languages or {})
        self.task_ids = dict(task_ids or {})
        self.no_timestamps_id = no_timestamps_id
        self.decoding_defaults = dict(decoding_defaults or {})
        for name, value in (("max_new_tokens", max_new_tokens), ("max_target_positions", max_target_positions)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
        self.max_new_tokens, self.max_target_positions = max_new_tokens, max_target_positions
        if default_language is None and "en" in self.languages:
            default_language = "en"
        if default_language is not None and default_language not in self.languages:
            raise ValueError(f"`default_language` must be one of the checkpoint's languages {sorted(self.languages)}."
                             f" Received: default_language={default_language!r}")
        self.default_language = default_language
        self.chunk_seconds = float(chunk_seconds)
        self.window = int(round(self.chunk_seconds * sample_rate))
        self._special = np.zeros(len(self.tokens), bool)
        self._special[self.special_ids] = True
        self._token_table = None  # `detokenize_tensor`'s bytes of each token, made on first use
        self.merges = list(merges or [])
        self._byte_pairs = None  # `tokenize`'s traced keras-hub tokenizer, made on first use

    @property
    def vocabulary_size(self):
        return len(self.tokens)

    @classmethod
    def from_folder(cls, folder, max_target_positions=448, **kwargs):
        """A Hugging Face Whisper folder -> its preprocessor: the tokenizer files and `generation_config.json`
        (`max_target_positions`: config.json's)."""
        folder = pathlib.Path(folder)
        tokens, special_ids = read_vocabulary(folder)
        ids = {tokens[i]: i for i in special_ids}
        path = folder / "generation_config.json"
        settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

        def token_id(token):
            if token not in ids:
                raise ValueError(f"{folder}: the tokenizer has no {token} token; it is not a Whisper tokenizer.")
            return ids[token]

        languages = {token.strip("<|>"): i for token, i in (settings.get("lang_to_id") or {}).items()}
        task_ids = dict(settings.get("task_to_id") or {})
        if not task_ids and "<|transcribe|>" in ids:
            task_ids = {task: ids[f"<|{task}|>"] for task in TASKS if f"<|{task}|>" in ids}
        defaults = {"suppress_token_ids": list(settings.get("suppress_tokens") or []),
                    "begin_suppress_token_ids": list(settings.get("begin_suppress_tokens") or [])}
        return cls(tokens, special_ids, start_token_id=settings.get("decoder_start_token_id",
                                                                    token_id("<|startoftranscript|>")),
                   end_token_id=token_id("<|endoftext|>"), languages=languages, task_ids=task_ids,
                   no_timestamps_id=settings.get("no_timestamps_token_id", ids.get("<|notimestamps|>")),
                   decoding_defaults=defaults, max_new_tokens=int(settings.get("max_length", 448)),
                   max_target_positions=max_target_positions, merges=read_merges(folder), **kwargs)

    # ---- audio --------------------------------------------------------------------------------------------
    def inputs(self, x):
        """WAV bytes `(batch,)` -> `{"audio": (batch, window)}`: each resampled, then padded with silence."""
        def one(wav_bytes):
            waveform = self.decode(wav_bytes)[:self.window]  # resampling may round up by a sample
            return tf.pad(waveform, [[0, self.window - tf.shape(waveform)[0]]])
        audio = tf.map_fn(one, x, fn_output_signature=tf.TensorSpec([self.window], tf.float32))
        return {"audio": tf.ensure_shape(audio, [None, self.window])}

    # ---- training data ------------------------------------------------------------------------------------
    def tokenize(self, texts):
        """Texts -> `tf.RaggedTensor` of their byte-level BPE ids (no special tokens), as transformers'
        `WhisperTokenizer(texts, add_special_tokens=False)` gives them."""
        texts = as_strings(texts, "texts")
        for i, text in enumerate(texts.numpy()):
            if b"\0" in text:
                raise ValueError(f"`texts`[{i}]: {NUL_MESSAGE} Received: {text[:80]!r}")
        if self._byte_pairs is None:
            if not self.merges:
                raise ValueError("This preprocessor has no BPE merges (its checkpoint folder had no tokenizer.json "
                                 "or merges.txt): it detokenizes, but cannot tokenize transcripts.")
            import keras_hub

            pieces = {token: i for i, token in enumerate(self.tokens) if not self._special[i]}
            tokenizer = keras_hub.tokenizers.BytePairTokenizer(vocabulary=pieces, merges=self.merges)
            tokenizer._allow_python_workflow = False  # noqa: SLF001 (its TensorFlow path: transformers' ids)
            self._byte_pairs = tf.function(lambda t: tf.cast(tokenizer.tokenize(t), tf.int32), autograph=False,
                                           input_signature=[tf.TensorSpec([None], tf.string)])  # traced once
        return self._byte_pairs(texts)

    def label_ids(self, texts, language=None, task="transcribe"):
        """Transcripts -> each one's decoder ids: `<|startoftranscript|>`, the forced prompt, the text's
        tokens, `<|endoftext|>` (`tf.RaggedTensor`); a ValueError names one longer than the decoder's positions."""
        prefix = [self.start_token_id, *self.prompt_ids(language, task)]
        ids = self.tokenize(texts)
        rows = tf.shape(ids)[0]
        ids = tf.concat([tf.ragged.constant([prefix] * int(rows), dtype=tf.int32)[:rows], tf.cast(ids, tf.int32),
                         tf.fill([rows, 1], self.end_token_id)], axis=1)
        lengths = ids.row_lengths().numpy()
        if len(lengths) and lengths.max() - 1 > self.max_target_positions:
            row = int(lengths.argmax())
            raise ValueError(f"`y[{row}]` makes {lengths[row] - 1} decoder tokens (prompt and end included), more "
                             f"than the model's max_target_positions={self.max_target_positions}.")
        return ids

    def dataset(self, x, y=None, sample_weight=None, *, batch_size=8, shuffle=False, seed=0, language=None,
                task="transcribe"):
        """Batched `tf.data.Dataset` of `(inputs, labels, weights)` for `fit` / `evaluate`, as transformers'
        Whisper fine-tuning: `inputs` `{"audio", "decoder_token_ids"}` (the start token, the prompt, the text),
        `labels` the same ids one step on (the end token last), `weights` 1 on each real label.

        Args:
            x: raw audio (see `AudioPreprocessor`): WAV files, WAV bytes or waveforms.
            y: list of str. The transcripts, one per recording.
            sample_weight: not supported (None).
            batch_size: int. Defaults to `8`.
            shuffle: bool. Reshuffle each epoch. Defaults to `False`.
            seed: int. The shuffle's seed. Defaults to `0`.
            language, task: the forced prompt of every transcript (`prompt_ids`).
        """
        if isinstance(x, tf.data.Dataset) or y is None or sample_weight is not None:
            raise ValueError("`dataset` takes raw audio `x` with transcripts `y` (a list of str), and no "
                             f"`sample_weight`. Received: y={'None' if y is None else type(y).__name__}, "
                             f"sample_weight={'None' if sample_weight is None else type(sample_weight).__name__}")
        texts = [y] if isinstance(y, str) else list(y)
        if not all(isinstance(t, str) for t in texts):
            raise ValueError(f"`y` must be the transcripts (a list of str). Received: y={str(y)[:80]!r}")
        wav_bytes = self._raw_tensor(x)
        if len(texts) != int(tf.shape(wav_bytes)[0]):
            raise ValueError(f"`y` has {len(texts)} transcripts but `x` has {int(tf.shape(wav_bytes)[0])} "
                             "recordings: expected one per recording.")
        ids = self.label_ids(texts, language, task)
        ds = tf.data.Dataset.from_tensor_slices((wav_bytes, ids))
        if shuffle:
            ds = ds.shuffle(len(texts), seed=seed, reshuffle_each_iteration=True)

        def pack(wav_bytes, ids):
            dense = ids.to_tensor(default_value=self.end_token_id)
            weights = tf.sequence_mask(ids.row_lengths() - 1, tf.shape(dense)[1] - 1, tf.float32)
            return ({"audio": self.inputs(wav_bytes)["audio"], "decoder_token_ids": dense[:, :-1]}, dense[:, 1:],
                    weights)
        ds = ds.ragged_batch(batch_size).map(pack, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.apply(tf.data.experimental.assert_cardinality(-(-len(texts) // batch_size))).prefetch(2)

    # ---- text ---------------------------------------------------------------------------------------------
    def prompt_ids(self, language=None, task="transcribe"):
        """The forced ids after `<|startoftranscript|>`: language, task, `<|notimestamps|>` (those the
        checkpoint has)."""
        if task not in TASKS:
            raise ValueError(f"`task` must be one of {TASKS}. Received: task={task!r}")
        ids = []
        if self.languages:
            language = self.default_language if language is None else language
            if language not in self.languages:
                raise ValueError(f"`language` must be one of this checkpoint's languages {sorted(self.languages)}. "
                                 f"Received: language={language!r}")
            ids.append(self.languages[language])
        elif language not in (None, "en"):
            raise ValueError(f"This checkpoint is English-only. Received: language={language!r}")
        if self.task_ids:
            if task not in self.task_ids:
                raise ValueError(f"This checkpoint has no {task!r} task. Received: task={task!r}")
            ids.append(self.task_ids[task])
        if self.no_timestamps_id is not None:
            ids.append(self.no_timestamps_id)
        return tuple(ids)

    def generation_config(self):
        """The checkpoint's decoding defaults as a `kformer.generation.GenerationConfig` (greedy). Its
        `max_length` counts the forced prompt and the generated tokens, as transformers' Whisper does: up to
        `max_new_tokens` after the prompt, within the decoder's positions (the start token takes one)."""
        from kformer.generation.config import GenerationConfig  # data/ reaches generation/ only when asked

        prompt = self.prompt_ids()
        length = min(self.max_new_tokens + len(prompt), self.max_target_positions - 1)
        return GenerationConfig(start_token_id=self.start_token_id, stop_token_ids=self.end_token_id,
                                forced_prompt_ids=prompt, max_length=length, **self.decoding_defaults)

    def token_bytes(self):
        """The bytes of each id's token (`b""` for the special tokens): what `detokenize_tensor` joins."""
        return [b"" if special else bytes(BYTE_DECODER.get(c, ord("?")) for c in token)
                for token, special in zip(self.tokens, self._special)]

    def detokenize_tensor(self, token_ids):
        """Ids `(batch, length)` -> string `(batch,)` in core TensorFlow ops (a served graph): each row's
        tokens before its first end token, special tokens dropped, invalid UTF-8 replaced by U+FFFD."""
        if self._token_table is None:
            self._token_table = np.array(self.token_bytes(), dtype=object)
        ids = tf.cast(token_ids, tf.int32)
        before_end = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, self.end_token_id), tf.int32), axis=1), 0)
        known = tf.logical_and(before_end, tf.logical_and(ids >= 0, ids < len(self.tokens)))
        pieces = tf.where(known, tf.gather(tf.constant(self._token_table), tf.clip_by_value(ids, 0, len(self.tokens) - 1)), "")
        text = tf.strings.reduce_join(pieces, axis=1)
        return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)

    def detokenize(self, token_ids):
        """Ids `(batch, length)` -> list of str: `detokenize_tensor`'s text (each row up to its first end
        token, without special tokens)."""
        rows = np.asarray(keras.ops.convert_to_numpy(token_ids))
        rows = rows.reshape(len(rows), -1).astype("int32")
        return [text.decode("utf-8") for text in self.detokenize_tensor(rows).numpy()]

    def get_config(self):
        config = super().get_config()
        for key in ("num_mel_bins", "frame_length_ms", "frame_step_ms", "max_seconds"):
            config.pop(key, None)
        return {**config, "tokens": self.tokens, "special_ids": self.special_ids,
                "start_token_id": self.start_token_id, "end_token_id": self.end_token_id,
                "languages": self.languages, "task_ids": self.task_ids, "no_timestamps_id": self.no_timestamps_id,
                "decoding_defaults": self.decoding_defaults, "max_new_tokens": self.max_new_tokens,
                "max_target_positions": self.max_target_positions, "default_language": self.default_language,
                "merges": self.merges,
                "chunk_seconds": self.chunk_seconds}
