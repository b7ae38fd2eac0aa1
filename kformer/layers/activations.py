"""Activations kformer names beyond Keras's own, registered so `.keras` files reload them."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kformer")
def gelu_approximate(x):
    """GELU by its tanh approximation: `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.

    GPT-2's `gelu_new` (Hendrycks and Gimpel 2016, eq. 2). Keras's `"gelu"` is
    the exact erf form; the two differ by up to about 5e-4.

    Example:

    >>> import numpy as np
    >>> round(float(gelu_approximate(np.float32(1.0))), 4)
    0.8412
    """
    return ops.gelu(x, approximate=True)


ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": gelu_approximate}


def get(name):
    """`"gelu"` (exact) or `"gelu_approximate"` (tanh) -> what `keras.activations.get` accepts;
    a ValueError naming anything else."""
    if name not in ACTIVATIONS:
        raise ValueError(f"`activation` must be one of {list(ACTIVATIONS)}. Received: activation={name!r}")
    return ACTIVATIONS[name]
