import numpy as np
import pytest

from kformer.layers import FeedForward
from tests.helpers import run_layer_test, to_numpy

X = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")


def test_feed_forward_layer(tmp_path):
    run_layer_test(FeedForward, {"intermediate_dim": 16, "activation": "gelu", "dropout": 0.1},
                   X, (2, 5, 8), tmp_path=tmp_path)


def test_feed_forward_is_two_dense_layers():
    layer = FeedForward(16, output_dim=3)
    out = to_numpy(layer(X))
    w1, b1, w2, b2 = (to_numpy(w) for w in layer.weights)
    np.testing.assert_allclose(out, np.maximum(X @ w1 + b1, 0) @ w2 + b2, atol=1e-5)


def test_feed_forward_errors():
    with pytest.raises(ValueError, match="intermediate_dim=0"):
        FeedForward(0)
    with pytest.raises(ValueError, match="dropout=-0.1"):
        FeedForward(4, dropout=-0.1)

