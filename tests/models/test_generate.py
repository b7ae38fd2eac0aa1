import importlib

import keras
import numpy as np
import pytest

from kformer import models
from tests.helpers import to_numpy
from tests.models.cases import small_model

SOURCE = np.random.default_rng(1).integers(3, 40, (3, 7)).astype("int32")
SOURCE[1, 4:] = 0
START, END = 1, 2


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(0)  # the same weights whatever ran before in this worker
    return small_model("transformer_tiny")


GREEDY = dict(max_length=8, start_token_id=START, end_token_id=END)


@pytest.fixture(scope="module")
def greedy(translator):
    """Greedy decoding of SOURCE with GREEDY's settings, which several tests compare against: decoded
    once (`generate` keeps one compiled loop, so each test that switched settings compiled it again)."""
    return models.generate(translator, SOURCE, **GREEDY)


def banned(row, t, n):
    """Tokens that would repeat an n-gram of row[:t] at position t (plain Python)."""
    tail = tuple(row[t - n + 1:t]) if n > 1 else ()
    return {row[j + n - 1] for j in range(t - n + 1) if tuple(row[j:j + n - 1]) == tail}


def naive_greedy(model, source, max_length, no_repeat_ngram_size=0):
    """Re-runs the whole decoder on the prefix every step (no cache)."""
    tokens = np.zeros((len(source), max_length + 1), "int32")
    tokens[:, 0] = START
    done = np.zeros(len(source), bool)
    for t in range(max_length):  # the whole prefix every step (padded to one shape: causal, so
        # the zeros after position t do not change its logits)
        logits = np.array(to_numpy(model.predict_on_batch({"encoder_token_ids": source,
                                                           "decoder_token_ids": tokens})))[:, t]
        logits[:, 0] = -np.inf
        for b in range(len(source)) if no_repeat_ngram_size else ():
            logits[b, sorted(banned(list(tokens[b]), t + 1, no_repeat_ngram_size))] = -np.inf
        word = np.where(done, 0, logits.argmax(-1))
        tokens[:, t + 1] = word
        done |= word == END
        if done.all():
            break
    return tokens[:, 1:]


def test_cached_greedy_equals_naive_greedy(translator, greedy):
    np.testing.assert_array_equal(greedy, naive_greedy(translator, SOURCE, 8))


def test_cached_greedy_equals_compiled_recompute(translator, greedy):
    np.testing.assert_array_equal(greedy, models.generate(translator, SOURCE, use_cache=False, **GREEDY))


def test_a_batch_runs_at_its_bucket_and_each_row_decodes_as_alone(translator, monkeypatch):
    generate_module = importlib.import_module("kformer.generation.search")
    rows, real = [], generate_module._Generator.predict_on_batch
    monkeypatch.setattr(generate_module._Generator, "predict_on_batch",
                        lambda self, x: rows.append(len(x["token_ids"])) or real(self, x))
    kwargs = dict(max_length=8, start_token_id=START, end_token_id=END)
    together = models.generate(translator, SOURCE, **kwargs)
    alone = [models.generate(translator, SOURCE[i:i + 1], **kwargs)[0] for i in range(len(SOURCE))]
    np.testing.assert_array_equal(together, np.stack(alone))
    compiled = keras.backend.backend() != "torch"  # XLA: 3 rows run as 4, the last repeated
    assert rows == [4 if compiled else 3, 1, 1, 1]
    np.testing.assert_array_equal(models.generate(translator, SOURCE, pad_batch=False, **kwargs), together)
    assert rows[-1] == 3  # at its own size
    with pytest.raises(ValueError, match="`pad_batch` must be True or False. Received: pad_batch='no'"):
        models.generate(translator, SOURCE, pad_batch="no", **kwargs)


def ngram_repeats(row, n):
    grams = [tuple(row[i:i + n]) for i in range(len(row) - n + 1) if 0 not in row[i:i + n]]
    return len(grams) - len(set(grams))


