import numpy as np

from kformer.layers import ClassTokenPooling, MaskedMeanPooling
from tests.helpers import run_layer_test, to_numpy

X = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")


def test_class_token_pooling(tmp_path):
    run_layer_test(ClassTokenPooling, {}, X, (2, 8), run_fit=False, tmp_path=tmp_path)
    np.testing.assert_allclose(to_numpy(ClassTokenPooling()(X)), X[:, 0])


def test_masked_mean_pooling(tmp_path):
    run_layer_test(MaskedMeanPooling, {}, X, (2, 8), run_fit=False, tmp_path=tmp_path)
    mask = np.array([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], bool)
    out = to_numpy(MaskedMeanPooling()(X, mask=mask))
    np.testing.assert_allclose(out[0], X[0, :2].mean(0), rtol=1e-6)
    np.testing.assert_array_equal(out[1], 0.0)  # an all-padding row (empty text) is zeros, not NaN
    np.testing.assert_allclose(to_numpy(MaskedMeanPooling()(X)), X.mean(1), rtol=1e-6)
