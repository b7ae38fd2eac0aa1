"""Issue 71: one `GenerationConfig`, sampler objects, the controls checkpoints need, streaming."""

import dataclasses
import warnings

import keras
import numpy as np
import pytest
from keras import ops

from kformer import models
from kformer.generation import (BeamSampler, GenerationConfig, GreedySampler, Sampler, TopKSampler, TopPSampler,
                                decode_function)
from tests.models.cases import small_model

SOURCE = np.random.default_rng(3).integers(3, 40, (3, 7)).astype("int32")
SOURCE[1, 4:] = 0
PROMPTS = np.array([[5, 6, 7, 0], [8, 0, 0, 0], [9, 10, 11, 12]], "int32")
START, END = 1, 2
TRANSLATE = GenerationConfig(max_length=8, start_token_id=START, stop_token_ids=END)


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(1)
    return small_model("transformer_tiny")


@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(2)
    return small_model("gpt_tiny")


def _cut(rows, stops):
    """Each row through its first id in `stops`, then 0 (what stop ids do to an unstopped decoding)."""
    out = np.zeros_like(rows)
    for i, row in enumerate(rows):
        hits = [j for j, token in enumerate(row) if token in stops]
        end = hits[0] + 1 if hits else len(row)
        out[i, :end] = row[:end]
    return out


@pytest.mark.parametrize("config", [TRANSLATE, TRANSLATE.replace(sampler=TopKSampler(k=5), seed=4)],
                         ids=["greedy", "top_k"])
def test_streamed_tokens_join_to_the_result(translator, lm, config):
    """Each step's tokens reach the streamer as they are decided; joined, they are the returned tokens."""
    steps = []
    out = models.generate(translator, SOURCE, config, streamer=steps.append)
    assert all(step.shape == (len(SOURCE),) and step.dtype == np.int32 for step in steps)
    joined = np.stack(steps, axis=1)
    np.testing.assert_array_equal(out[:, :joined.shape[1]], joined)
    assert not out[:, joined.shape[1]:].any()  # it stopped once every row had ended
    np.testing.assert_array_equal(out, models.generate(translator, SOURCE, config))  # as without a streamer
    again = []  # the task's own `generate` streams too
    np.testing.assert_array_equal(translator.generate(SOURCE, config, streamer=again.append), out)
    np.testing.assert_array_equal(np.stack(again, axis=1), joined)
    steps = []
    causal = config.replace(start_token_id=None, stop_token_ids=(), max_length=9)
    out = models.generate(lm, PROMPTS, causal, streamer=steps.append)
    start = int((PROMPTS != 0).sum(1).min())  # the shortest prompt's end: the first step
    np.testing.assert_array_equal(out[:, start:], np.stack(steps, axis=1))
    np.testing.assert_array_equal(out, models.generate(lm, PROMPTS, causal))


def test_beam_search_does_not_stream(translator):
    with pytest.raises(ValueError, match="`streamer` needs one token a row a step: not with beam search"):
        models.generate(translator, SOURCE, TRANSLATE, sampler=BeamSampler(num_beams=2), streamer=print)


def test_several_stop_ids(translator, lm):
    """A row ends at the first of any stop id: the unstopped decoding cut there (beam search: each finished
    hypothesis ends at one)."""
    free = models.generate(translator, SOURCE, TRANSLATE.replace(stop_token_ids=39))
    stops = sorted({int(row[1]) for row in free} | {int(free[0, 3])})  # ids the rows generate early
    stops = [39] + [s for s in stops if s not in (0, 39)][:2]  # 39 ended the free run too
    np.testing.assert_array_equal(models.generate(translator, SOURCE, TRANSLATE.replace(stop_token_ids=stops)),
                                  _cut(free, stops))
    causal = GenerationConfig(max_length=10)
    free = models.generate(lm, PROMPTS, causal)
    stops = sorted({int(free[0, 4]), int(free[2, 5])})
    stopped = models.generate(lm, PROMPTS, causal, stop_token_ids=stops)
    for row, prompt in zip(range(len(PROMPTS)), PROMPTS):
        n = int((prompt != 0).sum())
        np.testing.assert_array_equal(stopped[row, n:], _cut(free[row:row + 1, n:], stops)[0])
    beams = models.generate(translator, SOURCE, TRANSLATE.replace(stop_token_ids=stops, sampler=BeamSampler(3)))
    for row in beams:
        ends = [j for j, token in enumerate(row) if token in stops]
        assert not ends or not row[ends[0] + 1:].any()


