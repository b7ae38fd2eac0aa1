import keras
import numpy as np
import pytest

from kformer.layers.linear import linear, reshape
from tests.helpers import to_numpy

RNG = np.random.default_rng(0)
X, KERNEL, BIAS = (RNG.normal(size=s).astype("float32") for s in ((2, 3, 4), (4, 5), (5,)))


@pytest.mark.parametrize("bias", [BIAS, None])
def test_linear_is_x_times_kernel_plus_bias(bias):
    want = X @ KERNEL + (0 if bias is None else bias)
    np.testing.assert_allclose(to_numpy(linear(X, KERNEL, bias)), want, atol=1e-5)
    np.testing.assert_allclose(to_numpy(linear(X[0], KERNEL, bias)), want[0], atol=1e-5)  # any rank >= 2


def test_reshape_gives_ops_reshape_numbers_for_tensors_arrays_and_symbolic_inputs():
    tensor = keras.ops.convert_to_tensor(X)
    for x in (X, tensor):
        got = to_numpy(reshape(x, (-1, 3, 2, 2)))
        np.testing.assert_array_equal(got, X.reshape(-1, 3, 2, 2))
    symbolic = keras.KerasTensor((None, 3, 4))
    assert tuple(reshape(symbolic, (-1, 12)).shape) == (None, 12)