def test_no_repeat_ngram_equals_naive_greedy_with_the_ban(translator, greedy, n=2):
    kwargs, plain = GREEDY, greedy
    cached = models.generate(translator, SOURCE, no_repeat_ngram_size=n, **kwargs)
    np.testing.assert_array_equal(cached, naive_greedy(translator, SOURCE, 8, no_repeat_ngram_size=n))
    with_start = np.concatenate([np.full((len(SOURCE), 1), START), cached], 1)
    assert all(ngram_repeats(list(row), n) == 0 for row in with_start)
    assert sum(ngram_repeats(list(row), n) for row in plain) > 0  # the ban had something to stop
    np.testing.assert_array_equal(cached, models.generate(translator, SOURCE, no_repeat_ngram_size=n,
                                                          use_cache=False, **kwargs))


@pytest.mark.parametrize("strategy", ["beam", "top_k"])
def test_no_repeat_ngram_holds_for_beam_and_sampling(translator, strategy):
    out = models.generate(translator, SOURCE, max_length=10, start_token_id=START, end_token_id=END,
                          strategy=strategy, seed=0, no_repeat_ngram_size=1)
    assert all(ngram_repeats([START] + list(row), 1) == 0 for row in out)


def test_no_repeat_ngram_counts_the_prompt_of_a_language_model():
    model = small_model("gpt_tiny")
    prompts = np.array([[5, 6, 5, 0], [7, 8, 9, 7]], "int32")
    out = models.generate(model, prompts, max_length=12, no_repeat_ngram_size=2)
    np.testing.assert_array_equal(out[:, :4][prompts > 0], prompts[prompts > 0])
    assert out[0, 3] != 6 and out[1, 4] != 8  # the bigrams (5, 6) and (7, 8) are in the prompts
    for row, prompt in zip(out, prompts):
        length = int((prompt > 0).sum())
        grams = [tuple(row[i:i + 2]) for i in range(len(row) - 1) if 0 not in row[i:i + 2]]
        generated = grams[length - 1:]  # bigrams that end on a generated token
        assert not set(generated) & set(grams[:length - 1]) and len(set(generated)) == len(generated)


def test_generation_stops_at_the_end_token(translator, greedy):
    end = int(greedy[0, 0])  # row 0's first token: row 0 must stop right there
    out = models.generate(translator, SOURCE, max_length=8, start_token_id=START, end_token_id=end)
    assert out[0, 0] == end and np.all(out[0, 1:] == 0)
    for row in out:  # every row: nothing but padding after its first end token
        ends = np.flatnonzero(row == end)
        if len(ends):
            assert np.all(row[ends[0] + 1 :] == 0)


def test_one_beam_and_top_k_one_equal_greedy(translator, greedy):
    kwargs = GREEDY
    np.testing.assert_array_equal(models.generate(translator, SOURCE, strategy="beam", num_beams=1,
                                                  **kwargs), greedy)
    np.testing.assert_array_equal(models.generate(translator, SOURCE, strategy="top_k", k=1, seed=3,
                                                  **kwargs), greedy)


def test_beam_search_scores_at_least_greedy(translator, greedy):
    kwargs = GREEDY
    beam = models.generate(translator, SOURCE, strategy="beam", num_beams=4, length_penalty=0.0, **kwargs)

    def log_prob(tokens):
        prefix = np.concatenate([np.full((len(tokens), 1), START), tokens[:, :-1]], 1).astype("int32")
        logits = np.array(to_numpy(translator({"encoder_token_ids": SOURCE, "decoder_token_ids": prefix})))
        logits[..., 0] = -np.inf
        logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - logits.max(-1, keepdims=True)
        picked = np.take_along_axis(logp, tokens[..., None], -1)[..., 0]
        return np.where(tokens > 0, picked, 0).sum(-1)

    assert np.all(log_prob(beam) >= log_prob(greedy) - 1e-4)


