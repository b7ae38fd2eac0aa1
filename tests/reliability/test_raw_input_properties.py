"""Property tests over the raw-input task methods (issue 55).

Hypothesis draws arbitrary Python values, empty batches, batch sizes, seeds and labels for
`predict`, `predict_labels`, `fit`, `evaluate`, `translate`, `generate`, `fill_mask` and ViT
images. Each call either answers (finite, of the promised shape) or raises a ValueError or
TypeError naming one of its arguments; a refused call leaves the model predicting exactly as
before (on JAX a failed Keras loop used to empty the model's variables), and at the end every
model still saves and loads.
"""

import keras
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kformer import models
from kformer.data.preprocessors import (BertPreprocessor, CausalLMPreprocessor, ImageClassifierPreprocessor,
                                        TextClassifierPreprocessor, TranslatorPreprocessor)
from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
from tests.reliability.test_properties import finite


def assert_names_one_of(error, arguments):
    """The message names one of `arguments`: `name`, `name[i]` or name=..."""
    message = str(error)
    assert any(f"`{a}`" in message or f"`{a}[" in message or f" {a}=" in message for a in arguments), \
        f"{type(error).__name__} names none of {sorted(arguments)}: {error}"

WORDS = ["a", "fine", "film", "good", "bad", "movie", "the", "was"]
PROBE = ["a fine film", "the movie was bad"]

junk = st.one_of(st.none(), st.integers(-3, 3), st.floats(allow_nan=True), st.binary(max_size=8),
                 st.sets(st.text(max_size=4), max_size=2), st.dictionaries(st.text(max_size=3), st.text(max_size=3),
                                                                           max_size=2),
                 st.lists(st.lists(st.text(max_size=3), max_size=2), min_size=1, max_size=2),
                 st.lists(st.integers(0, 5), min_size=1, max_size=3), st.lists(st.one_of(st.text(max_size=5),
                                                                                         st.integers()), min_size=2,
                                                                               max_size=3))
texts = st.one_of(st.text(max_size=30), st.lists(st.text(max_size=30), max_size=3))
batch_sizes = st.one_of(st.none(), st.integers(-1, 3), st.sampled_from([1.5, "2", True]))


def is_texts(x):
    return isinstance(x, str) or (isinstance(x, list) and all(isinstance(t, str) for t in x))


def valid_batch_size(b):
    return b is None or (isinstance(b, int) and not isinstance(b, bool) and b >= 1)


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(list(SPECIAL_TOKENS) + WORDS)


@pytest.fixture(scope="module")
def classifier(tokenizer):
    task = models.text_classifier(preset="imdb_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                  sequence_length=8, preprocessor=TextClassifierPreprocessor(tokenizer, 8))
    task.compile("sgd", "sparse_categorical_crossentropy")
    return task


def unchanged(task, before):
    np.testing.assert_allclose(task.predict(PROBE, verbose=0), before, rtol=1e-6)


@settings(max_examples=25)
@given(x=st.one_of(texts, junk), batch_size=batch_sizes, method=st.sampled_from(["predict", "predict_labels"]))
def test_classifier_predict_answers_or_names_the_argument(classifier, x, batch_size, method):
    before = classifier.predict(PROBE, verbose=0)
    call = getattr(classifier, method)
    try:
        answer = call(x, batch_size=batch_size, **({"verbose": 0} if method == "predict" else {}))
    except (ValueError, TypeError) as error:
        event("refused")
        assert not (is_texts(x) and valid_batch_size(batch_size)), f"valid input refused: {error}"
        assert_names_one_of(error, ["x", "batch_size"])
        unchanged(classifier, before)
        return
    assert is_texts(x) and valid_batch_size(batch_size), f"accepted {x!r}, batch_size={batch_size!r}"
    rows = 1 if isinstance(x, str) else len(x)
    if method == "predict":
        assert answer.shape == (rows, 2) and finite(answer)
    else:
        assert len(answer) == rows and all(a in (0, 1) for a in answer)


labels = st.one_of(st.none(), st.lists(st.integers(-1, 2), max_size=4), st.lists(st.floats(0, 1), min_size=1,
                                                                                   max_size=3), junk)


@settings(max_examples=15)
@given(x=st.one_of(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), junk), y=labels,
       batch_size=batch_sizes, method=st.sampled_from(["fit", "evaluate"]))
