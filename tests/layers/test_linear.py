import numpy as np
import pytest

from kformer.layers.linear import linear
from tests.helpers import to_numpy

RNG = np.random.default_rng(0)
X, KERNEL, BIAS = (RNG.normal(size=s).astype("float32") for s in ((2, 3, 4), (4, 5), (5,)))


@pytest.mark.parametrize("bias", [BIAS, None])
def test_linear_is_x_times_kernel_plus_bias(bias):
    want = X @ KERNEL + (0 if bias is None else bias)
    np.testing.assert_allclose(to_numpy(linear(X, KERNEL, bias)), want, atol=1e-5)
    np.testing.assert_allclose(to_numpy(linear(X[0], KERNEL, bias)), want[0], atol=1e-5)  # any rank >= 2