def test_sampling_is_seeded_and_respects_top_k(translator):
    kwargs = dict(max_length=8, start_token_id=START, end_token_id=END, strategy="top_p", p=0.9,
                  temperature=1.5)
    a = models.generate(translator, SOURCE, seed=7, **kwargs)
    np.testing.assert_array_equal(a, models.generate(translator, SOURCE, seed=7, **kwargs))
    assert a.shape == (3, 8) and a.min() >= 0 and a.max() < 40


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_max_length_ratio_stops_each_row_by_its_source_length(translator, greedy, strategy):
    kwargs = dict(GREEDY, strategy=strategy, num_beams=2)
    # greedy ignores num_beams: its free run is the `greedy` fixture's
    free = greedy if strategy == "greedy" else models.generate(translator, SOURCE, **kwargs)
    capped = models.generate(translator, SOURCE, max_length_ratio=0.5, max_length_offset=1, **kwargs)
    limits = np.count_nonzero(SOURCE, axis=1) // 2 + 1  # sources of 7, 4, 7 tokens: 4, 3, 4
    assert limits.tolist() == [4, 3, 4] and np.count_nonzero(free, axis=1).max() > 4  # the limit binds
    for row, limit in zip(capped, limits):
        assert np.all(row[limit:] == 0)
        assert np.all(row[:limit] > 0) or END in row[:limit]
    if strategy == "greedy":  # greedy is a prefix of the free run
        for row, free_row, limit in zip(capped, free, limits):
            np.testing.assert_array_equal(row[:limit], free_row[:limit])
    np.testing.assert_array_equal(models.generate(translator, SOURCE, max_length_ratio=10.0, **kwargs), free)


@pytest.mark.parametrize("kwargs, match", [
    ({"max_length_ratio": 0}, "max_length_ratio=0"),
    ({"max_length_ratio": float("nan")}, "max_length_ratio=nan"),
    ({"max_length_ratio": True}, "max_length_ratio=True"),
    ({"max_length_ratio": 1.5, "max_length_offset": -1}, "max_length_offset=-1"),
    ({"max_length_ratio": 1.5, "max_length_offset": 2.5}, "max_length_offset=2.5"),
])
def test_bad_length_limits(translator, kwargs, match):
    with pytest.raises(ValueError, match=match):
        models.generate(translator, SOURCE, max_length=4, start_token_id=START, end_token_id=END, **kwargs)


def test_max_length_ratio_is_for_translators():
    lm = small_model("gpt_tiny")
    with pytest.raises(ValueError, match="for translators.*max_length_ratio=1.5"):
        models.generate(lm, np.array([[5, 6]]), max_length=6, max_length_ratio=1.5)


@pytest.mark.parametrize("kwargs, match", [
    ({"max_length": 0}, "max_length=0"),
    ({"num_beams": 0, "strategy": "beam"}, "num_beams=0"),
    ({"strategy": "sampling"}, "strategy='sampling'"),
    ({"start_token_id": 40}, "start_token_id=40"),
    ({"p": 1.5, "strategy": "top_p"}, "p=1.5"),
    ({"temperature": 0}, "temperature=0"),
    ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size=-1"),
    ({"no_repeat_ngram_size": 2.0}, "no_repeat_ngram_size=2.0"),
])
def test_bad_arguments(translator, kwargs, match):
    args = {**dict(max_length=4, start_token_id=START, end_token_id=END), **kwargs}
    with pytest.raises(ValueError, match=match):
        models.generate(translator, SOURCE, **args)


def test_out_of_vocabulary_source_ids(translator):
    with pytest.raises(ValueError, match=r"\[0, 40\).*from 60 to 98"):
        models.generate(translator, SOURCE + 60, max_length=4, start_token_id=START, end_token_id=END)


def test_max_length_is_bounded_by_learned_positions():
    learned = small_model("transformer_tiny", position="learned")
    with pytest.raises(ValueError, match="sequence_length=16"):
        models.generate(learned, SOURCE, max_length=17, start_token_id=START, end_token_id=END)
    assert models.generate(learned, SOURCE, max_length=16, start_token_id=START,
                           end_token_id=END).shape == (3, 16)


@pytest.mark.parametrize("part", ["all", "embedding"])
def test_a_quantized_translator_decodes_through_the_general_path(part):
    """int8 weights (the whole model, or only its tied token table) have no plain-matrix step:
    `generate` steps through `call_with_cache`, and the cache still equals recomputing."""
    from kformer.kernels.decoding import PlainDecoder

    keras.utils.set_random_seed(0)
    model = small_model("transformer_tiny")
    kwargs = dict(max_length=6, start_token_id=START, end_token_id=END)
    model.quantize("int8") if part == "all" else model.decoder_embedding.token_embedding.quantize("int8")
    assert PlainDecoder.create(model, {}, 8) is None  # the plain-matrix step needs float weights
    np.testing.assert_array_equal(models.generate(model, SOURCE, **kwargs),
                                  models.generate(model, SOURCE, use_cache=False, **kwargs))
