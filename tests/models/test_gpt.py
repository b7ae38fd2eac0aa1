"""CausalLM: cached generation equals a naive loop, ragged prompts continue as alone, bad input named."""

import keras
import numpy as np
import pytest

from kformer import models
from kformer.data import imdb
from kformer.data.preprocessors import CausalLMPreprocessor
from kformer.data.wordpiece import WordPieceTokenizer
from tests.helpers import to_numpy
from tests.models.cases import small_model

END = 6
MAX = 10  # one max_length everywhere: every setting compiles its loop once per batch shape
PROMPTS = np.array([[5, 9, 12, 7], [5, 30, 0, 0], [5, 14, 22, 0]], "int32")  # right-padded


@pytest.fixture(scope="module", params=["learned", "rotary"])
def lm(request):
    return small_model("gpt_tiny", position=request.param)


def naive(model, prompts, max_length, end_token_id=END):
    """Re-runs the whole model on each row's sequence every step; greedy.

    The sequence is right-padded to `max_length` so every step has one shape
    (one compile); causal attention keeps the padding out of the last token's logits.
    """
    rows = []
    for prompt in prompts:
        tokens = list(prompt[prompt != 0])
        while len(tokens) < max_length and (len(tokens) == (prompt != 0).sum() or tokens[-1] != end_token_id):
            padded = np.array([tokens + [0] * (max_length - len(tokens))], "int32")
            logits = np.array(to_numpy(model.predict_on_batch(padded)))[0, len(tokens) - 1]
            logits[0] = -np.inf
            tokens.append(int(logits.argmax()))
        rows.append(tokens + [0] * (max_length - len(tokens)))
    return np.array(rows, "int32")


def test_cached_greedy_equals_the_naive_loop(lm):
    cached = lm.generate(PROMPTS, max_length=MAX, end_token_id=END)
    np.testing.assert_array_equal(cached, naive(lm, PROMPTS, MAX))
    np.testing.assert_array_equal(lm.generate(PROMPTS, max_length=MAX, end_token_id=END, use_cache=False), cached)


def test_ragged_prompts_continue_as_each_prompt_alone(lm):
    together = lm.generate(PROMPTS, max_length=MAX)
    for row, prompt in enumerate(PROMPTS):
        alone = lm.generate(prompt[None, : (prompt != 0).sum()], max_length=MAX)
        np.testing.assert_array_equal(alone[0], together[row])
    np.testing.assert_array_equal(together[:, :4][PROMPTS != 0], PROMPTS[PROMPTS != 0])  # prompts kept


@pytest.fixture(scope="module")
def gpt():
    """The default small language model (learned positions), built once for the tests below."""
    keras.utils.set_random_seed(1337)  # the weights each test built under conftest's seed before
    return small_model("gpt_tiny")


def test_strategies(gpt):
    lm = gpt
    greedy = lm.generate(PROMPTS, max_length=MAX)
    np.testing.assert_array_equal(lm.generate(PROMPTS, max_length=MAX, strategy="beam", num_beams=1), greedy)
    np.testing.assert_array_equal(lm.generate(PROMPTS, max_length=MAX, strategy="top_k", k=1, seed=0), greedy)
    sampled = lm.generate(PROMPTS, max_length=MAX, strategy="top_p", p=0.9, temperature=1.3, seed=4)
    np.testing.assert_array_equal(sampled, lm.generate(PROMPTS, max_length=MAX, strategy="top_p", p=0.9,
                                                       temperature=1.3, seed=4))
    assert sampled.min() >= 0 and sampled.max() < 40
    beam = lm.generate(PROMPTS, max_length=MAX, strategy="beam", num_beams=3, length_penalty=0.0)
    np.testing.assert_array_equal(beam[:, :4][PROMPTS != 0], PROMPTS[PROMPTS != 0])
    assert np.all(log_prob(lm, beam, PROMPTS) >= log_prob(lm, greedy, PROMPTS) - 1e-4)


def log_prob(model, rows, prompts):
    """Log-probability of each row's generated tokens (after its prompt) under the model."""
    totals = []
    all_logits = np.array(to_numpy(model.predict_on_batch(rows))).astype("float64")  # causal: padding is after
    for row, prompt, logits in zip(rows, prompts, all_logits):
        start, tokens = (prompt != 0).sum(), row[row != 0]
        logits[:, 0] = -np.inf
        log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - logits.max(-1, keepdims=True)
        totals.append(sum(log_probs[i - 1, tokens[i]] for i in range(start, len(tokens))))
    return np.array(totals)


def test_generation_stops_at_the_end_token(lm):
    free = lm.generate(PROMPTS[:1], max_length=MAX)
    end = int(free[0, 4])  # the first generated token: make it the end token
    out = lm.generate(PROMPTS[:1], max_length=MAX, end_token_id=end)
    assert out[0, 4] == end and (out[0, 5:] == 0).all()  # stops after it
    assert (out[0, :4] == PROMPTS[0]).all()


@pytest.mark.parametrize("prompts, kwargs, match", [
    (np.zeros((2, 3), "int32"), {}, "empty prompt in row 0"),
    (np.array([[5, 0, 7]]), {}, "right-padded"),
    (PROMPTS, {"max_length": 3}, r"max_length` \(3\) must be at least the prompt length"),
    (PROMPTS + 40, {}, r"`token_ids` must be in \[0, 40\)"),
    (PROMPTS, {"max_length": 17}, "sequence_length=16"),
    (PROMPTS, {"start_token_id": 5}, "start_token_id"),
    (PROMPTS, {"temperature": float("nan")}, "temperature=nan"),
    (PROMPTS, {"max_length": 9.0}, "max_length=9.0"),
])
def test_bad_input_is_named(gpt, prompts, kwargs, match):
    with pytest.raises(ValueError, match=match):
        gpt.generate(prompts, **{"max_length": 10, **kwargs})


def test_gpt2_small_layout():
    preset = models.get_preset("gpt2_small")
    assert (preset["num_layers"], preset["hidden_dim"], preset["num_heads"], preset["sequence_length"],
            preset["vocabulary_size"]) == (12, 768, 12, 1024, 50257)


def test_strings_in_strings_out_and_fit_on_raw_text(tmp_path):
    texts = imdb.load_split("unsup", max_examples=40)[0]
    tokenizer = WordPieceTokenizer.learn(texts, 200)
    lm = models.causal_lm(preset="gpt_tiny", vocabulary_size=tokenizer.vocabulary_size, sequence_length=24,
                          num_layers=1, preprocessor=CausalLMPreprocessor(tokenizer, 24))
    lm.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = lm.fit(texts, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    out = lm.generate(["The movie was", "I"], max_length=12)
    assert len(out) == 2 and out[0].startswith("the movie was")
    # [START] the movie was: 4 tokens leave nothing to generate at max_length=4 (the prompt was cut to [START])
    with pytest.raises(ValueError, match=r"`prompts`\[0\] is 4 or more tokens long .* `max_length`=4 leaves room for 3"):
        lm.generate(["The movie was", "I"], max_length=4)
    assert lm.generate(["The movie was", "I"], max_length=5)[0].startswith("the movie was")
    lm.save(tmp_path / "lm.keras")
    assert models.load(tmp_path / "lm.keras").generate(["The movie was", "I"], max_length=12) == out
