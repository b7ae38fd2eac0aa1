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
                 default_language=None, sample_rate=16000, chunk_seconds=30.0, **kwargs):
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
                   max_target_positions=max_target_positions, **kwargs)

    # ---- audio --------------------------------------------------------------------------------------------
    def inputs(self, x):
        """WAV bytes `(batch,)` -> `{"audio": (batch, window)}`: each resampled, then padded with silence."""
        def one(wav_bytes):
            waveform = self.decode(wav_bytes)[:self.window]  # resampling may round up by a sample
            return tf.pad(waveform, [[0, self.window - tf.shape(waveform)[0]]])
        audio = tf.map_fn(one, x, fn_output_signature=tf.TensorSpec([self.window], tf.float32))
        return {"audio": tf.ensure_shape(audio, [None, self.window])}

    def dataset(self, *args, **kwargs):
        raise ValueError("Fine-tuning a Whisper checkpoint through `fit` is not supported yet: kformer loads, "
                         "transcribes and decodes Whisper checkpoints (kformer issue 74).")

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

    def detokenize(self, token_ids):
        """Ids `(batch, length)` -> list of str: each row up to its first end token, without special tokens."""
        rows = np.asarray(keras.ops.convert_to_numpy(token_ids))
        texts = []
        for row in rows.reshape(len(rows), -1):
            ends = np.flatnonzero(row == self.end_token_id)
            row = row[:ends[0]] if len(ends) else row
            row = row[(row >= 0) & (row < len(self.tokens))]
            pieces = "".join(self.tokens[i] for i in row if not self._special[i])
            texts.append(bytes(BYTE_DECODER.get(c, ord("?")) for c in pieces).decode("utf-8", errors="replace"))
        return texts

    def get_config(self):
        config = super().get_config()
        for key in ("num_mel_bins", "frame_length_ms", "frame_step_ms", "max_seconds"):
            config.pop(key, None)
        return {**config, "tokens": self.tokens, "special_ids": self.special_ids,
                "start_token_id": self.start_token_id, "end_token_id": self.end_token_id,
                "languages": self.languages, "task_ids": self.task_ids, "no_timestamps_id": self.no_timestamps_id,
                "decoding_defaults": self.decoding_defaults, "max_new_tokens": self.max_new_tokens,
                "max_target_positions": self.max_target_positions, "default_language": self.default_language,
                "chunk_seconds": self.chunk_seconds}
