"""`write_slice`: `ops.slice_update` in ops that TensorFlow runs without XLA (and so does TF Serving);
`slice_rows`: rows of a table without `ops.slice`'s dispatch where the bounds are known."""

import contextlib
import contextvars

import keras
from keras import ops

_UNDER_XLA = contextvars.ContextVar("kformer_traced_for_xla", default=False)


@contextlib.contextmanager
def traced_for_xla():
    """Code traced inside will be compiled by XLA (`jit_compile=True`): `write_slice` is then
    `ops.slice_update` on TensorFlow too, which XLA runs faster than the scatter at batch 1
    (the same at batch 16)."""
    token = _UNDER_XLA.set(True)
    try:
        yield
    finally:
        _UNDER_XLA.reset(token)


def write_slice(inputs, start_indices, updates):
    """`updates` written into `inputs` from `start_indices` on, as `ops.slice_update` does.

    On TensorFlow `ops.slice_update` is the `XlaDynamicUpdateSlice` op, which
    has no plain TensorFlow kernel: outside `jit_compile` TensorFlow compiles it
    with XLA on the fly, and the stock TF Serving binary, which turns XLA
    compilation off unless started with `--xla_cpu_compilation_enabled`, fails
    the request ("XLA compilation disabled"). On TensorFlow this writes whole
    slices with `ops.scatter_update` instead (`TensorScatterUpdate`, a core
    op), unless traced inside `traced_for_xla()`. Eager torch with int starts:
    a copy written by indexing. Otherwise `ops.slice_update`.

    Args:
        inputs: tensor `(d0, ..., dn)`.
        start_indices: one int or int scalar tensor per axis.
        updates: tensor `(u0, ..., un)` with `ui <= di`, in `inputs`'s dtype.

    Returns:
        A tensor like `inputs`.

    Example:

    >>> import numpy as np
    >>> tokens = write_slice(np.zeros((2, 4), "int32"), [0, 2], np.array([[7], [8]], "int32"))
    >>> keras.ops.convert_to_numpy(tokens).tolist()
    [[0, 0, 7, 0], [0, 0, 8, 0]]
    """
    if keras.backend.backend() == "torch" and ops.is_tensor(inputs) and all(isinstance(s, int) for s in start_indices):
        # What `ops.slice_update` does with int starts (a copy, written), without its search of the
        # starts for symbolic tensors: 24 us a cache write of one token against 97 us in eager torch.
        updates = ops.convert_to_tensor(updates)
        outputs = inputs.clone()
        outputs[tuple(slice(s, s + n) for s, n in zip(start_indices, updates.shape))] = updates
        return outputs
    if keras.backend.backend() != "tensorflow" or _UNDER_XLA.get():
        return ops.slice_update(inputs, start_indices, updates)
    inputs, updates = ops.convert_to_tensor(inputs), ops.convert_to_tensor(updates)
    at_zero = [isinstance(start, int) and start == 0 for start in start_indices]
    whole = [zero and None not in (d, u) and d == u for zero, d, u in zip(at_zero, inputs.shape, updates.shape)]
    depth = max((axis + 1 for axis, w in enumerate(whole) if not w), default=1)
    shape = ops.shape(updates)[:depth]
    axes = []
    for axis in range(depth):  # the index of every written slice along `axis`, broadcast to `shape`
        index = ops.arange(shape[axis], dtype="int32")
        if not at_zero[axis]:
            index = index + ops.cast(start_indices[axis], "int32")
        view = [1] * depth
        view[axis] = -1
        axes.append(ops.broadcast_to(ops.reshape(index, view), shape))
    return ops.scatter_update(inputs, ops.stack(axes, axis=-1), updates)


def slice_rows(table, start, length):
    """Rows `start .. start + length - 1` of `table` `(rows, ...)`, as `ops.slice` takes them.

    With int `start` and `length` (known: eager, or static shapes) a plain
    slice: in eager torch `ops.slice` searches its arguments for symbolic
    tensors, once per decoded token.

    Example:

    >>> import numpy as np
    >>> slice_rows(np.arange(8).reshape(4, 2), 1, 2).tolist()
    [[2, 3], [4, 5]]
    """
    if isinstance(start, int) and isinstance(length, int):
        return table[start:start + length]
    return ops.slice(table, [start] + [0] * (len(table.shape) - 1), [length] + list(ops.shape(table)[1:]))
