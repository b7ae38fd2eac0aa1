"""Issue 60: the translator's shared vocabulary, checkpoint averaging and out-of-distribution scores."""

import json

import keras
import numpy as np
import pytest

from kformer import models
from kformer.data import translation
from kformer.data.preprocessors import TranslatorPreprocessor
from kformer.data.wordpiece import WordPieceTokenizer
from recipes import common, train_translator


def embedding_tables(model):
    return [w for w in model.weights if "embedding" in w.path and len(w.shape) == 2
            and w.shape[0] == model.decoder_embedding.vocabulary_size]


def test_shared_vocabulary_builds_one_tied_table():
    sources, targets = translation.load_split("train", max_examples=200)
    tokenizer = WordPieceTokenizer.learn(sources + targets, vocabulary_size=300)
    preprocessor = TranslatorPreprocessor(tokenizer, tokenizer, 16)
    model = models.build("transformer_tiny", preprocessor=preprocessor, vocabulary_size=tokenizer.vocabulary_size,
                         sequence_length=16)
    assert model.encoder_embedding is model.decoder_embedding and model.output_projection is None  # tied
    assert len(embedding_tables(model)) == 1  # one token table: encoder, decoder and pre-softmax projection
    separate = models.build("transformer_tiny", encoder_vocabulary_size=tokenizer.vocabulary_size,
                            decoder_vocabulary_size=tokenizer.vocabulary_size, sequence_length=16)
    assert len(embedding_tables(separate)) == 2
    assert model.count_params() < separate.count_params()
    assert {"the", "el", "tom"} <= set(tokenizer.vocabulary)  # both languages' words; a name has one id


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.weights = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append([np.array(keras.ops.convert_to_numpy(w)) for w in self.model.weights])


def tiny_fit(epochs, callbacks, initial_epoch=0, model=None):
    keras.utils.set_random_seed(0)
    if model is None:
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.BatchNormalization(),
                                  keras.layers.Dense(1)])
        model.compile("adam", "mse")
    x, y = np.random.default_rng(0).normal(size=(32, 3)), np.random.default_rng(1).normal(size=(32, 1))
    model.fit(x, y, batch_size=8, epochs=epochs, initial_epoch=initial_epoch, verbose=0, callbacks=callbacks)
    return model


def test_average_last_epochs_is_the_mean_of_the_last_epochs(tmp_path):
    recorder = Recorder()
    average = common.AverageLastEpochs(3, 5, tmp_path / "sums.npz")
    best = keras.callbacks.EarlyStopping(monitor="loss", patience=5, restore_best_weights=True)
    model = tiny_fit(5, [recorder, best, average])  # as in `common.fit`: the average replaces the best epoch's
    assert average.averaged_epochs == [3, 4, 5]
    assert any("moving" in w.path for w in model.non_trainable_weights)  # BatchNormalization's are averaged too
    for i, weight in enumerate(model.weights):
        expected = np.mean([epoch[i] for epoch in recorder.weights[2:]], axis=0)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(weight), expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(keras.ops.convert_to_numpy(model.weights[0]), recorder.weights[-1][0])

    # a killed run resumed from epoch 4: the sums of epochs 3 and 4 are read back from the file
    recorder, first = Recorder(), common.AverageLastEpochs(3, 5, tmp_path / "resumed.npz")
    model = tiny_fit(4, [recorder, first])
    resumed = common.AverageLastEpochs(3, 5, tmp_path / "resumed.npz")
    last = Recorder()
    model = tiny_fit(5, [last, resumed], initial_epoch=4, model=model)
    assert resumed.averaged_epochs == [3, 4, 5]
    expected = np.mean([recorder.weights[2][0], recorder.weights[3][0], last.weights[0][0]], axis=0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model.weights[0]), expected, rtol=1e-6, atol=1e-7)

    early = common.AverageLastEpochs(2, 10)  # training ends before the window: the weights are left alone
    recorder = Recorder()
    model = tiny_fit(3, [recorder, early])
    assert early.averaged_epochs == []
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.weights[0]), recorder.weights[-1][0])
    with pytest.raises(ValueError, match="`n` must be >= 1"):
        common.AverageLastEpochs(0, 5)


