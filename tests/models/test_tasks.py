"""Task classes with preprocessors: raw inputs in, answers out, on every backend; save and load."""

import pathlib
import re
import warnings

import keras
import numpy as np
import pytest

from kformer import models
from kformer.data import imdb
from kformer.data.preprocessors import (BertPreprocessor, ImageClassifierPreprocessor,
                                        TextClassifierPreprocessor, TranslatorPreprocessor)
from kformer.data.wordpiece import WordPieceTokenizer
from kformer.generation.options import TRANSLATE_MAX_WORD_PIECES, TRANSLATE_NO_REPEAT_NGRAM_SIZE

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXTS = ["A wonderful, moving film.", "Dull and far too long.", "", "The [MASK] was [MASK]."]


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer.learn(imdb.load_split("train", max_examples=100)[0], 300)


@pytest.fixture(scope="module")
def reviews():
    return imdb.load_split("train", max_examples=32)


def test_text_classifier_fits_and_predicts_raw_strings(tokenizer, reviews, tmp_path):
    texts, labels = reviews
    model = models.text_classifier(preset="imdb_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                   sequence_length=16, class_names=["negative", "positive"],
                                   preprocessor=TextClassifierPreprocessor(tokenizer, 16))
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(texts, labels, batch_size=8, epochs=1, verbose=0, validation_data=(texts[:8], labels[:8]))
    assert np.isfinite(history.history["loss"][0]) and "val_accuracy" in history.history
    assert 0.0 <= model.evaluate(texts, labels, verbose=0)[1] <= 1.0
    probabilities = model.predict(TEXTS, verbose=0)
    assert probabilities.shape == (4, 2) and np.allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    ids = model.preprocessor.encode(TEXTS)
    np.testing.assert_allclose(model.predict(ids, verbose=0), probabilities, atol=1e-6)  # ids still work
    assert set(model.predict_labels(TEXTS)) <= {"negative", "positive"}
    model.save(tmp_path / "model.keras")
    loaded = models.load(tmp_path)
    assert type(loaded) is models.TextClassifier and loaded.class_names == ["negative", "positive"]
    assert loaded.preprocessor.tokenizer.vocabulary == tokenizer.vocabulary
    np.testing.assert_allclose(loaded.predict(TEXTS, verbose=0), probabilities, atol=1e-5)


@pytest.mark.tf_only
@pytest.mark.parametrize("inputs", ["dataset", "arrays"])
def test_tensorflow_fit_traces_the_train_step_once_and_trains_as_keras_does(tokenizer, reviews, inputs):
    """Keras's TF trainer creates optimizer and metric variables in the first trace, which makes
    TF trace the step twice; kformer's `fit` creates them first. The training itself is unchanged."""
    texts, labels = reviews

    def fitted(fit):
        keras.utils.set_random_seed(1)
        model = models.text_classifier(preset="imdb_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                       sequence_length=16, preprocessor=TextClassifierPreprocessor(tokenizer, 16))
        model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        step, traces = model.train_step, []
        model.train_step = lambda data: traces.append(1) or step(data)  # runs once per trace
        if inputs == "dataset":
            history = fit(model, model.preprocessor.dataset(texts, labels, batch_size=8), epochs=2, verbose=0)
        else:
            history = fit(model, model.preprocessor.encode(texts), labels, batch_size=8, epochs=2,
                          shuffle=False, verbose=0)
        return history.history["loss"], len(traces)

    (losses, traces), (keras_losses, keras_traces) = fitted(models.Task.fit), fitted(keras.Model.fit)
    assert (traces, keras_traces) == (1, 2)
    np.testing.assert_allclose(losses, keras_losses, rtol=1e-6)


@pytest.mark.tf_only
def test_a_backbone_that_is_no_task_traces_its_train_step_once_too():
    class Projection(models.KformerModel):  # `KformerModel.fit` builds the state; every task inherits it
        def __init__(self, width=4, **kwargs):
            x = keras.Input((width,))
            super().__init__(inputs=x, outputs=keras.layers.Dense(2)(x), **kwargs)
            self.width = width

    model = Projection()
    model.compile(keras.optimizers.Adam(1e-3), "mse", metrics=["mae"])
    step, traces = model.train_step, []
    model.train_step = lambda data: traces.append(1) or step(data)
    model.fit(np.ones((8, 4), "float32"), np.zeros((8, 2), "float32"), batch_size=4, verbose=0)
    assert len(traces) == 1


def test_translator_translates_strings_and_reloads(tokenizer, tmp_path):
    model = models.translator(preset="transformer_tiny", vocabulary_size=tokenizer.vocabulary_size,
                              preprocessor=TranslatorPreprocessor(tokenizer, tokenizer, 12))
    model.compile(keras.optimizers.Adam(1e-3), models.LabelSmoothedCrossEntropy(0.1))
    history = model.fit(["How are you?", "I am fine."] * 4, ["¿Cómo estás?", "Estoy bien."] * 4,
                        batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    greedy = model.translate(["How are you?", "Hello."], max_length=6)  # one compiled loop per setting
    assert len(greedy) == 2 and all(isinstance(t, str) for t in greedy)
    assert model.translate("How are you?", max_length=6) == greedy[0]
    texts = ["Here is a longer sentence to translate.", "Hello.", "How are you?"]  # batched by length, in order
    assert model.translate(texts, max_length=6, batch_size=2) == [model.translate(t, max_length=6) for t in texts]
    source = model.preprocessor.encode(["How are you?"])["encoder_token_ids"]
    ids = model.generate(source, max_length=6, start_token_id=model.preprocessor.start_token_id,
                         end_token_id=model.preprocessor.end_token_id,
                         max_word_pieces=TRANSLATE_MAX_WORD_PIECES,
                         no_repeat_ngram_size=TRANSLATE_NO_REPEAT_NGRAM_SIZE)  # translate's default guards
    assert model.preprocessor.detokenize(ids) == greedy[:1]
    model.save(tmp_path / "translator.keras")
    loaded = models.load(tmp_path / "translator.keras")
    assert loaded.preprocessor.target_tokenizer is loaded.preprocessor.source_tokenizer  # shared, saved once
    assert loaded.preprocessor.source_tokenizer.vocabulary == tokenizer.vocabulary
    inputs, _ = model.preprocessor(["How are you?"], ["¿Cómo estás?"])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(inputs)),
                               keras.ops.convert_to_numpy(model(inputs)), atol=1e-5)


