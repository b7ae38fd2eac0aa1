"""Property tests over the public entry points (issue 12).

Hypothesis draws shapes, id ranges, dtypes, arguments and strings; each call
either returns finite output of the promised shape or raises a ValueError or
TypeError that names one of the entry point's arguments. Examples are
derandomized and bounded (tests/conftest.py), so CI runs the same cases each
time.
"""

import re

import keras
import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kformer import layers, models
from tests.helpers import to_numpy

NAMED = re.compile(r"`(\w+)`|\b(\w+)=")


def assert_names_one_of(error, arguments):
    """The error message names (`name` or name=...) at least one of `arguments`."""
    named = {a or b for a, b in NAMED.findall(str(error))}
    assert named & set(arguments), f"{type(error).__name__} names none of {sorted(arguments)}: {error}"


def finite(x):
    return bool(np.all(np.isfinite(np.asarray(to_numpy(x), "float32"))))


# --- layers -----------------------------------------------------------------------------------

ATTENTION_FAULTS = {  # fault -> the argument its error must name
    "value_batch": "value", "value_width": "value", "mask_batch": "attention_mask",
    "mask_query_length": "attention_mask", "mask_key_length": "attention_mask", "mask_rank": "attention_mask"}


@settings(max_examples=25)
@given(batch=st.integers(1, 3), q_len=st.integers(0, 5), k_len=st.integers(0, 5), causal=st.booleans(),
       with_mask=st.booleans(), fault=st.sampled_from([None] * 4 + sorted(ATTENTION_FAULTS)))
def test_attention_returns_finite_output_or_names_the_argument(batch, q_len, k_len, causal, with_mask, fault):
    q = np.random.default_rng(0).normal(size=(batch, q_len, 8)).astype("float32")
    v_shape = [batch + (fault == "value_batch"), k_len, 6 if fault == "value_width" else 8]
    mask_shape = [batch, q_len, k_len]  # a 1 would broadcast: faults add 2
    for i, name in enumerate(["mask_batch", "mask_query_length", "mask_key_length"]):
        mask_shape[i] += 2 * (fault == name)
    mask = np.ones(mask_shape[:2] if fault == "mask_rank" else mask_shape, bool)
    try:
        out = _attention()(q, np.ones(v_shape, "float32"),
                           attention_mask=mask if with_mask or fault else None, use_causal_mask=causal)
    except (ValueError, TypeError) as error:
        event("refused")
        assert fault is not None, f"valid inputs refused: {error}"
        assert_names_one_of(error, [ATTENTION_FAULTS[fault]])
        return
    assert fault is None, f"accepted inputs with fault {fault}"  # causal with q_len != k_len: Keras's rule
    assert tuple(out.shape) == (batch, q_len, 8) and finite(out)


_ATTENTION = {}


def _attention():  # one layer, built once for width 8 (hypothesis examples share it)
    if not _ATTENTION:
        _ATTENTION["layer"] = layers.MultiHeadAttention(num_heads=2, key_dim=4)
        _ATTENTION["layer"](np.ones((1, 2, 8), "float32"), np.ones((1, 2, 8), "float32"))
    return _ATTENTION["layer"]


@settings(max_examples=20)
@given(shape=st.lists(st.integers(0, 10), min_size=1, max_size=3), start=st.integers(-2, 6),
       dtype=st.sampled_from(["int32", "int64"]), position=st.sampled_from(["learned", "sinusoidal"]))
def test_token_and_position_embedding_shapes(shape, start, dtype, position):
    embedding = _embedding(position)
    ids = np.random.default_rng(1).integers(0, 30, shape).astype(dtype)
    fits = len(shape) == 2 and start >= 0 and (position == "sinusoidal" or shape[1] + start <= 8)
    try:
        out = embedding(ids, start_index=start)
    except (ValueError, TypeError) as error:
        event("refused")
        assert not fits, f"valid ids refused: {error}"
        assert_names_one_of(error, ["inputs", "start_index", "sequence_length"])
        return
    assert fits, f"accepted ids of shape {shape} from start_index={start}"
    assert tuple(out.shape) == (*shape, 16) and finite(out)


