import keras
import numpy as np
import pytest

from kformer.models import LabelSmoothedCrossEntropy, TransformerSchedule
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