def test_bert_tasks_share_a_backbone_and_take_raw_text(tokenizer, reviews, tmp_path):
    backbone = models.bert(preset="bert_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                sequence_length=24, hidden_dim=16, intermediate_dim=32)
    pretrainer = models.bert_pretrainer(
        backbone, preprocessor=BertPreprocessor(tokenizer, 24, mask_positions=True))
    answers = pretrainer.fill_mask(TEXTS, top_k=3)
    assert [len(a) for a in answers] == [0, 0, 0, 2]
    assert all(len(candidates) == 3 and candidates[0]["score"] >= candidates[-1]["score"]
               for candidates in answers[3])
    classifier = models.bert_text_classifier(backbone, 2, preprocessor=BertPreprocessor(tokenizer, 24))
    assert classifier.backbone is pretrainer.backbone is backbone
    classifier.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    classifier.fit(*reviews, batch_size=8, epochs=1, verbose=0)
    probabilities = classifier.predict(TEXTS, verbose=0)
    tuned = pretrainer.fill_mask(TEXTS[3], top_k=3)  # fine-tuning moved the shared backbone
    assert tuned != answers[3]
    pretrainer.save(tmp_path / "pretrainer.keras")
    classifier.save(tmp_path / "classifier.keras")
    reloaded = models.load(tmp_path / "pretrainer.keras").fill_mask(TEXTS[3], top_k=3)
    assert [[c["token"] for c in m] for m in reloaded] == [[c["token"] for c in m] for m in tuned]
    np.testing.assert_allclose(models.load(tmp_path / "classifier.keras").predict(TEXTS, verbose=0),
                               probabilities, atol=1e-5)


def test_vit_predicts_images_of_any_size(tmp_path):
    model = models.vit(preset="vit_tiny", num_layers=1, class_names=[str(d) for d in range(10)],
                       preprocessor=ImageClassifierPreprocessor(28, 1))
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, (3, 40, 36, 3), dtype=np.uint8)
    probabilities = model.predict(batch, verbose=0)
    assert probabilities.shape == (3, 10)
    ragged = [batch[0], rng.integers(0, 256, (28, 28, 1), dtype=np.uint8)]
    np.testing.assert_allclose(model.predict(ragged, verbose=0)[0], probabilities[0], atol=1e-5)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert np.isfinite(model.fit(batch, np.array([1, 2, 3]), epochs=1, verbose=0).history["loss"][0])
    model.save(tmp_path / "vit.keras")
    assert models.load(tmp_path / "vit.keras").predict_labels(batch) == model.predict_labels(batch)


@pytest.mark.only_backend("torch")  # argument checks and config merging: no backend code of its own
def test_raw_input_without_a_preprocessor_is_a_clear_error():
    model = models.translator(preset="transformer_tiny", vocabulary_size=50)
    with pytest.raises(ValueError, match=r"`translate` needs a preprocessor"):
        model.translate(["Hello."])
    with pytest.raises(ValueError, match="`preprocessor` must be a kformer preprocessor"):
        models.translator(preset="transformer_tiny", vocabulary_size=50, preprocessor="a tokenizer")


