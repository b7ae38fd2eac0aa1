"""Argument checks shared by every layer: each error names the argument and value."""

import math
import sys

import keras
import numpy as np


def check_positive_ints(**values):
    """Raise a ValueError for the first argument that is not an int >= 1."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_rates(**values):
    """Raise a ValueError for the first dropout-like rate that is not a number in [0, 1)."""
    for name, value in values.items():
        if not _is_number(value) or not 0.0 <= value < 1.0:
            raise ValueError(f"`{name}` must be a number in [0, 1). Received: {name}={value!r}")


def check_positive_floats(**values):
    """Raise a ValueError for the first argument that is not a finite number > 0 (epsilons)."""
    for name, value in values.items():
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"`{name}` must be a finite number > 0. Received: {name}={value!r}")


def check_rank(name, shape, ranks):
    """Raise a ValueError naming `name` unless `len(shape)` is in `ranks`."""
    if shape is not None and len(shape) not in ranks:
        raise ValueError(
            f"`{name}` must have rank {' or '.join(map(str, ranks))}. "
            f"Received: {name}.shape={tuple(shape)}"
        )


def clone_initializer(initializer):
    """A fresh copy, so sublayers sharing one seeded initializer differ."""
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())


def known_index(name, value):
    """`value` as an int if it is known now (int, NumPy or eager tensor), else None (traced).

    Raises a ValueError naming `name` when `value` is not an integer scalar or
    is negative, so `start_index=2.7`, `np.int64(-1)` or a float tensor is
    refused instead of truncated or clamped. Inside a compiled function a
    traced index cannot be read; only its dtype is checked there.
    """
    if isinstance(value, bool) or (not isinstance(value, int) and not hasattr(value, "dtype")):
        raise ValueError(f"`{name}` must be an int or an integer scalar tensor. Received: {name}={value!r}")
    if not isinstance(value, int):
        if "int" not in str(value.dtype):
            raise ValueError(f"`{name}` must be an integer. Received: {name}={value!r} (dtype {value.dtype})")
        try:
            array = keras.ops.convert_to_numpy(value)
        except Exception:  # noqa: BLE001 (a traced value: jax tracer, symbolic tf.Tensor)
            return None
        if array.ndim != 0:
            raise ValueError(f"`{name}` must be a scalar. Received: {name} of shape {tuple(array.shape)}")
        value = int(array)
    if value < 0:
        raise ValueError(f"`{name}` must be >= 0. Received: {name}={value}")
    return value


def visible_values(x):
    """`x` as a NumPy array when its values can be read now (NumPy, an eager tensor), else None.

    Inside `jax.jit`, a `tf.function`, Keras's symbolic build or `torch.compile`
    the values are traced and cannot be read (JAX and TensorFlow refuse the
    conversion; torch would break its graph): id checks there are left to the
    task methods, which check before the backend runs.
    """
    if isinstance(x, np.ndarray):
        return x
    torch = sys.modules.get("torch")  # compiling only if torch is loaded already: never imported here
    if keras.backend.backend() == "torch" and torch is not None and torch.compiler.is_compiling():
        return None
    try:
        return np.asarray(keras.ops.convert_to_numpy(x))
    except Exception:  # noqa: BLE001 (a jax tracer, a symbolic tf.Tensor, a torch meta tensor)
        return None


def check_ids(name, ids, limit, integer_dtype=True):
    """Raise a ValueError naming `name` if readable `ids` are not integers in `[0, limit)`.

    Float ids are refused (never rounded) unless `integer_dtype=False` (a
    Keras loss receives its targets cast to float); traced ids are only
    checked for their dtype (`visible_values`).
    """
    dtype = str(getattr(ids, "dtype", ""))
    if integer_dtype and dtype and "int" not in dtype and "bool" not in dtype:
        raise ValueError(f"`{name}` must be integer ids (never rounded). Received: {name} of dtype {dtype}")
    values = visible_values(ids)
    if values is not None and values.size and (values.min() < 0 or values.max() >= limit):
        raise ValueError(f"`{name}` must be ids in [0, {limit}). Received: values from {values.min()} "
                         f"to {values.max()}")
