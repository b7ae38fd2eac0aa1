"""What the plots share: the lazy matplotlib import and small numpy helpers."""

import numpy as np
from keras import ops


def pyplot():
    """`matplotlib.pyplot`, imported on first use, or an ImportError that says how to install it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("kformer.viz needs matplotlib: `pip install kformer[viz]` "
                          "(or `pip install matplotlib`).") from error
    return plt


def to_numpy(x):
    """A backend tensor (or array-like) -> numpy array."""
    return np.asarray(ops.convert_to_numpy(x))


def grid(count, max_columns):
    """(rows, columns) of a grid holding `count` panels, at most `max_columns` wide."""
    columns = min(count, max_columns)
    return -(-count // columns), columns


def remove_unused(axes, used):
    """Remove the empty panels after the first `used` of a `plt.subplots` grid; the used axes."""
    flat = list(np.ravel(axes))
    for ax in flat[used:]:
        ax.remove()
    return flat[:used]
