import numpy as np

from kformer.layers import ClassTokenPooling
from tests.helpers import run_layer_test, to_numpy

X = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")


def test_class_token_pooling(tmp_path):
    run_layer_test(ClassTokenPooling, {}, X, (2, 8), run_fit=False, tmp_path=tmp_path)
    np.testing.assert_allclose(to_numpy(ClassTokenPooling()(X)), X[:, 0])
