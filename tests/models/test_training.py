import keras
import numpy as np
import pytest

from kformer import models
from kformer.models import LabelSmoothedCrossEntropy, TransformerSchedule
from kformer.training.losses import sparse_accuracy
from tests.helpers import to_numpy


def test_label_smoothing_matches_the_formula_and_ignores_padding():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 6)).astype("float32")
    labels = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    target = np.full((2, 4, 6), 0.1 / 6) + 0.9 * np.eye(6)[labels]
    per_token = -(target * log_probs).sum(-1)
    expected = per_token[labels != 0].mean()
    got = float(to_numpy(LabelSmoothedCrossEntropy(0.1)(labels, logits)))
    assert got == pytest.approx(expected, rel=1e-5)
    plain = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    ce = to_numpy(plain(labels, logits))[labels != 0].mean()
    assert float(to_numpy(LabelSmoothedCrossEntropy(0.0)(labels, logits))) == pytest.approx(ce, rel=1e-5)
    with pytest.raises(ValueError, match="epsilon=1.0"):
        LabelSmoothedCrossEntropy(1.0)


def test_warmup_schedule_is_the_paper_formula():
    schedule = TransformerSchedule(512, warmup_steps=4000)
    for step in (0, 10, 3999, 4000, 100000):
        n = step + 1
        expected = 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
        assert float(to_numpy(schedule(step))) == pytest.approx(expected, rel=1e-5)
    peak = max(float(to_numpy(schedule(s))) for s in range(3990, 4010))
    assert peak == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-3)
    clone = TransformerSchedule.from_config(schedule.get_config())
    assert clone.get_config() == schedule.get_config()
    optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored.learning_rate, (TransformerSchedule, keras.Variable)) or restored
    with pytest.raises(ValueError, match="warmup_steps=0"):
        TransformerSchedule(512, warmup_steps=0)


def _logits_and_targets():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(3, 5, 7)).astype("float32")
    logits[0, 0] = [2.0, 0.0, 2.0, 1.0, 2.0, 0.0, 0.0]  # a tie: argmax is the first of the tied classes
    targets = rng.integers(0, 7, size=(3, 5))
    targets[0, 0] = 2  # tied with class 0, which argmax picks: wrong
    targets[0, 1] = int(np.argmax(logits[0, 1]))
    return logits, targets


@pytest.mark.parametrize("trailing_one", [False, True])
def test_sparse_cross_entropy_and_accuracy_equal_keras(trailing_one):
    logits, targets = _logits_and_targets()
    y = targets[..., None] if trailing_one else targets
    weights = np.random.default_rng(2).random((3, 5)).astype("float32")
    ours = models.SparseCrossEntropy(reduction=None)(y, logits)
    theirs = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)(y, logits)
    np.testing.assert_allclose(to_numpy(ours), to_numpy(theirs), rtol=1e-5, atol=1e-6)
    mean = models.SparseCrossEntropy()(y, logits, sample_weight=weights)
    keras_mean = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits, sample_weight=weights)
    assert float(to_numpy(mean)) == pytest.approx(float(to_numpy(keras_mean)), rel=1e-5)
    expected = (np.argmax(logits, -1) == targets).astype("float32")
    assert expected[0, 0] == 0 and expected[0, 1] == 1
    np.testing.assert_array_equal(to_numpy(sparse_accuracy(y, logits)), expected)
    for metric in (models.SparseAccuracy(), keras.metrics.SparseCategoricalAccuracy()):
        metric.update_state(y, logits, sample_weight=weights)
        assert float(to_numpy(metric.result())) == pytest.approx(float((expected * weights).sum() / weights.sum()))


def test_sparse_accuracy_counts_a_row_with_nan_wrong_on_jax():
    logits = np.array([[0.0, np.nan, 1.0], [np.nan, 0.0, 0.0], [0.0, 3.0, 1.0]], "float32")
    got = to_numpy(sparse_accuracy(np.array([2, 0, 1]), logits))
    if keras.backend.backend() == "jax":
        np.testing.assert_array_equal(got, [0.0, 0.0, 1.0])
    assert got[2] == 1.0


def test_sparse_cross_entropy_trains_as_keras_does():
    x = np.random.default_rng(3).normal(size=(16, 4, 8)).astype("float32")
    y = np.random.default_rng(4).integers(0, 11, size=(16, 4))
    trained = []
    for loss, metric in ((models.SparseCrossEntropy(), models.SparseAccuracy()),
                         (keras.losses.SparseCategoricalCrossentropy(from_logits=True), "accuracy")):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4, 8)), keras.layers.Dense(11)])
        model.compile(keras.optimizers.SGD(0.5), loss, metrics=[metric])
        history = model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False).history
        trained.append((model.get_weights(), history))
    (ours, ours_history), (theirs, theirs_history) = trained
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours_history["loss"], theirs_history["loss"], rtol=1e-5)
    assert ours_history["accuracy"] == pytest.approx(theirs_history["accuracy"])


def test_sparse_loss_and_metric_survive_saving(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5)])
    model.compile("sgd", models.SparseCrossEntropy(), metrics=[models.SparseAccuracy()])
    model.save(tmp_path / "m.keras")
    restored = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(restored.loss, models.SparseCrossEntropy)
    x, y = np.ones((4, 3), "float32"), np.array([0, 1, 2, 3])
    np.testing.assert_allclose(restored.evaluate(x, y, verbose=0), model.evaluate(x, y, verbose=0), rtol=1e-6)
    assert models.SparseAccuracy.from_config(models.SparseAccuracy(name="acc").get_config()).name == "acc"