def test_suppressed_bad_and_begin_suppressed_ids(translator):
    """Suppressed and bad ids never come; begin-suppressed ones not first. Greedy then picks the best
    remaining logit, as the naive reference over the task's logits does."""
    free = models.generate(translator, SOURCE, TRANSLATE)
    common = [int(t) for t in np.unique(free[free > 2])][:2]
    first = sorted({int(t) for t in free[:, 0]})
    out = models.generate(translator, SOURCE, TRANSLATE, suppress_token_ids=common[:1], bad_token_ids=common[1:],
                          begin_suppress_token_ids=first)
    assert not np.isin(out, common).any()
    assert not np.isin(out[:, 0], first).any()
    tokens = np.zeros((len(SOURCE), 9), "int32")
    tokens[:, 0] = START
    logits = np.array(ops.convert_to_numpy(translator.predict_on_batch(
        {"encoder_token_ids": SOURCE, "decoder_token_ids": tokens})))[:, 0]
    logits[:, [0, *common]] = -np.inf
    logits[:, first] = -np.inf
    np.testing.assert_array_equal(out[:, 0], logits.argmax(-1))


def test_forced_prompt_ids_come_first(translator):
    out = models.generate(translator, SOURCE, TRANSLATE, forced_prompt_ids=(7, 8))
    np.testing.assert_array_equal(out[:, :2], [[7, 8]] * len(SOURCE))
    beams = models.generate(translator, SOURCE, TRANSLATE, forced_prompt_ids=(7, 8), sampler=BeamSampler(3))
    np.testing.assert_array_equal(beams[:, :2], [[7, 8]] * len(SOURCE))


def test_repetition_penalty_changes_only_repeated_tokens(lm):
    """CTRL's rule: a greedy step under the penalty picks what the naive rule over the model's logits picks."""
    config = GenerationConfig(max_length=8, repetition_penalty=1.8)
    out = models.generate(lm, PROMPTS, config)
    for row in range(len(PROMPTS)):
        n = int((PROMPTS[row] != 0).sum())
        logits = np.array(ops.convert_to_numpy(lm.predict_on_batch(out[row:row + 1, :n])))[0, -1]
        logits[0] = -np.inf
        seen = np.unique(out[row, :n])
        logits[seen] = np.where(logits[seen] > 0, logits[seen] / 1.8, logits[seen] * 1.8)
        assert out[row, n] == logits.argmax(), row


def test_num_return_sequences(translator):
    sampled = models.generate(translator, SOURCE, TRANSLATE, sampler=TopPSampler(p=0.95), seed=5,
                              num_return_sequences=2)
    assert sampled.shape == (2 * len(SOURCE), 8)  # row i's samples at 2i, 2i + 1
    np.testing.assert_array_equal(sampled, models.generate(translator, np.repeat(SOURCE, 2, axis=0), TRANSLATE,
                                                           sampler=TopPSampler(p=0.95), seed=5))
    best = models.generate(translator, SOURCE, TRANSLATE, sampler=BeamSampler(3))
    three = models.generate(translator, SOURCE, TRANSLATE, sampler=BeamSampler(3), num_return_sequences=3)
    np.testing.assert_array_equal(three[::3], best)  # the best first


def test_strip_prompt(lm):
    full = models.generate(lm, PROMPTS, max_length=9)
    stripped = models.generate(lm, PROMPTS, max_length=9, strip_prompt=True)
    for row, prompt in enumerate(PROMPTS):
        n = int((prompt != 0).sum())
        np.testing.assert_array_equal(stripped[row, :9 - n], full[row, n:])
        assert not stripped[row, 9 - n:].any()
    lm.generation_config = GenerationConfig(max_length=9)
    try:  # `max_length=None`: the task's config's length (0.2's "default"), as for a translator below
        np.testing.assert_array_equal(lm.generate(PROMPTS, max_length=None), full)
    finally:
        lm.generation_config = None


@dataclasses.dataclass(frozen=True)
class SecondBest(Sampler):
    """A sampler of one's own: the second most likely token."""

    def next_tokens(self, logits, uniform):
        return ops.cast(ops.top_k(logits, 2)[1][:, 1], "int32")


