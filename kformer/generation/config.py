"""`GenerationConfig`: every decoding setting in one frozen object, checked once on creation.

A task carries one (`task.generation_config`: its preprocessor's token ids,
a checkpoint's `generation_config.json`); `generate`, `decode_function` and
the SavedModel export take one, and keyword overrides on top
(`task.generate(ids, max_length=20)`). `resolve` checks it against a model
and its inputs and gives the loop its `Plan`.
"""

import dataclasses
import warnings

import numpy as np

from kformer.generation import samplers
from kformer.generation.options import (MAX_LENGTH_CAP, check_length_limit, check_max_word_pieces, check_prompts,
                                        is_int)

FAMILIES = ("translator", "causal")
# The 0.2 keywords that set the sampler; they work, with a DeprecationWarning, until 0.3
LEGACY_SAMPLER_KEYS = ("strategy", "num_beams", "length_penalty", "k", "p", "temperature")


def _ids(name, value):
    """A tuple of token ids from an int, a sequence of ints, or None (naming a bad value)."""
    if value is None:
        return ()
    values = (value,) if is_int(value) else value
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or \
            not all(is_int(v) and v >= 0 for v in values):
        raise ValueError(f"`{name}` must be an int id >= 0, a sequence of them, or None. Received: {name}={value!r}")
    return tuple(int(v) for v in values)


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """How a `Translator` or `CausalLM` generates: the sampler, lengths, stop ids, bans and guards.

    Every field is checked when the config is made (a ValueError names the
    field and value); the checks that need the model (vocabulary, learned
    positions) run when it decodes. Make a changed copy with
    `config.replace(...)`; a task's default is `task.generation_config`.

    Args:
        sampler: a `kformer.generation.Sampler` (`GreedySampler()`,
            `BeamSampler(num_beams=4)`, `TopKSampler(k=50)`,
            `TopPSampler(p=0.9)`, your own) or its name. Defaults to greedy.
        max_length: int or None. A translator's most generated tokens; a
            language model's total length, prompt included.
        max_new_tokens: int or None. A language model: at most this many
            tokens after the (padded) prompts, `max_length` = prompt width +
            `max_new_tokens`. A translator: the same as `max_length`. Give
            one of the two.
        start_token_id: int or None. A translator's first decoder token
            (`[START]`; Marian's padding id).
        stop_token_ids: int, ints or None. A row ends after generating any
            of them (a translator needs one; the first is its end token).
        forced_prompt_ids: ints. A translator: written after
            `start_token_id` before anything is generated (Whisper's
            language and task tokens); they count toward `max_length`.
        suppress_token_ids: ints. Never generated (transformers'
            `suppress_tokens`).
        begin_suppress_token_ids: ints. Not generated as a row's first
            token (transformers' `begin_suppress_tokens`).
        bad_token_ids: ints. Never generated (transformers' single-token
            `bad_words_ids`). The model's padding id is never generated either.
        no_repeat_ngram_size: int >= 0. `n > 0`: never an n-gram the row
            (prompt included) already holds. `0`: off.
        repetition_penalty: float > 0. Logits of tokens already in the row
            are divided by it when positive, multiplied when negative
            (CTRL; transformers' `repetition_penalty`). `1.0`: off.
        num_return_sequences: int >= 1. Sequences a row: the best of a beam
            search, or that many samples. Rows come out in the input's
            order, each repeated. Greedy decoding returns one.
        end_at_max_length: bool. A row still open at the last position gets
            the first stop id there (transformers' `forced_eos_token_id`).
        strip_prompt: bool. A language model returns only the generated
            tokens, moved to the start of each row.
        use_cache: bool. `False` re-runs the decoder over the whole buffer
            each step (the slow reference; not with beam search).
        seed: int or None. Sampling's uniforms are drawn with numpy from it:
            the same seed gives the same tokens on every backend.
        max_length_ratio, max_length_offset: a translator's length limit:
            row `i` generates at most `floor(ratio * n_i) + offset` tokens,
            `n_i` its source length (fairseq's `max_len_a` / `max_len_b`).
        max_word_pieces: int or None. No generated word has more WordPiece
            pieces (needs the model's WordPiece tokenizer). `None` / `0`: off.
        slot_token_id: int or None. A translator generates this id exactly as
            often as its source holds it (copied number slots).

    Example:

    >>> from kformer.generation import BeamSampler
    >>> config = GenerationConfig(sampler=BeamSampler(num_beams=4), max_length=32, stop_token_ids=2)
    >>> config.stop_token_ids, config.replace(max_length=16).max_length
    ((2,), 16)
    >>> GenerationConfig(repetition_penalty=0)
    Traceback (most recent call last):
    ...
    ValueError: `repetition_penalty` must be a finite number > 0. Received: repetition_penalty=0
    """

    sampler: samplers.Sampler = samplers.GreedySampler()
    max_length: int = None
    max_new_tokens: int = None
    start_token_id: int = None
    stop_token_ids: tuple = ()
    forced_prompt_ids: tuple = ()
    suppress_token_ids: tuple = ()
    begin_suppress_token_ids: tuple = ()
    bad_token_ids: tuple = ()
    no_repeat_ngram_size: int = 0
    repetition_penalty: float = 1.0
    num_return_sequences: int = 1
    end_at_max_length: bool = False
    strip_prompt: bool = False
    use_cache: bool = True
    seed: int = None
    max_length_ratio: float = None
    max_length_offset: int = 10
    max_word_pieces: int = None
    slot_token_id: int = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("sampler", samplers.get(self.sampler))
        for name in ("stop_token_ids", "forced_prompt_ids", "suppress_token_ids", "begin_suppress_token_ids",
                     "bad_token_ids"):
            put(name, _ids(name, getattr(self, name)))
        for name in ("max_length", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or value < 1):
                raise ValueError(f"`{name}` must be an int >= 1. Received: {name}={value!r}")
            if value is not None and value > MAX_LENGTH_CAP:
                raise ValueError(f"`{name}` must be <= {MAX_LENGTH_CAP}. Received: {name}={value!r}")
        for name in ("start_token_id", "slot_token_id"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or value < 0):
                raise ValueError(f"`{name}` must be None or an int id >= 0. Received: {name}={value!r}")
        for name, low in (("no_repeat_ngram_size", 0), ("num_return_sequences", 1)):
            value = getattr(self, name)
            if not is_int(value) or value < low:
                raise ValueError(f"`{name}` must be an int >= {low}. Received: {name}={value!r}")
            put(name, int(value))
        penalty = self.repetition_penalty
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float, np.floating)) \
                or not np.isfinite(penalty) or penalty <= 0:
            raise ValueError(f"`repetition_penalty` must be a finite number > 0. Received: repetition_penalty={penalty!r}")
        put("repetition_penalty", float(penalty))
        for name in ("end_at_max_length", "strip_prompt", "use_cache"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"`{name}` must be True or False. Received: {name}={getattr(self, name)!r}")
            put(name, bool(getattr(self, name)))
        if self.seed is not None and (not is_int(self.seed) or not 0 <= self.seed < 2**63):
            raise ValueError(f"`seed` must be None or an int in [0, 2**63). Received: seed={self.seed!r}")
        if self.max_length_ratio is not None:
            put("max_length_ratio", check_length_limit(self.max_length_ratio, self.max_length_offset)[0])
        elif not is_int(self.max_length_offset) or self.max_length_offset < 0:
            raise ValueError("`max_length_offset` must be an int >= 0. Received: "
                             f"max_length_offset={self.max_length_offset!r}")
        put("max_word_pieces", check_max_word_pieces(self.max_word_pieces))
        if self.end_at_max_length and not self.stop_token_ids:
            raise ValueError("`end_at_max_length=True` writes the first stop id last, so it needs one. Received: "
                             "stop_token_ids=()")
        beam = isinstance(self.sampler, samplers.BeamSampler) and self.sampler.num_beams > 1
        if beam and not self.use_cache:
            raise ValueError("Beam search always uses the cache. Received: use_cache=False")
        if self.num_return_sequences > 1:
            if isinstance(self.sampler, samplers.GreedySampler) or (
                    isinstance(self.sampler, samplers.BeamSampler) and not beam):
                raise ValueError("Greedy decoding gives one sequence a row: `num_return_sequences` > 1 needs a "
                                 f"beam search or a sampler. Received: num_return_sequences={self.num_return_sequences}"
                                 f", sampler={self.sampler!r}")
            if beam and self.num_return_sequences > self.sampler.num_beams:
                raise ValueError(f"`num_return_sequences` must be <= `num_beams` ({self.sampler.num_beams}). "
                                 f"Received: num_return_sequences={self.num_return_sequences}")

    def replace(self, **overrides):
        """A copy with `overrides` (checked). A `max_new_tokens` replaces the config's `max_length` and the
        other way round. `end_token_id=` sets `stop_token_ids`; the 0.2 sampler keywords
        (`strategy`, `num_beams`, `length_penalty`, `k`, `p`, `temperature`) still set the sampler, with a
        DeprecationWarning, until 0.3.

        Example:

        >>> GenerationConfig().replace(end_token_id=3).stop_token_ids
        (3,)
        >>> GenerationConfig(max_length=16).replace(max_new_tokens=6).max_length is None
        True
        """
        overrides = dict(overrides)
        for given, other in (("max_new_tokens", "max_length"), ("max_length", "max_new_tokens")):
            if overrides.get(given) is not None and other not in overrides:
                overrides[other] = None  # one length limit replaces the other (transformers' `generate` too)
        if "end_token_id" in overrides:
            overrides["stop_token_ids"] = overrides.pop("end_token_id")
        legacy = {key: overrides.pop(key) for key in LEGACY_SAMPLER_KEYS if key in overrides}
        if legacy:
            overrides["sampler"] = _legacy_sampler(overrides.get("sampler", self.sampler), legacy)
        unknown = sorted(set(overrides) - {field.name for field in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"Unknown generation setting(s) {unknown}: a `GenerationConfig` field, `end_token_id`, "
                             f"or a 0.2 sampler keyword {LEGACY_SAMPLER_KEYS}. Received: {unknown[0]}="
                             f"{overrides[unknown[0]]!r}")
        return dataclasses.replace(self, **overrides)

    def to_dict(self):
        """Every field, JSON-ready (the sampler as `{"name", ...settings}`); `from_dict` reads it back.

        Example:

        >>> GenerationConfig(max_length=8, sampler="top_k").to_dict()["sampler"]
        {'name': 'top_k', 'k': 50, 'temperature': 1.0}
        """
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "sampler":
                if type(value) not in samplers.SAMPLERS.values():
                    raise ValueError(f"A {type(value).__name__} sampler cannot be saved; save the model with a "
                                     "built-in sampler and set yours when decoding.")
                value = {"name": value.name, **dataclasses.asdict(value)}
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data):
        """The config `to_dict` wrote (or a dict of fields in 0.2's words: `strategy`, `num_beams`, ...,
        `end_token_id`, read without a warning: saved files keep loading).

        Example:

        >>> GenerationConfig.from_dict({"sampler": {"name": "beam", "num_beams": 2}}).sampler
        BeamSampler(num_beams=2, length_penalty=0.6)
        """
        return cls(**fields_of(data))

    def resolve(self, family, token_ids, *, vocabulary_size, source_vocabulary_size=None, position_limit=None,
                padding_id=0):
        """Check this config against a model and its inputs -> the loop's `Plan` (a ValueError names a bad value).

        Args:
            family: `"translator"` or `"causal"` (the model's `decoding_family`).
            token_ids: numpy int `(batch, length)`: the sources or the
                right-padded prompts (a graph passes `np.ones((1, 1))`).
            vocabulary_size: int. The model's output vocabulary.
            source_vocabulary_size: int or None. A translator's source vocabulary.
            position_limit: int or None. The model's learned positions.
            padding_id: int or None. The model's padding id (never generated); None: none (a speech
                model's end token fills its transcripts).

        Example:

        >>> plan = GenerationConfig(max_length=8).resolve("causal", np.array([[5, 6]]), vocabulary_size=50)
        >>> plan.length, plan.stop_token_ids
        (8, ())
        """
        if family not in FAMILIES:
            raise ValueError(f"`family` must be one of {FAMILIES}. Received: family={family!r}")
        translator = family == "translator"
        ids = np.asarray(token_ids)
        name = "encoder_token_ids" if translator else "token_ids"
        if ids.ndim != 2 or 0 in ids.shape or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"`{name}` must be a non-empty int array (batch, length). Received: "
                             f"shape={ids.shape}, dtype={ids.dtype}")
        source_vocabulary = (source_vocabulary_size or vocabulary_size) if translator else vocabulary_size
        if ids.min() < 0 or ids.max() >= source_vocabulary:
            raise ValueError(f"`{name}` must be in [0, {source_vocabulary}) (0 = padding). Received: values from "
                             f"{ids.min()} to {ids.max()}")
        length = self._length(translator, ids.shape[1])
        if position_limit is not None and length > position_limit:
            raise ValueError(f"`max_length` exceeds the model's learned positions (sequence_length={position_limit}). "
                             f"Received: max_length={length}")
        low = 1 if padding_id == 0 else 0
        for key in ("stop_token_ids", "forced_prompt_ids", "suppress_token_ids", "begin_suppress_token_ids",
                    "bad_token_ids"):
            for value in getattr(self, key):
                if not low <= value < vocabulary_size:
                    raise ValueError(f"`{key}` must hold ids in [{low}, {vocabulary_size}). Received: {key}="
                                     f"{getattr(self, key)!r}")
        if padding_id in self.stop_token_ids:
            raise ValueError(f"`stop_token_ids` holds the model's padding id {padding_id}, which is never generated: "
                             f"decoding would never end there. Received: stop_token_ids={self.stop_token_ids!r}")
        if translator:
            self._check_translator(vocabulary_size, source_vocabulary_size, low, length)
            start = (self.start_token_id, *self.forced_prompt_ids)
        else:
            for key in ("start_token_id", "max_length_ratio", "slot_token_id"):
                if getattr(self, key) is not None:
                    raise ValueError(f"`{key}` is for translators; a CausalLM continues its prompt (put any start "
                                     f"token in the prompt). Received: {key}={getattr(self, key)!r}")
            if self.forced_prompt_ids:
                raise ValueError("`forced_prompt_ids` is for translators; put a CausalLM's forced tokens in its "
                                 f"prompt. Received: forced_prompt_ids={self.forced_prompt_ids!r}")
            check_prompts(ids, length)
            start = ()
        banned = tuple(sorted({*([] if padding_id is None else [padding_id]), *self.bad_token_ids,
                               *self.suppress_token_ids}))
        return Plan(sampler=self.sampler.for_vocabulary(vocabulary_size), length=length,
                    start_ids=start, stop_token_ids=self.stop_token_ids, banned_ids=banned,
                    begin_suppress_token_ids=self.begin_suppress_token_ids,
                    no_repeat_ngram_size=self.no_repeat_ngram_size, repetition_penalty=self.repetition_penalty,
                    num_return_sequences=self.num_return_sequences, end_at_max_length=self.end_at_max_length,
                    strip_prompt=self.strip_prompt, use_cache=self.use_cache,
                    max_length_ratio=self.max_length_ratio,
                    max_length_offset=None if self.max_length_ratio is None else self.max_length_offset,
                    max_word_pieces=self.max_word_pieces, slot_token_id=self.slot_token_id)

    def _length(self, translator, prompt_width):
        """The buffer the loop writes: a translator's generated tokens, a language model's whole rows."""
        if self.max_length is not None and self.max_new_tokens is not None:
            raise ValueError("Give `max_length` or `max_new_tokens`, not both. Received: "
                             f"max_length={self.max_length}, max_new_tokens={self.max_new_tokens}")
        if self.max_length is None and self.max_new_tokens is None:
            raise ValueError("`max_length` (or `max_new_tokens`) is needed: the task's preprocessor gives it a "
                             "default, a bare model does not. Received: max_length=None")
        if self.max_length is not None:
            return self.max_length
        length = self.max_new_tokens if translator else prompt_width + self.max_new_tokens
        if length > MAX_LENGTH_CAP:
            raise ValueError(f"`max_new_tokens` makes rows longer than {MAX_LENGTH_CAP}. Received: "
                             f"max_new_tokens={self.max_new_tokens} after prompts of width {prompt_width}")
        return length

    def _check_translator(self, vocabulary_size, source_vocabulary_size, low, length):
        if self.start_token_id is None or not low <= self.start_token_id < vocabulary_size:
            raise ValueError(f"`start_token_id` must be an int in [{low}, {vocabulary_size}) for a translator. "
                             f"Received: start_token_id={self.start_token_id!r}")
        if not self.stop_token_ids:
            raise ValueError("A translator needs `stop_token_ids` (its end token first). Received: stop_token_ids=()")
        if len(self.forced_prompt_ids) >= length:
            raise ValueError(f"`forced_prompt_ids` leave nothing to generate within max_length={length}. Received: "
                             f"forced_prompt_ids={self.forced_prompt_ids!r}")
        if self.slot_token_id is not None:
            both = min(vocabulary_size, source_vocabulary_size or vocabulary_size)  # an id of both vocabularies
            if not 0 < self.slot_token_id < both:
                raise ValueError(f"`slot_token_id` must be None or an int in [1, {both}). "
                                 f"Received: slot_token_id={self.slot_token_id!r}")