_EMBEDDINGS = {}


def _embedding(position):
    if position not in _EMBEDDINGS:
        _EMBEDDINGS[position] = layers.TokenAndPositionEmbedding(30, 8, 16, position=position)
    return _EMBEDDINGS[position]


# --- tasks ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def classifier():
    return models.text_classifier(preset="imdb_tiny", vocabulary_size=40, sequence_length=8)


@settings(max_examples=15)
@given(shape=st.one_of(st.tuples(st.integers(1, 3), st.just(8)), st.lists(st.integers(1, 10), min_size=1, max_size=3)),
       low=st.integers(-3, 39),
       span=st.integers(0, 6), dtype=st.sampled_from(["int32", "int64", "float32", "uint8"]))
def test_predict_returns_probabilities_or_names_the_input(classifier, shape, low, span, dtype):
    values = np.random.default_rng(2).integers(low, low + span + 1, shape)
    ids = values.astype(dtype)
    valid = (len(shape) == 2 and shape[1] == 8 and dtype != "float32" and (ids >= 0).all() and (ids < 40).all()
             and (values == ids).all())
    try:
        probabilities = classifier.predict(ids, verbose=0)
    except (ValueError, TypeError) as error:
        event("refused")
        assert not valid, f"valid ids refused: {error}"
        assert_names_one_of(error, ["token_ids"])
        return
    assert valid, f"accepted {dtype} ids of shape {shape} in [{ids.min()}, {ids.max()}]"
    assert probabilities.shape == (shape[0], 2) and finite(probabilities)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)


@pytest.fixture(scope="module")
def language_model():
    return models.causal_lm(preset="gpt_tiny", vocabulary_size=30, sequence_length=12)


GENERATE_FAULTS = {  # fault -> (argument, value) the error must name
    "id_past_vocabulary": ("token_ids", None), "negative_id": ("token_ids", None), "empty_prompt": ("token_ids", None),
    "left_padded": ("token_ids", None), "short_max_length": ("max_length", None),
    "float_max_length": ("max_length", 2.5), "max_length_past_positions": ("max_length", 13),
    "strategy": ("strategy", "sample"), "num_beams": ("num_beams", 0), "p": ("p", 1.5), "nan_p": ("p", float("nan")),
    "temperature": ("temperature", 0.0), "end_token_id": ("end_token_id", 30), "start_token_id": ("start_token_id", 1)}


# Each new setting compiles a decoding loop (seconds on JAX and TensorFlow): few values per argument.
@settings(max_examples=12)
@given(prompt=st.lists(st.integers(1, 29), min_size=1, max_size=4), max_length=st.sampled_from([12, 6]),
       strategy=st.sampled_from(["greedy", "beam", "top_k", "top_p"]), num_beams=st.sampled_from([2, 1]),
       p=st.sampled_from([0.9, 0.3]), temperature=st.sampled_from([1.0, 0.7]),
       end_token_id=st.one_of(st.none(), st.integers(1, 29)),
       fault=st.sampled_from([None] * 8 + sorted(GENERATE_FAULTS)))