def test_classifier_fit_and_evaluate_train_or_name_the_argument(classifier, x, y, batch_size, method):
    before = classifier.predict(PROBE, verbose=0)
    valid = (is_texts(x) and not isinstance(x, str) and valid_batch_size(batch_size) and isinstance(y, list)
             and len(y) == len(x) and all(isinstance(v, int) and 0 <= v < 2 for v in y))
    try:
        result = getattr(classifier, method)(x, y, batch_size=batch_size, verbose=0)
    except (ValueError, TypeError) as error:
        event("refused")
        assert not valid, f"valid data refused: {error}"
        assert_names_one_of(error, ["x", "y", "batch_size"])
        unchanged(classifier, before)
        return
    assert valid, f"accepted x={x!r}, y={y!r}, batch_size={batch_size!r}"
    loss = result.history["loss"][0] if method == "fit" else result[0]
    assert np.isfinite(loss)
    if method == "evaluate":
        unchanged(classifier, before)


weights = st.one_of(st.none(), st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=3,
                                         max_size=5), st.lists(st.floats(0, 4), min_size=4, max_size=4), junk)
class_weights = st.one_of(st.none(), st.dictionaries(st.one_of(st.integers(-1, 3), st.text(max_size=2)),
                                                    st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                                              st.integers(-2, 2), st.text(max_size=2)), max_size=3),
                          junk)


def valid_weights(sample_weight, class_weight):
    numbers = (int, float)
    good_sample = sample_weight is None or (isinstance(sample_weight, list) and len(sample_weight) == 4 and all(
        isinstance(w, numbers) and not isinstance(w, bool) and np.isfinite(w) and w >= 0 for w in sample_weight))
    good_class = class_weight is None or (isinstance(class_weight, dict) and all(
        isinstance(k, int) and not isinstance(k, bool) and 0 <= k < 2 and isinstance(v, numbers)
        and not isinstance(v, bool) and np.isfinite(v) and v >= 0 for k, v in class_weight.items()))
    return good_sample and good_class


@pytest.mark.once("the weights are checked with NumPy before Keras's loop, whatever the backend")
@settings(max_examples=20)
@given(sample_weight=weights, class_weight=class_weights)
def test_fit_with_sample_and_class_weights_trains_finitely_or_names_them(classifier, sample_weight, class_weight):
    """Issue 75 (6): a NaN weight trained every backend's model into predicting NaN from then on."""
    x, y = ["a fine film", "bad", "good film", "the movie was bad"], [1, 0, 1, 0]
    before = classifier.predict(PROBE, verbose=0)
    try:
        history = classifier.fit(x, y, sample_weight=sample_weight, class_weight=class_weight, verbose=0)
    except (ValueError, TypeError) as error:
        event("refused")
        assert not valid_weights(sample_weight, class_weight), f"valid weights refused: {error}"
        assert_names_one_of(error, ["sample_weight", "class_weight"])
        unchanged(classifier, before)
        return
    assert valid_weights(sample_weight, class_weight), f"accepted {sample_weight!r}, {class_weight!r}"
    assert np.isfinite(history.history["loss"][0]) and np.isfinite(classifier.predict(PROBE, verbose=0)).all()


@pytest.fixture(scope="module")
def translator(tokenizer):
    return models.translator(preset="transformer_tiny", vocabulary_size=tokenizer.vocabulary_size, sequence_length=8,
                             preprocessor=TranslatorPreprocessor(tokenizer, tokenizer, 8))


# A new max_length or strategy compiles a decoding loop (seconds on JAX and TensorFlow): few values.
@settings(max_examples=12)
@given(texts=st.one_of(st.lists(st.sampled_from(PROBE + ["", "good"]), max_size=3), junk),
       max_length=st.sampled_from([None, 6, 0, -1, 2.5, "6"]), batch_size=batch_sizes,
       seed=st.sampled_from([None, 0, -1, 1.5, "abc"]))
def test_translate_answers_or_names_the_argument(translator, texts, max_length, batch_size, seed):
    strategy = "greedy" if seed is None else "top_k"
    valid = (is_texts(texts) and (max_length is None or max_length == 6) and valid_batch_size(batch_size)
             and seed in (None, 0))
    try:
        out = translator.translate(texts, max_length=max_length, batch_size=batch_size, strategy=strategy,
                                   seed=seed)
    except (ValueError, TypeError) as error:
        event("refused")
        assert not valid, f"valid arguments refused: {error}"
        assert_names_one_of(error, ["texts", "max_length", "batch_size", "seed", "encoder_token_ids"])
        return
    assert valid, f"accepted texts={texts!r}, max_length={max_length!r}, seed={seed!r}"
    assert len(out) == len(texts) and all(isinstance(t, str) for t in out)


@pytest.fixture(scope="module")
def language_model(tokenizer):
    return models.causal_lm(preset="gpt_tiny", vocabulary_size=tokenizer.vocabulary_size, sequence_length=8,
                            preprocessor=CausalLMPreprocessor(tokenizer, 8))


@settings(max_examples=10)
@given(prompts=st.one_of(st.lists(st.sampled_from(PROBE + ["good"]), min_size=1, max_size=2), junk),
       max_length=st.sampled_from([None, 6, 0, -2]), seed=st.sampled_from([None, 3, -1, "x"]))
