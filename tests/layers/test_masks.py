import numpy as np

from kformer.layers import masks
from tests.helpers import to_numpy


def test_causal_mask_with_offset():
    np.testing.assert_array_equal(to_numpy(masks.causal_mask(3, 3))[0], np.tril(np.ones((3, 3), bool)))
    offset = to_numpy(masks.causal_mask(2, 5, start_index=2))[0]
    np.testing.assert_array_equal(offset, [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])


def test_merge_masks_ands_everything_given():
    query = np.array([[True, True, False]])
    key = np.array([[True, False, True, True]])
    explicit = np.ones((1, 3, 4), bool)
    explicit[0, 0, 0] = False
    merged = to_numpy(masks.merge_masks(query, key, explicit, masks.causal_mask(3, 4)))
    expected = query[:, :, None] & key[:, None, :] & explicit & np.tril(np.ones((3, 4), bool))
    np.testing.assert_array_equal(merged, expected)
    assert masks.merge_masks() is None


def test_allow_empty_rows_opens_only_empty_rows():
    mask = np.array([[[True, False], [False, False]]])
    np.testing.assert_array_equal(to_numpy(masks.allow_empty_rows(mask)), [[[True, False], [True, True]]])


def test_mask_scores_sets_masked_keys_in_float32_and_broadcasts():
    scores = np.arange(12, dtype="float16").reshape(1, 2, 2, 3)  # (batch, heads, q_len, k_len)
    keys = np.array([[[True, False, True], [False, True, True]]])[:, None]  # (batch, 1, q_len, k_len)
    got = to_numpy(masks.mask_scores(scores, keys))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.where(keys, scores.astype("float32"), -1e9))
    np.testing.assert_array_equal(to_numpy(masks.mask_scores(scores, None)), scores.astype("float32"))
