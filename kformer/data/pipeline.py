"""tf.data settings every kformer input pipeline shares: its options and its map functions.

Imports only TensorFlow, so loaders, text tools and preprocessors can all use it.
"""

import tensorflow as tf

_NO_AUTOTUNE = tf.data.Options()
_NO_AUTOTUNE.autotune.enabled = False  # avoids tf.data's shutdown stall after fit


def data_options():
    """`tf.data.Options` for every kformer pipeline (autotune off: no stall after `fit`).

    Example:

    >>> data_options().autotune.enabled
    False
    """
    return _NO_AUTOTUNE


def without_autograph(fn):
    """`fn` for `Dataset.map`, traced as written (as kformer's `tf.function`s, `autograph=False`).

    kformer's TensorFlow data code has no Python control flow on tensors, and
    autograph's conversion of it cost seconds on each first trace in a process.

    Args:
        fn: a function of tensors.

    Example:

    >>> ds = tf.data.Dataset.range(3).map(without_autograph(lambda x: x * 2))
    >>> [int(x) for x in ds]
    [0, 2, 4]
    """
    return tf.autograph.experimental.do_not_convert(fn)
