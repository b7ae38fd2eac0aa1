"""Products with a weight matrix: `linear` for the decoding fast path, `over_rows` for training;
`reshape` for both."""

import keras
from keras import ops


def linear(x, kernel, bias=None):
    """`x` `(..., in)` times `kernel` `(in, out)`, plus `bias` `(out,)` if given: `(..., out)`.

    Eager torch runs every op as it comes, and the `@` operator skips about
    13 us of `keras.ops` dispatch a call (a cached decoding step makes a dozen
    of them). Elsewhere `ops.matmul`: TensorFlow turns it into one 2-D
    matmul, and the `@` operator's broadcast batched matmul made a plain
    (non-XLA) exported decoding step about 25 % slower; under XLA and in JAX
    the two are the same dot.

    Example:

    >>> import numpy as np
    >>> tuple(linear(np.ones((2, 3, 4), "float32"), np.ones((4, 5), "float32"), np.zeros(5, "float32")).shape)
    (2, 3, 5)
    """
    if keras.backend.backend() == "torch":
        x, kernel = (t if ops.is_tensor(t) else ops.convert_to_tensor(t) for t in (x, kernel))  # numpy in
        y = x @ kernel
    else:
        y = ops.matmul(x, kernel)
    return y if bias is None else y + bias


def reshape(x, shape):
    """`ops.reshape(x, shape)`; on torch the tensor's own `.reshape`, the same op.

    Eager torch runs `ops.reshape` as it comes, and its search of `shape` for
    symbolic tensors took 62 us a call against 2.4 us for the reshape
    itself; a cached decoding step of a 2-block translator makes eight.

    Example:

    >>> import numpy as np
    >>> tuple(reshape(np.ones((2, 6), "float32"), (2, 3, 2)).shape)
    (2, 3, 2)
    """
    if keras.backend.backend() == "torch" and ops.is_tensor(x):
        return x.reshape(shape)
    return ops.reshape(x, shape)


def over_rows(fn, x, feature_axes=1):
    """`fn` applied to `x` with every axis before its last `feature_axes` merged into one, shape restored.

    `x` `(batch, seq, *features)` -> `fn((batch * seq, *features))` `(rows,
    *out)` -> `(batch, seq, *out)`. A projection's kernel gradient then
    contracts one axis instead of two: JAX's CPU compiler ran a feed-forward
    layer's forward and backward 2.4x faster (docs/BENCHMARKS.md,
    "Projections over one batch axis"); TensorFlow and torch multiply rows
    anyway.

    Example:

    >>> import numpy as np
    >>> tuple(over_rows(lambda t: t[:, :2], np.ones((2, 3, 4), "float32")).shape)
    (2, 3, 2)
    """
    leading = ops.shape(x)[: len(x.shape) - feature_axes]
    y = fn(reshape(x, (-1, *x.shape[len(x.shape) - feature_axes:])))
    return reshape(y, (*leading, *y.shape[1:]))
