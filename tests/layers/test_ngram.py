import numpy as np
import pytest

from kformer.layers import HashedNgramEmbedding
from kformer.layers.ngram import ngram_hashes
from tests.helpers import run_layer_test, to_numpy

IDS = np.array([[5, 3, 9, 2, 7, 1], [4, 8, 6, 0, 0, 0]], "int32")


def _reference_bigrams(ids, num_buckets, prime=46337):
    """The documented bigram hash, in Python integers (no overflow)."""
    out = np.zeros_like(ids)
    for row, col in np.ndindex(*ids.shape):
        a, b = (int(ids[row, col - 1]) if col else 0), int(ids[row, col])
        if a and b:
            out[row, col] = ((a % prime) * prime + b % prime) % (num_buckets - 1) + 1
    return out


def test_layer(tmp_path):
    run_layer_test(HashedNgramEmbedding, {"num_buckets": 64, "hidden_dim": 6, "mask_zero": True}, IDS, (2, 6, 6),
                   causal=True, tmp_path=tmp_path)


def test_mask_zero_marks_padding():
    np.testing.assert_array_equal(to_numpy(HashedNgramEmbedding(8, 4, mask_zero=True).compute_mask(IDS)), IDS != 0)
    assert HashedNgramEmbedding(8, 4).compute_mask(IDS) is None


def test_bigram_hashes_match_the_formula_for_large_ids():
    # Ids near 46337 and beyond: the int32 arithmetic must not overflow on any backend.
    ids = np.array([[46336, 46336, 46337, 99999, 1, 0, 7]], "int32")
    for buckets in (2, 1000, 2**18):
        np.testing.assert_array_equal(to_numpy(ngram_hashes(ids, buckets)), _reference_bigrams(ids, buckets))


def test_embedding_is_the_table_row_of_each_bigram_and_zero_without_one():
    layer = HashedNgramEmbedding(1000, 4)
    out = to_numpy(layer(IDS))
    table = to_numpy(layer.table.embeddings)
    buckets = _reference_bigrams(IDS, 1000)
    np.testing.assert_allclose(out, table[buckets] * (buckets > 0)[..., None], atol=1e-6)
    assert not out[:, 0].any() and not out[1, 3:].any()  # first token, padding


def test_trigrams_depend_on_all_three_tokens():
    base = to_numpy(ngram_hashes(np.array([[5, 6, 7]]), 2**18, ngram_size=3))
    assert base[0, :2].tolist() == [0, 0] and base[0, 2] > 0
    for changed in ([9, 6, 7], [5, 9, 7], [5, 6, 9]):
        assert to_numpy(ngram_hashes(np.array([changed]), 2**18, ngram_size=3))[0, 2] != base[0, 2], changed


@pytest.mark.parametrize("kwargs, message", [
    ({"num_buckets": 1, "hidden_dim": 4}, "num_buckets=1"),
    ({"num_buckets": 0, "hidden_dim": 4}, "num_buckets=0"),
    ({"num_buckets": 8, "hidden_dim": 4, "ngram_size": 1}, "ngram_size=1"),
    ({"num_buckets": 8, "hidden_dim": 2.5}, "hidden_dim=2.5"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HashedNgramEmbedding(**kwargs)


def test_rank_is_checked():
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 3, 4\)"):
        HashedNgramEmbedding(8, 4)(np.zeros((2, 3, 4), "int32"))
