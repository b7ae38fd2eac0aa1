"""Model inputs checked before any backend runs: shapes, dtypes and id ranges, each error naming the input.

Keras's JAX trainer keeps a broken state after a step raises, and an id past
the vocabulary reads NaN on JAX and an arbitrary row elsewhere; so `Task.predict`,
`predict_on_batch`, `evaluate` and `fit` check array inputs here first.
Compiled calls (`model(x)` inside `jax.jit` or a `tf.function`) do not check
values; datasets are checked by the preprocessors that build them.
"""

import keras
import numpy as np


def check_model_inputs(task, x, limits):
    """Raise a ValueError naming the input if `x` does not fit `task.inputs`.

    Args:
        task: a functional `keras.Model`.
        x: an array or tensor (one-input models) or a dict of them; anything
            else (a `tf.data.Dataset`, a generator) is left to its pipeline.
        limits: dict input name -> (id_limit, length_limit): integer inputs
            must lie in `[0, id_limit)` and have at most `length_limit` columns
            (None: no limit).
    """
    specs = {t.name: t for t in keras.tree.flatten(task.inputs)}
    if _is_array(x) and len(specs) == 1:
        x = {next(iter(specs)): x}
    if not isinstance(x, dict):
        return
    for name, value in x.items():
        if name not in specs or not _is_array(value):
            continue
        _check_one(name, np.asarray(keras.ops.convert_to_numpy(value)), specs[name], limits.get(name, (None, None)))


def _check_one(name, array, spec, limit):
    shape, want = array.shape, tuple(spec.shape)
    if len(shape) != len(want) or any(w is not None and s != w for s, w in zip(shape[1:], want[1:])):
        raise ValueError(f"`{name}` must have shape {want} (None: any size). Received: {name}.shape={shape}")
    if "int" in spec.dtype and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"`{name}` must hold integers (ids are never rounded). Received: dtype {array.dtype}")
    id_limit, length_limit = limit
    if length_limit is not None and len(shape) > 1 and shape[1] > length_limit:
        raise ValueError(f"`{name}` has {shape[1]} positions but the model supports at most "
                         f"{length_limit}. Received: {name}.shape={shape}")
    if id_limit is not None and array.size and (array.min() < 0 or array.max() >= id_limit):
        raise ValueError(f"`{name}` must be in [0, {id_limit}). Received: values from {array.min()} "
                         f"to {array.max()}")


def _is_array(value):
    return isinstance(value, np.ndarray) or (keras.ops.is_tensor(value) and hasattr(value, "shape"))
