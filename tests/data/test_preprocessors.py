"""Preprocessors: the one implementation of tokenization/packing; serializable with their vocabulary."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from kformer.data.preprocessors import (BertPreprocessor, ImageClassifierPreprocessor,
                                        TextClassifierPreprocessor, TranslatorPreprocessor, as_strings, is_text)
from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer

pytestmark = pytest.mark.once("tokenizers and packing in TensorFlow ops, tf.data; no model")

VOCABULARY = list(SPECIAL_TOKENS) + ["a", "fine", "film", "dull", "##s", ".", "una", "película"]


@pytest.fixture
def tokenizer():
    return WordPieceTokenizer(VOCABULARY)


def ids(tokenizer, *tokens):
    return [tokenizer.ids[t] for t in tokens]


def test_text_classifier_pads_truncates_and_adds_special_tokens(tokenizer):
    plain = TextClassifierPreprocessor(tokenizer, 5).encode(["A fine film.", "", "film " * 9])
    assert plain.dtype == np.int32 and plain.tolist() == [
        ids(tokenizer, "a", "fine", "film", ".") + [0], [0] * 5, ids(tokenizer, *["film"] * 5)]
    wrapped = TextClassifierPreprocessor(tokenizer, 4, prefix="[CLS]", suffix="[SEP]").encode(["a fine film"])
    assert wrapped.tolist() == [ids(tokenizer, "[CLS]", "a", "fine", "[SEP]")]  # the suffix survives truncation


@pytest.mark.parametrize("truncation, kept", [
    ("head", ["a", "fine", "film", "dull", "."]), ("tail", ["film", "dull", ".", "a", "film"]),
    ("head_tail", ["a", "dull", ".", "a", "film"]),  # a budget of 5: 5 // 4 = 1 head token, 4 tail tokens
])
def test_long_texts_keep_the_head_the_tail_or_both(tokenizer, truncation, kept):
    text = "a fine film dull. a film"  # 7 tokens: a fine film dull . a film
    preprocessor = TextClassifierPreprocessor(tokenizer, 5, truncation=truncation)
    short = ids(tokenizer, "a", "film") + [0] * 3
    assert preprocessor.encode([text, "a film"]).tolist() == [ids(tokenizer, *kept), short]
    bert = BertPreprocessor(tokenizer, 7, truncation=truncation).encode([text])["token_ids"].tolist()
    assert bert == [ids(tokenizer, "[CLS]", *kept, "[SEP]")]  # the same 5 tokens between the specials
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(preprocessor))
    assert restored.truncation == truncation


def test_bert_inputs_and_mask_positions(tokenizer):
    inputs = BertPreprocessor(tokenizer, 8, mask_positions=True).encode(["a [MASK] film", "dull", "[mask] [MASK]"])
    assert sorted(inputs) == ["mask_positions", "padding_mask", "segment_ids", "token_ids"]
    assert inputs["token_ids"][0].tolist() == ids(tokenizer, "[CLS]", "a", "[MASK]", "film", "[SEP]") + [0] * 3
    np.testing.assert_array_equal(inputs["padding_mask"], inputs["token_ids"] != 0)
    assert not inputs["segment_ids"].any()
    assert inputs["mask_positions"].tolist() == [[2, 0], [0, 0], [1, 2]]  # 0-padded; 0 is [CLS]


def test_translator_teacher_forcing(tokenizer):
    preprocessor = TranslatorPreprocessor(tokenizer, tokenizer, 4)
    x, labels = preprocessor(["a fine film", "dull"], ["una película", "una película dull film"])
    start, end = preprocessor.start_token_id, preprocessor.end_token_id
    una, pelicula, dull = ids(tokenizer, "una", "película", "dull")
    assert x["encoder_token_ids"].numpy().tolist() == [ids(tokenizer, "a", "fine", "film") + [0], [dull, 0, 0, 0]]
    assert x["decoder_token_ids"].numpy().tolist() == [[start, una, pelicula, 0], [start, una, pelicula, dull]]
    assert labels.numpy().tolist() == [[una, pelicula, end, 0], [una, pelicula, dull, end]]
    assert list(preprocessor(["a film"])) == ["encoder_token_ids"]  # no targets: encoder inputs only
    assert preprocessor.detokenize([[una, pelicula, end]]) == ["una película"]


def test_images_are_resized_and_converted():
    gray = ImageClassifierPreprocessor(8, 1)
    out = gray.encode(np.full((2, 16, 12, 3), 255, np.uint8))
    assert out.shape == (2, 8, 8, 1) and out.dtype == np.float32 and np.allclose(out, 255.0, atol=0.5)
    rgb = ImageClassifierPreprocessor(8, 3).encode([np.zeros((5, 5, 1), np.uint8), np.ones((9, 9, 3), np.uint8)])
    assert rgb.shape == (2, 8, 8, 3)
    assert gray.encode(np.zeros((1, 6, 6, 1), np.uint8)).shape == (1, 8, 8, 1)  # after an RGB call
    same = np.random.default_rng(0).uniform(0, 255, (1, 8, 8, 1)).astype("float32")
    np.testing.assert_array_equal(gray.encode(same), same)  # already the right size: unchanged
    with pytest.raises(ValueError, match=r"`images` must be .* Received: images.shape=\(2, 8, 8, 2\)"):
        gray.encode(np.zeros((2, 8, 8, 2), np.uint8))
    rgba = np.random.default_rng(1).integers(0, 256, (1, 8, 8, 4)).astype(np.uint8)
    np.testing.assert_array_equal(gray.encode(rgba), gray.encode(rgba[..., :3]))  # alpha dropped


def test_dataset_shuffles_and_batches_in_tf_data(tokenizer):
    preprocessor = TextClassifierPreprocessor(tokenizer, 4)
    texts, labels = [f"film {'a ' * i}" for i in range(10)], np.arange(10)
    batches = list(preprocessor.dataset(texts, labels, batch_size=4, shuffle=True, seed=1))
    assert [tuple(x.shape) for x, _ in batches] == [(4, 4), (4, 4), (2, 4)]
    seen = np.concatenate([y.numpy() for _, y in batches])
    assert sorted(seen.tolist()) == list(range(10)) and seen.tolist() != list(range(10))
    encoded = preprocessor.encode(texts)
    for x, y in batches:
        np.testing.assert_array_equal(x.numpy(), encoded[y.numpy()])
    streamed = tf.data.Dataset.from_tensor_slices((np.array(texts), labels)).batch(5)
    assert [tuple(x.shape) for x, _ in preprocessor.dataset(streamed)] == [(5, 4), (5, 4)]


def test_serialization_keeps_the_vocabulary_as_an_asset(tokenizer, tmp_path):
    preprocessor = TranslatorPreprocessor(tokenizer, WordPieceTokenizer(VOCABULARY[:-1]), 6)
    config = keras.saving.serialize_keras_object(preprocessor)
    json.dumps(config)  # JSON-serializable; vocabularies are not in the config
    assert "película" not in json.dumps(config)
    restored = keras.saving.deserialize_keras_object(config)
    assert restored.sequence_length == 6 and restored.source_tokenizer.vocabulary is None
    preprocessor.source_tokenizer.save_assets(tmp_path)
    restored.source_tokenizer.load_assets(tmp_path)
    np.testing.assert_array_equal(restored.source_tokenizer.encode(["una película"], 4),
                                  tokenizer.encode(["una película"], 4))


@pytest.mark.parametrize("x, expected", [
    ("one", True), (["a", "b"], True), (np.array(["a"]), True), (tf.constant(["a"]), True),
    (np.zeros((2, 3), "int32"), False), ([1, 2], False), ([], False), ({"token_ids": [[1]]}, False),
])
def test_raw_text_detection(x, expected):
    assert is_text(x) is expected


def test_bad_arguments_are_named(tokenizer):
    with pytest.raises(ValueError, match="sequence_length=1"):
        TextClassifierPreprocessor(tokenizer, 1)
    with pytest.raises(ValueError, match="`truncation` must be one of .*Received: truncation='middle'"):
        TextClassifierPreprocessor(tokenizer, 8, truncation="middle")
    with pytest.raises(ValueError, match="`tokenizer` must be a kformer WordPieceTokenizer"):
        TextClassifierPreprocessor(VOCABULARY, 8)
    with pytest.raises(ValueError, match="`y` has 1 rows but `x` has 2"):
        TextClassifierPreprocessor(tokenizer, 8).dataset(["a", "b"], [0])
    with pytest.raises(ValueError, match="`x` must be a string or a 1-D batch of strings"):
        as_strings(np.array([["a"]]))
    with pytest.raises(ValueError, match="channels=2"):
        ImageClassifierPreprocessor(8, 2)
    with pytest.raises(ValueError, match=r"Missing: \['\[START\]'\]"):
        WordPieceTokenizer([t for t in VOCABULARY if t != "[START]"])
    with pytest.raises(ValueError, match="`token` is not in the vocabulary. Received: token='zebra'"):
        tokenizer.token_to_id("zebra")
    with pytest.raises(ValueError, match="has no vocabulary yet"):
        WordPieceTokenizer().encode(["a"], 4)
