"""Argument checks shared by every layer: each error names the argument and value."""

import keras


def check_positive_ints(**values):
    """Raise a ValueError for the first argument that is not an int >= 1."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")


def check_rates(**values):
    """Raise a ValueError for the first dropout-like rate outside [0, 1)."""
    for name, value in values.items():
        if not 0.0 <= value < 1.0:
            raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value}")


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
