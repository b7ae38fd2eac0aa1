"""`kformer.generation.batching` and `kformer.models.postprocess`: the same answers on numpy (any backend)
and, on TensorFlow, inside a `tf.function` (the exported graph)."""

import keras
import numpy as np
import pytest
from keras import ops

from kformer.generation import batching
from kformer.models import postprocess


def _bucket(rows, multiple=16):  # the reference: next power of two up to 16, then multiples of 16
    return 1 << max(rows - 1, 0).bit_length() if rows <= multiple else -(-rows // multiple) * multiple


IDS = np.array([[5, 6, 0, 0, 0], [7, 0, 0, 0, 0], [8, 9, 4, 0, 0]], "int32")


def _numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def test_batch_bucket_matches_reference():
    assert [int(batching.batch_bucket(n)) for n in range(0, 80)] == [_bucket(n) for n in range(0, 80)]


def test_repeat_last_row_used_width_pad_width_trim_and_strip():
    np.testing.assert_array_equal(_numpy(batching.repeat_last_row(IDS, 5)), IDS[[0, 1, 2, 2, 2]])
    np.testing.assert_array_equal(_numpy(batching.repeat_last_row(IDS, 2)), IDS)
    assert int(batching.used_width(IDS)) == 3
    assert int(batching.used_width(np.zeros((2, 4), "int32"))) == 1
    assert _numpy(batching.pad_width(IDS)).shape == (3, 16)
    assert _numpy(batching.pad_width(IDS, 4)).shape == (3, 5)  # never narrower than the input
    np.testing.assert_array_equal(_numpy(batching.pad_width(IDS))[:, :5], IDS)
    np.testing.assert_array_equal(_numpy(batching.trim_width(IDS)), IDS[:, :3])
    np.testing.assert_array_equal(_numpy(batching.strip_prompt(np.array([[1, 5, 6, 7]]), np.array([[1, 5]]))),
                                  [[0, 0, 6, 7]])


def test_classify_and_top_masked_tokens():
    logits = np.array([[0.0, 2.0, 1.0], [3.0, -1.0, 0.0]], "float32")
    label_id, probabilities = postprocess.classify(logits)
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(_numpy(probabilities), exp / exp.sum(-1, keepdims=True), rtol=1e-6)
    assert _numpy(label_id).tolist() == [1, 0]
    out = postprocess.top_masked_tokens(np.array([[[0.0, 1.0, 3.0], [0.0, 0.0, 0.0]]]), np.array([[1, 4, 2]]),
                                        np.array([[1, 0]]), mask_id=4, top_k=2)
    assert _numpy(out["token_ids"]).tolist() == [[[2, 1], [-1, -1]]]
    assert _numpy(out["num_masks"]).tolist() == [1]
    assert _numpy(out["scores"])[0, 1].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match=r"`top_k` must be an int in \[1, 10\]. Received: top_k=0"):
        postprocess.check_top_k(0, 10)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the exported graph: TensorFlow backend")
def test_same_in_a_tf_function():
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
    def graph(ids):
        rows = tf.shape(ids)[0]
        return (batching.batch_bucket(rows), batching.repeat_last_row(ids, batching.batch_bucket(rows)),
                batching.used_width(ids), batching.pad_width(ids), batching.trim_width(ids),
                batching.strip_prompt(ids, ids[:, :1]))

    for ids in (IDS, IDS[:1], np.zeros((17, 3), "int32")):
        got = [np.asarray(t) for t in graph(tf.constant(ids))]
        rows = len(ids)
        eager = [batching.batch_bucket(rows), batching.repeat_last_row(ids, batching.batch_bucket(rows)),
                 batching.used_width(ids), batching.pad_width(ids), batching.trim_width(ids),
                 batching.strip_prompt(ids, ids[:, :1])]
        for a, b in zip(got, eager):
            np.testing.assert_array_equal(a, _numpy(b))
