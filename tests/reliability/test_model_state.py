"""Reliability round three (issue 55): a failed call never breaks a model or its saved file,
labels and ids are checked everywhere their values are visible, and raw inputs get named errors.

On JAX, Keras's trainer takes the variables' values out of the model while a loop runs; a loop
that raised left them empty, so every later `predict`, `get_weights` and `save` failed and the
next save wrote a file without weights. Each case below failed that way before.
"""

import pathlib

import keras
import numpy as np
import pytest

from kformer import layers, models
from kformer.data.preprocessors import (BertPreprocessor, CausalLMPreprocessor, ImageClassifierPreprocessor,
                                        TextClassifierPreprocessor, TranslatorPreprocessor)
from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
from kformer.training.losses import LabelSmoothedCrossEntropy

WORDS = ["a", "fine", "film", "good", "bad", "movie", "the", "was"]
TEXTS = ["a fine film", "the movie was bad", "good", "bad film"]
IDS = np.ones((4, 16), "int32")


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(list(SPECIAL_TOKENS) + WORDS)


@pytest.fixture(scope="module")
def classifier(tokenizer):
    task = models.text_classifier(preset="imdb_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                  sequence_length=16, preprocessor=TextClassifierPreprocessor(tokenizer, 16))
    task.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return task


class Boom(keras.callbacks.Callback):
    """Raises inside Keras's loop, after the trainer has taken the variables out (JAX)."""

    def __init__(self, hook):
        super().__init__()
        setattr(self, hook, self._raise)

    def _raise(self, *args, **kwargs):
        raise RuntimeError("a fault inside the loop")


FAILING_CALLS = {
    "predict of a fault inside the loop": lambda t: t.predict(IDS, verbose=0, callbacks=[Boom("on_predict_batch_end")]),
    "evaluate of a fault inside the loop": lambda t: t.evaluate(IDS, np.zeros(4, "int32"), verbose=0,
                                                                callbacks=[Boom("on_test_batch_end")]),
    "fit of a fault after its first step": lambda t: t.fit(IDS, np.zeros(4, "int32"), batch_size=2, verbose=0,
                                                           callbacks=[Boom("on_train_batch_end")]),
    "predict_labels with batch_size=-1": lambda t: t.predict_labels(IDS, batch_size=-1),
    "fit of raw texts without labels": lambda t: t.fit(TEXTS, None, verbose=0),
    "predict of an over-long input": lambda t: t.predict(np.ones((1, 17), "int32"), verbose=0),
}


@pytest.mark.parametrize("case", sorted(FAILING_CALLS))
def test_a_failed_call_leaves_the_model_working_and_its_saved_file_loadable(classifier, case, tmp_path):
    path = tmp_path / "m.keras"
    classifier.save(path)
    before = classifier.predict(IDS, verbose=0)
    with pytest.raises((RuntimeError, ValueError)):
        FAILING_CALLS[case](classifier)
    after = classifier.predict(IDS, verbose=0)
    if "fit" not in case:  # a fit that ran a step before failing keeps that step, as on every backend
        np.testing.assert_allclose(after, before, rtol=1e-6)
    assert all(np.isfinite(w).all() for w in classifier.get_weights())
    classifier.save(path)
    np.testing.assert_allclose(models.load(path).predict(IDS, verbose=0), after, rtol=1e-5, atol=1e-6)


def test_predict_on_batch_fault_restores_the_variables(classifier):
    before = classifier.predict_on_batch(IDS)
    classifier.predict_function = lambda *args: (_ for _ in ()).throw(RuntimeError("fault"))
    try:
        with pytest.raises(RuntimeError, match="fault"):
            classifier.predict_on_batch(IDS)
    finally:
        classifier.predict_function = None
    np.testing.assert_allclose(classifier.predict_on_batch(IDS), before, rtol=1e-6)


def test_a_save_that_fails_midway_keeps_the_good_file(classifier, tmp_path, monkeypatch):
    path = tmp_path / "m.keras"
    classifier.save(path)
    good = path.read_bytes()

    def half_a_file(model, filepath, *args, **kwargs):
        pathlib.Path(filepath).write_bytes(good[:len(good) // 2])

    monkeypatch.setattr(keras.src.saving.saving_api, "save_model", half_a_file)
    with pytest.raises(ValueError, match="not a whole .keras file"):
        classifier.save(path)
    assert path.read_bytes() == good
    assert not [p for p in tmp_path.iterdir() if p.name != "m.keras"], "a temporary file was left"


def test_threads_saving_to_one_path_all_succeed_and_the_last_rename_wins(classifier, tmp_path):
    """Issue 75 (14): the threads of a process shared one `.tmp-<pid>-m.keras`; three of four saves failed."""
    import threading

    path, errors = tmp_path / "m.keras", []

    def save():
        try:
            classifier.save(path)
        except Exception as err:  # noqa: BLE001 (collected: any failure fails the test)
            errors.append(err)

    threads = [threading.Thread(target=save) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [p.name for p in tmp_path.iterdir()] == ["m.keras"]  # no temporary file left
    np.testing.assert_allclose(models.load(path).predict(TEXTS, verbose=0), classifier.predict(TEXTS, verbose=0),
                               atol=1e-6)


def test_empty_inputs_answer_empty_and_empty_training_data_is_refused(classifier):
    assert classifier.predict([], verbose=0).shape == (0, 2)
    assert classifier.predict(np.zeros((0, 16), "int32"), verbose=0).shape == (0, 2)
    assert classifier.predict_labels([]) == []
    with pytest.raises(ValueError, match="`x` is empty"):
        classifier.fit([], [], verbose=0)


@pytest.mark.parametrize("y, message", [
    ([7, 0, 1, 0], r"`y` must be class ids in \[0, 2\). Received: values from 0 to 7"),
    ([-1, 0, 1, 0], r"`y` must be class ids in \[0, 2\). Received: values from -1"),
    ([1.0, 0.0, 1.0, 0.0], "`y` must hold integer class ids"),
    ([1, 0], "`y` has 2 labels but `x` has 4 inputs"),
    ("1010", "`y` must be integer class ids"),
])
def test_labels_are_checked_in_fit_and_evaluate(classifier, y, message):
    for x in (TEXTS, IDS):
        with pytest.raises(ValueError, match=message):
            classifier.fit(x, y, verbose=0)
        with pytest.raises(ValueError, match=message):
            classifier.evaluate(x, y, verbose=0)


@pytest.mark.parametrize("weights, message", [
    ({"sample_weight": np.array([1.0, np.nan, 1.0, 1.0])}, r"`sample_weight` must be finite numbers >= 0. Received: "
                                                           r"sample_weight\[1\]=nan \(1 of 4 rows\)"),
    ({"sample_weight": [1.0, -1.0, 1.0, 1.0]}, r"sample_weight\[1\]=-1.0"),
    ({"sample_weight": [1.0, 1.0]}, "`sample_weight` has 2 weights but `x` has 4 inputs"),
    ({"sample_weight": ["a", 1, 1, 1]}, "`sample_weight` must be numbers, one per input"),
    ({"class_weight": {0: 1.0, 1: float("nan")}}, r"`class_weight` values must be finite numbers >= 0. Received: "
                                                  r"class_weight\[1\]=nan"),
    ({"class_weight": {0: 1.0, 2: 1.0}}, r"`class_weight` keys must be class ids in \[0, 2\). Received: key 2"),
])
def test_sample_and_class_weights_are_checked(classifier, weights, message):
    """A NaN weight trained the model into predicting NaN from then on, without a word (every backend)."""
    before = classifier.predict(IDS, verbose=0)
    for x in (TEXTS, IDS):
        with pytest.raises(ValueError, match=message):
            classifier.fit(x, np.array([1, 0, 1, 0]), verbose=0, **weights)
        if "sample_weight" in weights:
            with pytest.raises(ValueError, match=message):
                classifier.evaluate(x, np.array([1, 0, 1, 0]), verbose=0, **weights)
    np.testing.assert_array_equal(classifier.predict(IDS, verbose=0), before)


def test_every_task_checks_its_labels(tokenizer):
    size = tokenizer.vocabulary_size
    lm = models.causal_lm(preset="gpt_tiny", vocabulary_size=size, sequence_length=8)
    with pytest.raises(ValueError, match=rf"`y` must be class ids in \[0, {size}\)"):
        lm.fit(np.ones((2, 8), "int32"), np.full((2, 8), size, "int32"), verbose=0)
    translator = models.translator(preset="transformer_tiny", vocabulary_size=size)
    x = {"encoder_token_ids": np.ones((2, 5), "int32"), "decoder_token_ids": np.ones((2, 5), "int32")}
    with pytest.raises(ValueError, match="`y` has 3 labels but `x` has 2 inputs"):
        translator.evaluate(x, np.ones((3, 5), "int32"), verbose=0)
    vit = models.vit(preset="vit_tiny", num_classes=3)
    with pytest.raises(ValueError, match=r"`y` must be class ids in \[0, 3\)"):
        vit.fit(np.zeros((2, 28, 28, 1), "float32"), np.array([0, 3]), verbose=0)
    backbone = models.bert(preset="bert_tiny", vocabulary_size=size, sequence_length=8, hidden_dim=16,
                                intermediate_dim=32)
    bert = models.bert_pretrainer(backbone)
    inputs = {"token_ids": np.ones((2, 8), "int32"), "segment_ids": np.zeros((2, 8), "int32"),
              "padding_mask": np.ones((2, 8), bool), "mask_positions": np.ones((2, 1), "int32")}
    with pytest.raises(ValueError, match=r"`y\['nsp_logits'\]` must be class ids in \[0, 2\)"):
        bert.fit(inputs, {"mlm_logits": np.ones((2, 1), "int32"), "nsp_logits": np.array([0, 2])}, verbose=0)


def test_backbones_layers_and_losses_check_the_ids_they_can_see():
    backbone = models.bert(preset="bert_tiny", vocabulary_size=100, sequence_length=8, hidden_dim=16,
                                intermediate_dim=32)
    ids = np.ones((2, 8), "int32")
    inputs = {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids > 0}
    with pytest.raises(ValueError, match=r"`segment_ids` must be in \[0, 2\)"):
        backbone.predict({**inputs, "segment_ids": 5 + 0 * ids}, verbose=0)
    with pytest.raises(ValueError, match=r"`token_ids` must be in \[0, 100\)"):
        backbone.predict({**inputs, "token_ids": 500 + 0 * ids}, verbose=0)
    with pytest.raises(ValueError, match="`token_ids` has 16 positions but the model supports at most 8"):
        backbone.predict({k: np.concatenate([v, v], 1) for k, v in inputs.items()}, verbose=0)
    assert np.isfinite(backbone.predict(inputs, verbose=0)["pooled_output"]).all()

    embedding = layers.TokenAndPositionEmbedding(10, 8, 4)
    for bad, message in ((np.array([[12, 1]]), r"`inputs` must be ids in \[0, 10\)"),
                         (np.array([[-1, 1]]), r"`inputs` must be ids in \[0, 10\)"),
                         (np.array([[1.0, 2.0]], "float32"), "`inputs` must be integer ids")):
        with pytest.raises(ValueError, match=message):
            embedding(bad)
    assert tuple(embedding(np.array([[9, 0]])).shape) == (1, 2, 4)
    loss = LabelSmoothedCrossEntropy()
    with pytest.raises(ValueError, match=r"`y_true` must be ids in \[0, 10\)"):
        loss(np.array([[12]]), np.zeros((1, 1, 10), "float32"))
    assert np.isfinite(float(loss(np.array([[9]]), np.zeros((1, 1, 10), "float32"))))


def test_images_with_nan_pixels_no_pixels_or_mixed_channels(tokenizer):
    vit = models.vit(preset="vit_tiny", preprocessor=ImageClassifierPreprocessor(28, 1))
    with pytest.raises(ValueError, match="`images` must hold finite pixels"):
        vit.predict_labels(np.full((1, 28, 28, 1), np.nan, "float32"))
    with pytest.raises(ValueError, match=r"`images\[1\]` must hold finite pixels"):
        vit.predict_labels([np.zeros((5, 5, 3), "float32"), np.full((5, 5, 3), np.inf, "float32")])
    with pytest.raises(ValueError, match=r"`images\[0\]` is empty \(0x0 pixels\)"):
        vit.predict_labels([np.zeros((0, 0, 3), "uint8")])
    with pytest.raises(ValueError, match=r"`images\[0\]` must be \(height, width, channels\)"):
        vit.predict_labels([np.zeros((5, 5, 2), "uint8")])
    rgb, rgba = np.zeros((5, 5, 3), "uint8"), np.zeros((5, 5, 4), "uint8")
    assert vit.predict_labels([rgb, rgba]) == vit.predict_labels([rgb, rgb])  # alpha dropped, as served


def test_fill_mask_refuses_masks_past_the_sequence_length(tokenizer):
    backbone = models.bert(preset="bert_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                sequence_length=16, hidden_dim=16, intermediate_dim=32)
    bert = models.bert_pretrainer(backbone, preprocessor=BertPreprocessor(tokenizer, 16, mask_positions=True))
    assert len(bert.fill_mask("a [MASK] film [MASK]")) == 2
    with pytest.raises(ValueError, match=r"`texts\[1\]` has 20 \[MASK\] tokens, 6 of them past"):
        bert.fill_mask(["a [MASK]", " ".join(["[MASK]"] * 20)])
    with pytest.raises(ValueError, match=r"`texts\[0\]` has 1 \[MASK\] tokens, 1 of them past"):
        bert.fill_mask(" ".join(["film"] * 20) + " [MASK]")
    with pytest.raises(ValueError, match="`batch_size` must be None or an int >= 1"):
        bert.fill_mask("a [MASK]", batch_size=0)
    assert bert.fill_mask([]) == []


def test_decoding_lengths_seeds_and_batch_sizes(tokenizer):
    preprocessor = TranslatorPreprocessor(tokenizer, tokenizer, 8)
    translator = models.translator(preset="transformer_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                   sequence_length=8, preprocessor=preprocessor)
    with pytest.raises(ValueError, match="`max_length` must be an int >= 1. Received: max_length=0"):
        translator.translate("a fine film", max_length=0)
    with pytest.raises(ValueError, match="`batch_size` must be None or an int >= 1"):
        translator.translate(["a fine film"], batch_size=0)
    with pytest.raises(ValueError, match="`texts` must be a str or a list of str"):
        translator.translate(5)
    assert translator.translate([]) == []
    for seed in ("abc", 1.5, -1):
        with pytest.raises(ValueError, match="`seed` must be None or an int"):
            translator.translate("a film", strategy="top_k", seed=seed)
    lm = models.causal_lm(preset="gpt_tiny", vocabulary_size=tokenizer.vocabulary_size, sequence_length=8,
                          preprocessor=CausalLMPreprocessor(tokenizer, 8))
    with pytest.raises(ValueError, match="`max_length` must be an int >= 1. Received: max_length=0"):
        lm.generate("a fine", max_length=0)
    with pytest.raises(ValueError, match="`max_length` must be an int >= 1. Received: max_length=0"):
        lm.generate(np.ones((1, 2), "int32"), max_length=0)


@pytest.mark.parametrize("x", [None, b"a fine film", 5, [["a"], ["b"]], {"a fine film"}, {"a": "b"},
                               [1.5, "a"]], ids=repr)
def test_raw_inputs_of_the_wrong_kind_name_x(classifier, x):
    before = classifier.predict(IDS, verbose=0)
    for call in (lambda: classifier.predict(x, verbose=0), lambda: classifier.predict_labels(x),
                 lambda: classifier.fit(x, [0], verbose=0), lambda: classifier.evaluate(x, [0], verbose=0)):
        with pytest.raises(ValueError, match="`x` must be text"):
            call()
    np.testing.assert_allclose(classifier.predict(IDS, verbose=0), before, rtol=1e-6)


def test_load_names_the_path_of_anything_but_a_whole_keras_file(classifier, tmp_path):
    with pytest.raises(ValueError, match="`path` must be a str or path"):
        models.load(None)
    classifier.save(tmp_path / "good.keras")
    good = (tmp_path / "good.keras").read_bytes()
    for name, data in (("empty", b""), ("random", np.random.default_rng(0).bytes(2000)),
                       ("truncated", good[:len(good) // 2])):
        (tmp_path / f"{name}.keras").write_bytes(data)
        with pytest.raises(ValueError, match=rf"`path` must be a whole `.keras` file.*{name}.keras.*"
                                             "not a readable zip archive"):
            models.load(tmp_path / f"{name}.keras")


@pytest.mark.once("the archive is checked with zipfile and json before Keras reads it")
def test_load_refuses_a_config_that_inflates_past_its_limit_or_nests_too_deep(classifier, tmp_path):
    """A 3 MB member inflating to 3 GB took 5 GB of memory, and a config nested 100,000 deep raised
    RecursionError: both are refused by name, reading nothing past the zip's directory for the first."""
    import zipfile

    from kformer.training.safe_state import MAX_JSON_BYTES

    classifier.save(tmp_path / "good.keras")
    with zipfile.ZipFile(tmp_path / "good.keras") as good:
        members = {name: good.read(name) for name in good.namelist()}
    for name, config in (("bomb", b" " * (MAX_JSON_BYTES + 1)), ("deep", b"[" * 100_000 + b"]" * 100_000)):
        with zipfile.ZipFile(tmp_path / f"{name}.keras", "w", zipfile.ZIP_DEFLATED) as archive:
            for member, data in members.items():
                archive.writestr(member, config if member == "config.json" else data)
    with pytest.raises(ValueError, match=rf"bomb.keras is not a .keras file kformer loads: its member 'config.json' "
                                         rf"inflates to {MAX_JSON_BYTES + 1:,} bytes, over the {MAX_JSON_BYTES:,}"):
        models.load(tmp_path / "bomb.keras")
    with pytest.raises(ValueError, match="deep.keras is not a .keras file kformer loads: its config.json is nested "
                                         "too deeply"):
        models.load(tmp_path / "deep.keras")


@pytest.mark.once("texts are checked in Python before TensorFlow converts them, whatever the backend")
@pytest.mark.parametrize("x, message", [
    (np.array(["a fine film", None], dtype=object), r"`x`\[1\] is None; expected a str"),
    (["a fine film", "bad \ud800 film"], r"`x`\[1\] is not valid Unicode text: surrogates not allowed at "
                                         r"character 4"),
    ("\ud800", r"`x`\[0\] is not valid Unicode text"),
    (np.array(["fine", "\udfff"]), r"`x`\[1\] is not valid Unicode text"),
], ids=["None in an object array", "lone surrogate", "a str", "a str array"])
def test_texts_that_tensorflow_cannot_convert_are_named(classifier, x, message):
    """TensorFlow's conversion errors named neither the argument nor the row (a demo page can send a lone
    surrogate)."""
    with pytest.raises(ValueError, match=message):
        classifier.predict_labels(x)


def test_labels_with_the_whole_output_shape_are_dense_targets(tokenizer):
    task = models.text_classifier(preset="imdb_tiny", vocabulary_size=tokenizer.vocabulary_size, sequence_length=16)
    task.compile("sgd", "categorical_crossentropy")
    one_hot = np.eye(2, dtype="float32")[[0, 1, 1, 0]]
    assert np.isfinite(task.fit(IDS, one_hot, verbose=0).history["loss"][0])
    with pytest.raises(ValueError, match="`y` must be finite"):
        task.fit(IDS, np.full((4, 2), np.nan, "float32"), verbose=0)


def test_threads_calling_one_model_get_the_answers_and_leave_it_whole(tokenizer):
    """Issue 75 (1): two threads calling one JAX model's `predict` emptied its variables for good (every later
    call raised `TypeError: 'NoneType' object is not callable`), and threaded `generate` failed with "Invalid
    buffer passed to Execute()". Each model's loops now take turns on JAX; every backend gives each thread the
    answers it gives alone, and a `fit` running beside them leaves a model that predicts, decodes and saves."""
    import concurrent.futures

    size = tokenizer.vocabulary_size
    classifier = models.text_classifier(preset="imdb_tiny", vocabulary_size=size, sequence_length=16,
                                        preprocessor=TextClassifierPreprocessor(tokenizer, 16))
    classifier.compile("adam", "sparse_categorical_crossentropy")
    translator = models.translator(preset="transformer_tiny", vocabulary_size=size, sequence_length=8,
                                   preprocessor=TranslatorPreprocessor(tokenizer, tokenizer, 8))
    lm = models.causal_lm(preset="gpt_tiny", vocabulary_size=size, sequence_length=8,
                          preprocessor=CausalLMPreprocessor(tokenizer, 8))
    calls = {"predict": lambda: classifier.predict(TEXTS, verbose=0),
             "translate": lambda: translator.translate(TEXTS[:2], max_length=6),
             "generate": lambda: lm.generate(TEXTS[2:], max_length=6)}
    alone = {name: call() for name, call in calls.items()}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [(name, pool.submit(call)) for _ in range(4) for name, call in calls.items()]
        for name, future in futures:
            if name == "predict":
                np.testing.assert_allclose(future.result(), alone[name], atol=1e-6)
            else:
                assert future.result() == alone[name], name
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        fit = pool.submit(classifier.fit, TEXTS, np.array([1, 0, 1, 0]), epochs=3, verbose=0)
        others = [pool.submit(calls["predict"]) for _ in range(4)]
        assert np.isfinite(fit.result().history["loss"]).all()
        for future in others:
            assert np.isfinite(future.result()).all()
    assert np.isfinite(classifier.predict(TEXTS, verbose=0)).all() and lm.generate(TEXTS[2:], max_length=6)
    check_keras_saves(classifier)


def check_keras_saves(model):
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        model.save(pathlib.Path(folder) / "m.keras")
        np.testing.assert_allclose(models.load(pathlib.Path(folder) / "m.keras").predict(TEXTS, verbose=0),
                                   model.predict(TEXTS, verbose=0), atol=1e-6)