def fields_of(data):
    """`GenerationConfig` keyword arguments from a dict of fields (`to_dict`'s, or 0.2's words).

    Example:

    >>> fields_of({"strategy": "beam", "num_beams": 3, "end_token_id": 2})
    {'stop_token_ids': 2, 'sampler': BeamSampler(num_beams=3, length_penalty=0.6)}
    """
    data = dict(data)
    if "end_token_id" in data:
        data["stop_token_ids"] = data.pop("end_token_id")
    if isinstance(data.get("sampler"), dict):
        settings = dict(data["sampler"])
        data["sampler"] = samplers.get(settings.pop("name")).__class__(**settings)
    legacy = {key: data.pop(key) for key in LEGACY_SAMPLER_KEYS if key in data}
    if legacy:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            data["sampler"] = _legacy_sampler(data.get("sampler", samplers.GreedySampler()), legacy)
    return data


def _legacy_sampler(sampler, legacy):
    """The sampler that 0.2's `strategy` / `num_beams` / `length_penalty` / `k` / `p` / `temperature` name."""
    sampler = samplers.get(sampler)
    keys = sorted(legacy)
    name = legacy.pop("strategy", sampler.name)
    warnings.warn(f"generate's {keys} keywords (0.2) are deprecated (removed in 0.3): pass "
                  "`sampler=kformer.generation.BeamSampler(num_beams=4)`, "
                  "`TopKSampler(k=...)`, `TopPSampler(p=...)` or `GreedySampler()` instead.",
                  DeprecationWarning, stacklevel=4)
    if name not in samplers.SAMPLERS:
        raise ValueError(f"`strategy` must be one of {tuple(samplers.SAMPLERS)}. Received: strategy={name!r}")
    for owner in (samplers.BeamSampler, samplers.TopKSampler, samplers.TopPSampler):  # 0.2 checked every value
        owner(**{key: value for key, value in legacy.items() if key in {f.name for f in dataclasses.fields(owner)}})
    cls = samplers.SAMPLERS[name]
    fields = {field.name for field in dataclasses.fields(cls)}
    current = dataclasses.asdict(sampler) if type(sampler) is cls else {}
    return cls(**{**current, **{key: value for key, value in legacy.items() if key in fields}})


@dataclasses.dataclass(frozen=True)
class Plan:
    """A `GenerationConfig` checked against one model: what the decoding loop reads (hashable: the compiled
    loop's key). `length`: the buffer's positions after the start ids (a translator's generated tokens, a
    language model's whole rows); `start_ids`: a translator's start token and forced ids; `banned_ids`: the
    padding id, bad and suppressed ids."""

    sampler: samplers.Sampler
    length: int
    start_ids: tuple
    stop_token_ids: tuple
    banned_ids: tuple
    begin_suppress_token_ids: tuple
    no_repeat_ngram_size: int
    repetition_penalty: float
    num_return_sequences: int
    end_at_max_length: bool
    strip_prompt: bool
    use_cache: bool
    max_length_ratio: float
    max_length_offset: int
    max_word_pieces: int
    slot_token_id: int

    @property
    def beams(self):
        """Beam width (`0`: no beam search; one beam is greedy)."""
        beam = isinstance(self.sampler, samplers.BeamSampler) and self.sampler.num_beams > 1
        return self.sampler.num_beams if beam else 0
