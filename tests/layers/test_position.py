import numpy as np
import pytest
from keras import ops

from kformer.layers import PositionEmbedding, RotaryEmbedding, SinusoidalPositionEncoding
from tests.helpers import run_layer_test, to_numpy


def paper_sinusoid(length, dim, start=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    pe = np.zeros((length, dim))
    for pos in range(start, start + length):
        for i in range(0, dim, 2):
            pe[pos - start, i] = np.sin(pos / 10000 ** (i / dim))
            if i + 1 < dim:
                pe[pos - start, i + 1] = np.cos(pos / 10000 ** (i / dim))
    return pe


@pytest.mark.parametrize("length, dim, start", [(7, 16, 0), (50, 33, 0), (5, 8, 123)])
def test_sinusoid_matches_the_paper(length, dim, start):
    layer = SinusoidalPositionEncoding()
    out = to_numpy(layer(np.zeros((2, length, dim), "float32"), start_index=start))
    np.testing.assert_allclose(out[0], paper_sinusoid(length, dim, start), atol=2e-5)
    np.testing.assert_allclose(out[1], out[0])


def test_sinusoid_layer(tmp_path):
    run_layer_test(SinusoidalPositionEncoding, {}, np.zeros((2, 6, 8), "float32"), (2, 6, 8),
                   run_fit=False, tmp_path=tmp_path)


def test_sinusoid_rejects_bad_arguments():
    with pytest.raises(ValueError, match="max_wavelength=0"):
        SinusoidalPositionEncoding(max_wavelength=0)
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 6\)"):
        SinusoidalPositionEncoding()(np.zeros((2, 6), "float32"))


def test_position_embedding_layer(tmp_path):
    run_layer_test(PositionEmbedding, {"sequence_length": 10},
                   np.random.rand(2, 6, 8).astype("float32"), (2, 6, 8), tmp_path=tmp_path)


def test_position_embedding_start_index_slices_rows():
    layer = PositionEmbedding(10)
    full = to_numpy(layer(np.zeros((1, 10, 4), "float32")))
    part = to_numpy(layer(np.zeros((1, 3, 4), "float32"), start_index=5))
    np.testing.assert_allclose(part[0], full[0, 5:8])
    with pytest.raises(ValueError, match="sequence_length=10"):
        layer(np.zeros((1, 3, 4), "float32"), start_index=8)
    with pytest.raises(ValueError, match="sequence_length=0"):
        PositionEmbedding(0)


def test_rotary_layer(tmp_path):
    run_layer_test(RotaryEmbedding, {}, np.random.rand(2, 6, 2, 8).astype("float32"), (2, 6, 2, 8),
                   run_fit=False, tmp_path=tmp_path)


def test_rotary_preserves_norms_and_depends_on_relative_position():
    layer = RotaryEmbedding()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 9, 2, 16)).astype("float32")
    rotated = to_numpy(layer(x))
    np.testing.assert_allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)
    q, k = rng.normal(size=(1, 1, 16)).astype("float32"), rng.normal(size=(1, 1, 16)).astype("float32")

    def score(m, n):
        qm = to_numpy(layer(q, start_index=m))
        kn = to_numpy(layer(k, start_index=n))
        return float((qm * kn).sum())

    np.testing.assert_allclose(score(7, 3), score(104, 100), rtol=1e-4)
    np.testing.assert_allclose(score(0, 5), score(20, 25), rtol=1e-4)
    assert abs(score(7, 3) - score(3, 7)) > 1e-3
    np.testing.assert_allclose(to_numpy(layer(q, start_index=0)), q, atol=1e-6)


def test_rotary_rejects_odd_dim():
    with pytest.raises(ValueError, match=r"inputs.shape=\(1, 4, 5\)"):
        RotaryEmbedding()(ops.zeros((1, 4, 5)))
