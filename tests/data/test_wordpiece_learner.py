"""`learn_vocabulary` learns tensorflow-text's WordPiece vocabulary, token for token and in order."""

import random

import pytest
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as reference

from kformer.data import imdb, translation
from kformer.data.wordpiece import SPECIAL_TOKENS, count_words
from kformer.data.wordpiece_learner import learn_vocabulary

RESERVED = list(SPECIAL_TOKENS)
pytestmark = pytest.mark.only_backend("tensorflow")  # numpy and Python only: the same on every backend


@pytest.mark.parametrize("size", [150, 500])
def test_same_vocabulary_on_reviews(size):
    counts = count_words(imdb.load_split("train", max_examples=120)[0])
    vocabulary = learn_vocabulary(counts, size, RESERVED, lower_thresh=1, max_input_tokens=3000)
    assert vocabulary == reference.learn(counts, size, RESERVED, lower_thresh=1, max_input_tokens=3000)
    assert size * 0.9 <= len(vocabulary) <= size


def test_same_vocabulary_on_spanish():  # accents and inverted marks: pieces are code points, not bytes
    counts = count_words(translation.load_split("train", max_examples=1500)[1])
    assert any(not word.isascii() for word in counts)
    assert learn_vocabulary(counts, 300, RESERVED, lower_thresh=1) == reference.learn(counts, 300, RESERVED,
                                                                                      lower_thresh=1)


@pytest.mark.parametrize("seed", range(100))
def test_same_vocabulary_on_edge_cases(seed):
    """Words spelled with the joiner, too long, reserved, of rare characters; ties; every argument."""
    rng = random.Random(seed)
    alphabet = "ab#cé"[:rng.randint(2, 5)]
    counts = {}
    for _ in range(rng.randint(1, 80)):
        word = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
        counts["##" + word if rng.random() < 0.1 else word] = rng.choice([1, 1, 2, 3, 5, 8, 40])
    if rng.random() < 0.3:
        counts["x" * 51] = 7  # over max_token_length: dropped
    if rng.random() < 0.3:
        counts["[UNK]"] = 9  # a reserved token: dropped
    kwargs = dict(lower_thresh=rng.choice([1, 2, 10]), max_unique_chars=rng.choice([2, 3, 1000]),
                  max_input_tokens=rng.choice([5, 30, -1]), num_iterations=rng.choice([0, 1, 2, 4]),
                  slack_ratio=rng.choice([0.0, 0.05, 0.5]))
    size = rng.choice([10, 20, 40])
    assert learn_vocabulary(counts, size, RESERVED, **kwargs) == reference.learn(counts, size, RESERVED, **kwargs)


@pytest.mark.parametrize("counts", [{}, {"a": 0}])
def test_no_words_name_the_argument(counts):
    with pytest.raises(ValueError, match="`word_counts` must map at least one word to a count >= 1"):
        learn_vocabulary(counts, 10, RESERVED)
