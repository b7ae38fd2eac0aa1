import contextlib

import keras
import numpy as np
import pytest
from keras import ops

from kformer.kernels.slices import slice_rows, traced_for_xla, write_slice

CASES = [  # (inputs shape, start, updates shape): a decoding buffer, a cache write, a prefill, all of it
    ((2, 5), [0, 3], (2, 1)),
    ((2, 2, 6, 3, 4), [0, 0, 4, 0, 0], (2, 2, 1, 3, 4)),
    ((2, 2, 6, 3, 4), [0, 0, 0, 0, 0], (2, 2, 3, 3, 4)),
    ((1, 2, 6, 3, 4), [0, 1, 2, 0, 0], (1, 1, 4, 3, 4)),
    ((3, 4), [0, 0], (3, 4)),
]


def expected(inputs, start, updates):
    out = inputs.copy()
    out[tuple(slice(s, s + n) for s, n in zip(start, updates.shape))] = updates
    return out


@pytest.mark.parametrize("shape, start, update_shape", CASES)
def test_writes_what_slice_update_writes(shape, start, update_shape):
    rng = np.random.default_rng(0)
    inputs, updates = rng.normal(size=shape).astype("float32"), rng.normal(size=update_shape).astype("float32")
    want = expected(inputs, start, updates)
    np.testing.assert_array_equal(ops.convert_to_numpy(write_slice(inputs, start, updates)), want)
    tensor = ops.convert_to_tensor(inputs)  # a backend tensor: written to a copy, never in place
    written = write_slice(tensor, start, ops.convert_to_tensor(updates))
    np.testing.assert_array_equal(ops.convert_to_numpy(written), want)
    np.testing.assert_array_equal(ops.convert_to_numpy(tensor), inputs)
    traced_start = [s if s == 0 else ops.convert_to_tensor(s, "int32") for s in start]  # a loop index
    np.testing.assert_array_equal(ops.convert_to_numpy(write_slice(inputs, traced_start, updates)), want)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="ops.slice_update is XLA-only on TensorFlow")
@pytest.mark.parametrize("for_xla", [False, True])
def test_tensorflow_graphs_need_xla_only_when_traced_for_it(for_xla):
    """Without XLA, `ops.slice_update` is `XlaDynamicUpdateSlice`, which the stock TF Serving cannot run."""
    import tensorflow as tf

    cache, new = np.zeros((2, 2, 6, 3, 4), "float32"), np.ones((2, 2, 1, 3, 4), "float32")

    def write(index):
        with traced_for_xla() if for_xla else contextlib.nullcontext():
            return write_slice(cache, [0, 0, index, 0, 0], new)

    fn = tf.function(write, jit_compile=for_xla)
    np.testing.assert_array_equal(fn(tf.constant(5)).numpy(), expected(cache, [0, 0, 5, 0, 0], new))
    ops_used = {node.op for node in fn.get_concrete_function(tf.constant(5)).graph.as_graph_def().node}
    xla_ops = {op for op in ops_used if op.startswith("Xla")}
    assert xla_ops == ({"XlaDynamicUpdateSlice"} if for_xla else set())
    assert ("TensorScatterUpdate" in ops_used) != for_xla


@pytest.mark.parametrize("start, length", [(0, 4), (2, 3), (5, 1), (6, 0)])
def test_slice_rows_takes_what_ops_slice_takes(start, length):
    table = np.arange(24, dtype="float32").reshape(6, 4)
    want = table[start:start + length]
    np.testing.assert_array_equal(ops.convert_to_numpy(slice_rows(ops.convert_to_tensor(table), start, length)), want)
    tensor_start = ops.convert_to_tensor(start, "int32")  # a loop index: through `ops.slice`
    if length:
        np.testing.assert_array_equal(ops.convert_to_numpy(slice_rows(table, tensor_start, length)), want)