def test_a_sampler_of_ones_own(translator):
    out = models.generate(translator, SOURCE, TRANSLATE, sampler=SecondBest())
    tokens = np.zeros((len(SOURCE), 9), "int32")
    tokens[:, 0] = START
    logits = np.array(ops.convert_to_numpy(translator.predict_on_batch(
        {"encoder_token_ids": SOURCE, "decoder_token_ids": tokens})))[:, 0]
    logits[:, 0] = -np.inf
    np.testing.assert_array_equal(out[:, 0], np.argsort(-logits, axis=-1)[:, 1])
    graph = decode_function(translator, TRANSLATE.replace(sampler=SecondBest()))  # the same object in a graph
    np.testing.assert_array_equal(np.asarray(ops.convert_to_numpy(graph(SOURCE))), out)


@pytest.mark.once("dataclass checks and keyword mapping in Python, before any Keras op")
def test_config_checks_and_the_0_2_keywords():
    for kwargs, match in [({"repetition_penalty": 0}, "repetition_penalty=0"),
                          ({"stop_token_ids": "2"}, "stop_token_ids='2'"),
                          ({"stop_token_ids": [2, -1]}, r"stop_token_ids=\[2, -1\]"),
                          ({"num_return_sequences": 2}, "Greedy decoding gives one sequence a row"),
                          ({"sampler": BeamSampler(2), "num_return_sequences": 3}, "num_return_sequences=3"),
                          ({"sampler": "sampling"}, "sampler='sampling'"),
                          ({"max_new_tokens": 0}, "max_new_tokens=0"),
                          ({"end_at_max_length": True}, "needs one"),
                          ({"sampler": BeamSampler(2), "use_cache": False}, "Beam search always uses the cache")]:
        with pytest.raises(ValueError, match=match):
            GenerationConfig(**kwargs)
    with pytest.raises(ValueError, match="`p` must be a finite number in"):
        TopPSampler(p=1.5)
    with pytest.raises(ValueError, match=r"Unknown generation setting\(s\) \['beams'\]"):
        GenerationConfig().replace(beams=2)
    with pytest.raises(ValueError, match="Give `max_length` or `max_new_tokens`, not both"):
        GenerationConfig(max_length=4, max_new_tokens=2).resolve("causal", PROMPTS, vocabulary_size=40)
    assert GenerationConfig(max_new_tokens=3).resolve("causal", PROMPTS, vocabulary_size=40).length == 7
    # a call's length limit replaces the config's other one (a task's default `max_length`)
    assert GenerationConfig(max_length=16).replace(max_new_tokens=3).resolve(
        "causal", PROMPTS, vocabulary_size=40).length == 7
    assert GenerationConfig(max_new_tokens=3).replace(max_length=5).max_new_tokens is None
    with pytest.raises(ValueError, match="not both"):  # both given at once is still refused
        GenerationConfig().replace(max_length=4, max_new_tokens=2).resolve("causal", PROMPTS, vocabulary_size=40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = GenerationConfig().replace(strategy="beam", num_beams=3, length_penalty=1.0)
        assert config.sampler == BeamSampler(num_beams=3, length_penalty=1.0)
        assert GenerationConfig().replace(strategy="top_p", p=0.5).sampler == TopPSampler(p=0.5)
        assert GenerationConfig(sampler=TopKSampler(k=3)).replace(temperature=0.5).sampler == \
            TopKSampler(k=3, temperature=0.5)
        assert GenerationConfig().replace(end_token_id=4).stop_token_ids == (4,)
    assert sum(issubclass(w.category, DeprecationWarning) for w in caught) == 3
    config = GenerationConfig(sampler=TopKSampler(k=7), max_length=9, stop_token_ids=(2, 3), suppress_token_ids=[5])
    assert GenerationConfig.from_dict(config.to_dict()) == config
    assert GenerationConfig.from_dict({"strategy": "beam", "num_beams": 2, "end_token_id": 3}) == \
        GenerationConfig(sampler=BeamSampler(num_beams=2), stop_token_ids=3)  # a 0.2 file's words


def test_the_tasks_config_is_saved_with_it(translator, tmp_path):
    config = TRANSLATE.replace(sampler=BeamSampler(num_beams=2, length_penalty=1.0), no_repeat_ngram_size=2)
    translator.generation_config = config
    try:
        translator.save(tmp_path / "translator.keras")
        loaded = models.load(tmp_path / "translator.keras")
        assert loaded.generation_config == config
        np.testing.assert_array_equal(loaded.generate(SOURCE), models.generate(translator, SOURCE, config))
        np.testing.assert_array_equal(loaded.generate(SOURCE, max_length=None), loaded.generate(SOURCE))
    finally:
        translator.generation_config = None
    assert translator.generation_config == GenerationConfig()  # no preprocessor: the plain default
    with pytest.raises(ValueError, match="`generation_config` must be a"):
        translator.generation_config = "beam"