def test_generate_returns_ids_in_range_or_names_the_argument(language_model, prompt, max_length, strategy,
                                                            num_beams, p, temperature, end_token_id, fault):
    args = dict(max_length=max_length, strategy=strategy, num_beams=num_beams, p=p,
                temperature=temperature, end_token_id=end_token_id, seed=0)
    ids = np.array([prompt], "int32")
    if fault in GENERATE_FAULTS and GENERATE_FAULTS[fault][1] is not None:
        argument, value = GENERATE_FAULTS[fault]
        args[argument] = value
    elif fault is not None:
        ids = {"id_past_vocabulary": np.array([prompt + [30]], "int32"), "negative_id": -ids,
               "empty_prompt": np.zeros((1, 0), "int32"), "left_padded": np.array([[0] + prompt], "int32"),
               "short_max_length": ids}[fault]
        if fault == "short_max_length":
            args["max_length"] = len(prompt) - 1
    try:
        out = models.generate(language_model, ids, **args)
    except (ValueError, TypeError) as error:
        event("refused")
        assert fault is not None, f"valid arguments refused: {error}"
        assert_names_one_of(error, [GENERATE_FAULTS[fault][0]])
        return
    assert fault is None, f"accepted {fault}: {args}"
    assert out.shape == (1, args["max_length"]) and out.min() >= 0 and out.max() < 30
    np.testing.assert_array_equal(out[0, :len(prompt)], prompt)  # the prompt is kept as given


# --- text: the tokenizer and the served graph (TensorFlow code on every backend; run once) -----

texts = st.lists(st.text(max_size=40), min_size=1, max_size=4)


@pytest.fixture(scope="module")
def tokenizer():
    from kformer.data import imdb
    from kformer.data.wordpiece import WordPieceTokenizer
    return WordPieceTokenizer.learn(imdb.load_split("train", max_examples=200)[0], 300)


@pytest.mark.tf_only
@settings(max_examples=30)
@given(batch=texts, length=st.integers(1, 12), special=st.booleans())
def test_tokenizer_maps_any_text_to_ids_in_range(tokenizer, batch, length, special):
    prefix, suffix = ("[START]", "[END]") if special else (None, None)
    try:
        ids = tokenizer.encode(batch, length, prefix=prefix, suffix=suffix)
    except ValueError as error:
        assert special and length < 3, f"refused: {error}"
        assert_names_one_of(error, ["sequence_length"])
        return
    assert ids.shape == (len(batch), length) and ids.dtype == np.int32
    assert ids.min() >= 0 and ids.max() < tokenizer.vocabulary_size
    for row in ids:  # padding (0) only after the tokens
        used = np.flatnonzero(row)
        assert used.size == 0 or (row[: used[-1] + 1] != 0).all()
    decoded = tokenizer.detokenize(ids).numpy()
    assert decoded.shape == (len(batch),)


@pytest.mark.tf_only
@settings(max_examples=10)
@given(words=st.lists(st.sampled_from(["the", "film", "was", "good", "bad", "and", "a", "movie"]),
                      min_size=1, max_size=6))
def test_tokenizer_round_trips_known_words(tokenizer, words):
    text = " ".join(words)
    ids = tokenizer.encode([text], 16)
    assert tokenizer.detokenize(ids).numpy()[0].decode() == text


@pytest.fixture(scope="module")
def served(tokenizer, tmp_path_factory):
    import tensorflow as tf

    from kformer import export
    from kformer.data.preprocessors import TextClassifierPreprocessor
    model = models.text_classifier(preset="imdb_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                   sequence_length=16, preprocessor=TextClassifierPreprocessor(tokenizer, 16))
    path = export.export_for_serving(model, tmp_path_factory.mktemp("served") / "imdb")
    return tf.saved_model.load(str(path)).signatures["serving_default"]


@pytest.mark.tf_only
@settings(max_examples=15)
@given(batch=st.lists(st.one_of(st.text(max_size=60), st.binary(max_size=20)), min_size=1, max_size=4))
def test_served_classifier_answers_any_text(served, batch):
    import tensorflow as tf
    try:
        answer = served(text=tf.constant(batch, tf.string))
    except tf.errors.InvalidArgumentError as error:  # only bytes that are not UTF-8 may be refused
        assert any(isinstance(t, bytes) and not _is_utf8(t) for t in batch), error
        return
    probabilities = answer["probabilities"].numpy()
    assert probabilities.shape == (len(batch), 2) and finite(probabilities)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)


def _is_utf8(data):
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
