"""Short-text proxies of IMDB reviews: first sentences and random word crops."""

import numpy as np
import pytest

from kformer.data import imdb

pytestmark = pytest.mark.once("Python string rules, numpy and a tf.data map")


@pytest.mark.parametrize("text, first", [
    ("Dull. Avoid it.", "Dull."),
    ("Great fun! See it.", "Great fun!"),
    ("What?! No way.", "What?!"),
    ("A fine film<br /><br />Really great.", "A fine film"),  # a line break ends a sentence
    ("<br /><BR>  Bad.<br />Worse.", "Bad."),  # empty paragraphs are skipped
    ("Mr. Smith and Dr. Jones meet vs. the rest. Then it ends.", "Mr. Smith and Dr. Jones meet vs. the rest."),
    ("Films e.g. this one bore me. Next.", "Films e.g. this one bore me."),
    ("J. R. R. Tolkien would weep. Bad.", "J. R. R. Tolkien would weep."),  # initials
    ("Shot in the U.S. on film. It drags.", "Shot in the U.S. on film."),
    ("It was... okay. Not more.", "It was... okay."),  # an ellipsis before a lowercase word goes on
    ("It was bad... Really bad.", "It was bad..."),  # ... before a capital ends
    ("Wow\u2026 Great.", "Wow\u2026"),
    ('"Wow!" he said. Then left.', '"Wow!" he said.'),  # inside quotes, before a lowercase word
    ('He said "go." Then left.', 'He said "go."'),  # closing quotes belong to the sentence
    ("(Spoilers.) The end is sad.", "(Spoilers.)"),
    ("i liked it. the acting was bad.", "i liked it."),  # a bare "." ends a sentence whatever follows
    ("...Well. Fine.", "...Well."),  # a sentence needs a letter or digit
    ("Rated 7.5/10. Good.", "Rated 7.5/10."),  # no space after the dot: not an end
    ("no punctuation  at\tall", "no punctuation at all"),
    ("", ""),
    ("<br />", ""),
])
def test_first_sentence_rules(text, first):
    assert imdb.first_sentence(text) == first


def test_first_sentences_keeps_order_and_labels():
    texts, labels = imdb.first_sentences(["Dull. Avoid.", "Great! Loved it.", "Fine"], np.array([0, 1, 1]))
    assert texts == ["Dull.", "Great!", "Fine"]
    assert labels.dtype == np.int32 and labels.tolist() == [0, 1, 1]
    with pytest.raises(ValueError, match="one label per text"):
        imdb.first_sentences(["a", "b"], [0])


def test_random_crops_are_deterministic_windows_of_10_to_30_words():
    rng = np.random.default_rng(1)
    texts = [" ".join(f"w{i}_{j}" for j in range(n)) for i, n in enumerate(rng.integers(1, 120, 200))]
    labels = rng.integers(0, 2, 200)
    crops, crop_labels = imdb.random_crops(texts, labels, seed=3)
    assert crops == imdb.random_crops(texts, labels, seed=3)[0]
    assert crops != imdb.random_crops(texts, labels, seed=4)[0]
    assert crop_labels.tolist() == labels.tolist()
    lengths = []
    for text, crop in zip(texts, crops):
        words, kept = text.split(), crop.split()
        if len(words) <= 10:
            assert crop == text  # a short review stays whole
        else:
            assert 10 <= len(kept) <= min(30, len(words))
            start = words.index(kept[0])
            assert words[start:start + len(kept)] == kept  # consecutive words
        lengths.append(len(kept))
    assert len(set(lengths)) > 10 and max(lengths) == 30  # varied lengths, up to 30
    # a crop depends on the seed and the review's index only, not on the other reviews
    assert imdb.random_crops(texts[:50], labels[:50], seed=3)[0] == crops[:50]


def test_random_crops_clean_html_and_check_their_bounds():
    crops, _ = imdb.random_crops(["one<br /><br />two three"], [1], 1, 5)
    assert crops == ["one two three"]
    assert imdb.random_crops(["a b c d e"], [0], 2, 2, seed=0)[0][0] in ("a b", "b c", "c d", "d e")
    for low, high in ((0, 5), (6, 5), (1.5, 3)):
        with pytest.raises(ValueError, match="min_words"):
            imdb.random_crops(["a"], [0], low, high)


def test_proxies_of_the_bundled_test_split_are_short():
    texts, labels = imdb.load_split("test", max_examples=200)
    firsts, _ = imdb.first_sentences(texts, labels)
    crops, _ = imdb.random_crops(texts, labels)
    assert all(f and text.startswith(f) for f, text in zip(firsts, texts))
    assert np.median([len(f.split()) for f in firsts]) < 30
    assert all(len(c.split()) <= 30 for c in crops)


def test_random_token_windows_cut_rows_anew_each_epoch():
    import tensorflow as tf

    ids = np.zeros((64, 40), "int32")
    lengths = np.random.default_rng(0).integers(1, 41, 64)
    for row, n in enumerate(lengths):
        ids[row, :n] = np.arange(1, n + 1) + 100 * row  # distinct, increasing tokens; 0-padded at the end
    labels = np.arange(64)
    ds = tf.data.Dataset.from_tensor_slices((ids, labels)).batch(16)
    windowed = imdb.random_token_windows(ds, 0.5, 3, 10, seed=1)
    epochs = [np.concatenate([x.numpy() for x, _ in windowed]) for _ in range(2)]
    assert not np.array_equal(epochs[0], epochs[1])  # new windows every epoch
    assert np.array_equal(np.concatenate([y.numpy() for _, y in windowed]), labels)
    replaced = 0
    for out, row, n in zip(epochs[0], ids, lengths):
        kept = out[out != 0]
        assert np.all(out[len(kept):] == 0)  # front-aligned, 0-padded
        if np.array_equal(out, row):
            continue
        replaced += 1
        assert 3 <= len(kept) <= 10 and len(kept) < n
        start = int(np.flatnonzero(row == kept[0])[0])
        assert np.array_equal(kept, row[start:start + len(kept)])  # consecutive tokens of its own row
    assert 16 <= replaced <= 48
    whole = np.concatenate([x.numpy() for x, _ in imdb.random_token_windows(ds, 0.0, 3, 10)])
    assert np.array_equal(whole, ids)
    with pytest.raises(ValueError, match="min_tokens"):
        imdb.random_token_windows(ds, 0.5, 0, 10)
    with pytest.raises(ValueError, match="probability"):
        imdb.random_token_windows(ds, 1.5)