@pytest.mark.only_backend("torch")  # argument checks and config merging: no backend code of its own
def test_preprocessor_must_fit_the_model(tokenizer):
    small = models.text_classifier(preset="imdb_tiny", vocabulary_size=50, sequence_length=16)
    with pytest.raises(ValueError, match=r"`tokenizer` has \d+ tokens, but the model's vocabulary holds 50"):
        small.validate_preprocessor(TextClassifierPreprocessor(tokenizer, 16))
    learned = models.translator(preset="transformer_tiny", vocabulary_size=300, position="learned",
                                sequence_length=8)
    with pytest.raises(ValueError, match="at most the model's sequence_length=8"):
        learned.validate_preprocessor(TranslatorPreprocessor(tokenizer, tokenizer, 12))


# One override each builder's presets carry, spelled every way a user may write it (on the
# smallest preset of each builder).
PRESETS = {"translator": "transformer_tiny", "text_classifier": "imdb_tiny", "bert": "bert_tiny",
           "vit": "vit_tiny"}
OVERRIDES = {
    "translator": [({"encoder_vocabulary_size": 50, "decoder_vocabulary_size": 60}, (50, 60)),
                   ({"encoder_vocabulary_size": 50}, (50, 8000)),
                   ({"vocabulary_size": 70}, (70, 70))],
    "text_classifier": [({"vocabulary_size": 90, "sequence_length": 12}, (90, 12))],
    "bert": [({"vocabulary_size": 90, "sequence_length": 12}, (90, 12)),
             ({"vocabulary_size": 90, "max_sequence_length": 12}, (90, 12))],
    "vit": [({"num_classes": 3, "image_size": 14}, (3, 14)), ({"patch_size": 4, "image_size": 12}, (10, 12))],
}


def _observed(builder_name, model):
    if builder_name == "translator":
        return model.encoder_embedding.vocabulary_size, model.decoder_embedding.vocabulary_size
    if builder_name == "vit":
        return model.num_classes, model.image_size
    return model.vocabulary_size, model.sequence_length


@pytest.mark.only_backend("torch")  # argument checks and config merging: no backend code of its own
@pytest.mark.parametrize("builder_name", sorted(OVERRIDES))
def test_preset_overrides_merge_however_spelled(builder_name):
    builder = getattr(models, builder_name)
    preset = PRESETS[builder_name]
    for overrides, expected in OVERRIDES[builder_name]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            through_builder = builder(preset=preset, **overrides)
            through_build = models.build(preset, **overrides)
        assert _observed(builder_name, through_builder) == _observed(builder_name, through_build) == expected
        assert through_builder.name == preset
        renamed = [w for w in caught if issubclass(w.category, DeprecationWarning)]
        assert bool(renamed) == ("max_sequence_length" in overrides)
    if builder_name == "bert":
        with pytest.raises(ValueError, match="old name of `sequence_length`"):
            builder(preset=preset, sequence_length=8, max_sequence_length=8)


@pytest.mark.only_backend("torch")  # argument checks and config merging: no backend code of its own
def test_no_code_finds_a_model_part_by_name():
    pattern = re.compile(r"get_layer\(")
    hits = [f"{path}:{n}" for folder in ("kformer", "recipes") for path in (ROOT / folder).rglob("*.py")
            for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


@pytest.mark.only_backend("torch")  # argument checks and config merging: no backend code of its own
def test_builders_read_vocabulary_sizes_from_the_preprocessor_unless_given():
    from kformer.data.preprocessors import TextClassifierPreprocessor, TranslatorPreprocessor
    from kformer.data.wordpiece import WordPieceTokenizer

    from kformer.data.wordpiece import SPECIAL_TOKENS

    source = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["a", "b"])
    target = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["x", "y", "z"])
    model = models.translator(preset="transformer_tiny", preprocessor=TranslatorPreprocessor(source, target, 8))
    assert (model.encoder_embedding.vocabulary_size, model.decoder_embedding.vocabulary_size) == (9, 10)
    shared = models.translator(preset="transformer_tiny", preprocessor=TranslatorPreprocessor(source, source, 8))
    assert shared.encoder_embedding is shared.decoder_embedding
    assert shared.encoder_embedding.vocabulary_size == 9
    with pytest.raises(ValueError, match="tokenizer"):  # a size the caller gives wins, and is checked
        models.translator(preset="transformer_tiny", vocabulary_size=5,
                          preprocessor=TranslatorPreprocessor(source, target, 8))
    classifier = models.text_classifier(preset="imdb_tiny", sequence_length=8,
                                        preprocessor=TextClassifierPreprocessor(target, 8))
    assert classifier.token_embedding.vocabulary_size == 10