@pytest.mark.only_backend("tensorflow")  # arguments only
def test_flags_defaults_and_bad_values(capsys):
    args = train_translator.parse_args([])
    assert (args.vocabulary_size, args.shared_vocabulary, args.average_last) == (8000, False, 0)
    assert (args.ood_max_words, args.ood_min_count, args.max_ood_examples) == (12, 2, 1000)
    assert (args.num_beams, args.no_repeat_ngram_size, args.max_length_ratio) == (4, 3, 1.5)  # a --preset's
    args = train_translator.parse_args(["--from-pretrained=x", "--no-repeat-ngram-size=2"])
    assert (args.num_beams, args.no_repeat_ngram_size, args.max_length_ratio) == (None, 2, None)  # the checkpoint's
    args = train_translator.parse_args(["--shared-vocabulary", "--dataset=multi30k"])
    assert (args.vocabulary_size, args.ood_max_words) == (16000, 20)
    assert train_translator.parse_args(["--shared-vocabulary", "--vocabulary-size=500"]).vocabulary_size == 500
    for flag in ("--average-last=-1", "--ood-max-words=x", "--ood-min-count=-2", "--max-ood-examples=0"):
        with pytest.raises(SystemExit) as exit_info:
            train_translator.parse_args([flag])
        assert exit_info.value.code == 2 and flag.split("=")[0] in capsys.readouterr().err


@pytest.mark.only_backend("tensorflow")  # arguments only
def test_quality_checks():
    sources = ["I have 2 cats and 10 dogs.", "Go.", "It costs 5 euros."]
    translations = ["Tengo 2 gatos y 10 perros.", "Vetetetetetetetete.", "Cuesta 50 euros."]
    assert train_translator.digit_copies(sources, translations) == (0.5, 2)  # "5" is not "50"
    assert train_translator.digit_copies(["Hello."], ["Hola."]) == (None, 0)
    assert train_translator.long_word_rate(sources, translations) == round(1 / 3, 4)  # 18 letters > 3 x 2


@pytest.mark.only_backend("torch")  # end to end (28 s; JAX 85 s, TensorFlow 33 s): its pieces run on all three
def test_translator_recipe_reports_ood_scores(tmp_path):
    run_dir = train_translator.main([
        "--epochs=2", "--max-examples=32", "--max-test-examples=8", "--verbose=0", "--preset=transformer_tiny",
        "--vocabulary-size=300", "--sequence-length=16", "--batch-size=16", "--num-beams=1", "--shared-vocabulary",
        "--average-last=2", "--patience=5", "--no-export", "--no-plots", f"--output-dir={tmp_path}"])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in ("test_bleu", "ood_length_bleu", "ood_rare_word_bleu"):  # the same sacrebleu corpus BLEU
        assert 0.0 <= metrics[key] <= 100.0, key
    assert 0.0 <= metrics["long_word_rate"] <= 1.0 and metrics["digit_sources"] >= 0
    assert metrics["train_examples"] == 32 and metrics["test_examples"] == 8
    assert metrics["ood_splits"]["held_out"] == {"length": 469, "rare_word": 781}  # of the bundled 20,000
    assert metrics["ood_splits"]["scored"] == {"length": 8, "rare_word": 8}
    assert metrics["ood_splits"]["train_pairs_before"] == 20000
    assert metrics["averaged_epochs"] == [1, 2] and metrics["shared_vocabulary"] is True
    assert np.isfinite(metrics["final_val_loss"])
    assert "ood_length_bleu" in (run_dir / "README.md").read_text()
    model = models.load(run_dir)
    assert model.encoder_embedding is model.decoder_embedding and len(embedding_tables(model)) == 1
    assert model.preprocessor.source_tokenizer.vocabulary_size == model.decoder_embedding.vocabulary_size
