import numpy as np
import pytest
import tensorflow as tf

from kformer.data import imdb
from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer


@pytest.fixture(scope="module")
def texts():
    return imdb.load_split("train", max_examples=300)[0]


@pytest.fixture(scope="module")
def tokenizer(texts):
    return WordPieceTokenizer.learn(texts, 600)


@pytest.mark.once("tokenizer learning in numpy and Python")
def test_vocabulary_starts_with_the_special_tokens(tokenizer):
    assert tokenizer.vocabulary[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS)
    assert tokenizer.ids["[PAD]"] == 0
    assert 500 <= tokenizer.vocabulary_size <= 600
    assert any(t.startswith("##") for t in tokenizer.vocabulary)


def test_matches_keras_hub_wordpiece_on_ascii_reviews(tokenizer):
    import keras_hub

    test_texts = [t for t in imdb.load_split("test", max_examples=200)[0] if t.isascii()]
    reference = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=tokenizer.vocabulary, lowercase=True, strip_accents=False, split_on_cjk=False,
        oov_token="[UNK]")
    theirs = reference(tf.constant(test_texts))
    theirs = theirs.to_list() if hasattr(theirs, "to_list") else [list(map(int, t)) for t in theirs]
    mine = tokenizer.tokenize(tf.constant(test_texts)).to_list()
    assert len(test_texts) > 150
    assert mine == theirs


@pytest.mark.once("tokenizer in TensorFlow ops")
def test_a_batch_splits_each_distinct_word_once_with_the_same_result(tokenizer, texts):
    # tokenize() splits the batch's distinct words once and gathers them back.
    batch = list(texts[:20]) + ["", "film film film", texts[0]]
    together = tokenizer.tokenize(tf.constant(batch)).to_list()
    alone = [tokenizer.tokenize(tf.constant([t])).to_list()[0] for t in batch]
    assert together == alone
    assert together[-1] == together[0] and together[20] == []
    assert tokenizer.tokenize(tf.constant([], tf.string)).to_list() == []


@pytest.mark.once("tokenizer in TensorFlow ops")
def test_padding_truncation_and_special_tokens(tokenizer):
    ids = tokenizer(tf.constant(["a fine film", "", "film " * 100]), 8, prefix="[CLS]", suffix="[SEP]").numpy()
    assert ids.shape == (3, 8) and ids.dtype == np.int32
    cls, sep = tokenizer.ids["[CLS]"], tokenizer.ids["[SEP]"]
    assert ids[0, 0] == cls and sep in ids[0] and ids[0, -1] == 0
    assert ids[1].tolist() == [cls, sep, 0, 0, 0, 0, 0, 0]  # empty text: defined, not an error
    assert ids[2, -1] == sep and (ids[2] != 0).all()  # the suffix survives truncation


@pytest.mark.once("tokenizer in TensorFlow ops")
def test_unknown_characters_and_round_trip(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["the movie ☃", "x" * 150])).to_list()
    assert ids[0][-1] == tokenizer.ids["[UNK]"]
    assert ids[1] == [tokenizer.ids["[UNK]"]]  # over-long words are one [UNK], as in BERT
    text = "this movie was not good, but the acting was fine."
    assert tokenizer.detokenize(tokenizer(tf.constant([text]), 32)).numpy()[0].decode() == text


@pytest.mark.once("tokenizer in TensorFlow ops")
def test_unicode_spaces_separate_words_and_never_become_tokens(tokenizer):
    # Tatoeba's Spanish has no-break spaces before "?" and in "10 000": learning used to keep
    # "\xa0" as a token and then refuse its own vocabulary (the full en-es recipe stopped there)
    spaces = ["\xa0", "\u202f", "\u2009", "\u3000", "\u2028"]
    texts = [f"¿qué{space}? son 10{space}000 pesos{space}!" for space in spaces] * 20
    learned = WordPieceTokenizer.learn(texts, 40)
    assert all(token == token.strip() and not any(c in token for c in spaces) for token in learned.vocabulary)
    plain = tokenizer.tokenize(tf.constant(["the movie , 10 000 ?"])).to_list()
    spaced = tokenizer.tokenize(tf.constant([f"the{s}movie,{s}10{s}000{s}?" for s in spaces])).to_list()
    assert spaced == plain * len(spaces)


@pytest.mark.once("tokenizer in TensorFlow ops and file reading")
def test_save_and_load(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "vocabulary.txt")
    again = WordPieceTokenizer.load(tmp_path / "vocabulary.txt")
    assert again.vocabulary == tokenizer.vocabulary
    probe = tf.constant(["Reloaded tokenizers give the same ids."])
    np.testing.assert_array_equal(again(probe, 16), tokenizer(probe, 16))


@pytest.mark.once("argument check before any backend code")
def test_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        WordPieceTokenizer.load(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match=r"must start with '\[PAD\]'"):
        WordPieceTokenizer(["hello", "[PAD]"])
    with pytest.raises(ValueError, match="`texts` is empty"):
        WordPieceTokenizer.learn([], 100)
    with pytest.raises(ValueError, match="vocabulary_size"):
        WordPieceTokenizer.learn(["some text"], 5)


@pytest.mark.parametrize("content, message", [
    (b"[PAD]\n[UNK]\n\nfoo\n", "blank lines \\(line 3\\)"),
    (b"[PAD]\n[UNK]\n\xff\xfe\n", "not UTF-8"),
], ids=["blank line", "non-UTF-8 bytes"])
@pytest.mark.once("vocabulary file reading")
def test_a_bad_vocabulary_file_is_refused_naming_the_file(tmp_path, content, message):
    path = tmp_path / "vocabulary.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as error:
        WordPieceTokenizer.load(path)
    assert str(path) in str(error.value)