def test_generate_answers_or_names_the_argument(language_model, prompts, max_length, seed):
    valid = is_texts(prompts) and max_length in (None, 6) and seed in (None, 3)
    try:
        out = language_model.generate(prompts, max_length=max_length, strategy="greedy" if seed is None else "top_k",
                                      seed=seed)
    except (ValueError, TypeError) as error:
        event("refused")
        assert not valid, f"valid arguments refused: {error}"
        assert_names_one_of(error, ["prompts", "token_ids", "max_length", "seed"])
        return
    assert valid, f"accepted prompts={prompts!r}, max_length={max_length!r}, seed={seed!r}"
    assert len(out) == len(prompts) and all(isinstance(t, str) for t in out)


@pytest.fixture(scope="module")
def bert(tokenizer):
    backbone = models.bert(preset="bert_tiny", vocabulary_size=tokenizer.vocabulary_size, sequence_length=8,
                                hidden_dim=16, intermediate_dim=32)
    return models.bert_pretrainer(backbone, preprocessor=BertPreprocessor(tokenizer, 8, mask_positions=True))


@settings(max_examples=15)
@given(masks=st.lists(st.integers(0, 9), max_size=3), words=st.integers(0, 4), top_k=st.sampled_from([1, 3, 0, 2.0]),
       batch_size=batch_sizes, other=st.one_of(st.none(), junk))
def test_fill_mask_answers_every_mask_or_names_the_argument(bert, masks, words, top_k, batch_size, other):
    texts = other if other is not None else [" ".join(["film"] * words + ["[MASK]"] * n) for n in masks]
    fits = is_texts(texts) and all(words + n <= 6 for n in masks)  # [CLS] and [SEP] take two of 8 positions
    valid = fits and isinstance(top_k, int) and top_k >= 1 and valid_batch_size(batch_size)
    try:
        out = bert.fill_mask(texts, top_k=top_k, batch_size=batch_size)
    except (ValueError, TypeError) as error:
        event("refused")
        assert not valid, f"valid arguments refused: {error}"
        assert_names_one_of(error, ["texts", "top_k", "batch_size"])
        return
    assert valid, f"accepted texts={texts!r}, top_k={top_k!r}, batch_size={batch_size!r}"
    expected = masks if other is None else [0] * len(texts)  # drawn texts are too short for a [MASK]
    assert [len(answer) for answer in out] == expected  # one answer per [MASK], none dropped
    assert all(len(candidates) == top_k for answer in out for candidates in answer)


@pytest.fixture(scope="module")
def vit():
    return models.vit(preset="vit_tiny", num_classes=3, preprocessor=ImageClassifierPreprocessor(28, 1))


image = st.builds(lambda h, w, c, fill, dtype: np.full((h, w, c), fill, dtype if fill == fill else "float32"),
                  st.integers(0, 5), st.integers(0, 5), st.sampled_from([1, 2, 3, 4]),
                  st.sampled_from([0, 255, float("nan")]), st.sampled_from(["uint8", "float32"]))


@settings(max_examples=20)
@given(images=st.one_of(st.lists(image, min_size=1, max_size=3), image, junk))
def test_vit_predict_labels_answers_or_names_the_images(vit, images):
    def ok(a):
        return (isinstance(a, np.ndarray) and a.ndim == 3 and a.shape[0] > 0 and a.shape[1] > 0
                and a.shape[2] in (1, 3, 4) and np.isfinite(a).all())
    batch = [images] if isinstance(images, np.ndarray) else images
    valid = isinstance(batch, list) and all(ok(a) for a in batch) and len(batch) > 0
    try:
        out = vit.predict_labels(images)
    except (ValueError, TypeError) as error:
        event("refused")
        assert not valid, f"valid images refused: {error}"
        assert_names_one_of(error, ["images", "x"])
        return
    assert valid, f"accepted {images!r}"
    assert len(out) == len(batch) and all(0 <= label < 3 for label in out)


def test_every_model_still_saves_and_loads_after_the_properties(classifier, translator, language_model, bert, vit,
                                                                tmp_path):
    for name, task, probe in (("classifier", classifier, PROBE), ("vit", vit, np.zeros((1, 28, 28, 1), "float32")),
                              ("language_model", language_model, np.ones((1, 8), "int32"))):
        task.save(tmp_path / f"{name}.keras")
        loaded = models.load(tmp_path / f"{name}.keras")
        np.testing.assert_allclose(keras.tree.flatten(loaded.predict(probe, verbose=0))[0],
                                   keras.tree.flatten(task.predict(probe, verbose=0))[0], rtol=1e-5, atol=1e-6)
    for name, task in (("translator", translator), ("bert", bert)):
        task.save(tmp_path / f"{name}.keras")
        models.load(tmp_path / f"{name}.keras")
