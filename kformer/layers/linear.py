"""`over_rows`: a layer applied to `(batch * seq, ...)` rows, the shape restored."""

from keras import ops


def over_rows(fn, x, feature_axes=1):
    """`fn` applied to `x` with every axis before its last `feature_axes` merged into one, shape restored.

    `x` `(batch, seq, *features)` -> `fn((batch * seq, *features))` `(rows,
    *out)` -> `(batch, seq, *out)`. A projection's kernel gradient then
    contracts one axis instead of two, which JAX's CPU compiler runs faster
    (docs/decisions.md, "Why projections multiply rows"); TensorFlow and
    torch multiply rows anyway.

    Example:

    >>> import numpy as np
    >>> tuple(over_rows(lambda t: t[:, :2], np.ones((2, 3, 4), "float32")).shape)
    (2, 3, 2)
    """
    leading = ops.shape(x)[: len(x.shape) - feature_axes]
    y = fn(ops.reshape(x, (-1, *x.shape[len(x.shape) - feature_axes:])))
    return ops.reshape(y, (*leading, *y.shape[1:]))
