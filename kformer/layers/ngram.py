"""Hashed n-gram embeddings: each token also sees the n-gram that ends at it."""

import keras
from keras import ops

from kformer.layers.checks import check_positive_ints

# Fold ids below this prime before pairing: (a % P) * P + (b % P) < 2**31, so
# the hash stays exact in int32 on every backend (JAX has no int64 by default).
# Longer n-grams mix the earlier tokens modulo a second prime first.
_PRIME, _MIX = 46337, 46327


def ngram_hashes(token_ids, num_buckets, ngram_size=2):
    """Bucket of the n-gram ending at each position: int `(batch, seq)` -> int32 `(batch, seq)`.

    Buckets are in `[1, num_buckets)`; 0 where the n-gram would reach before the
    first token or touch padding (id 0). Pure `keras.ops`, identical on every
    backend and in exported graphs.

    Example:

    >>> import numpy as np
    >>> keras.ops.convert_to_numpy(ngram_hashes(np.array([[5, 6, 7, 0]]), 1000)).tolist()
    [[0, 923, 308, 0]]
    """
    ids = ops.cast(token_ids, "int32")
    hashed = ops.mod(ids, _PRIME)
    valid = ops.not_equal(ids, 0)
    for back in range(1, ngram_size):  # fold in the token `back` places earlier
        earlier = ops.pad(ids[:, :-back], [[0, 0], [back, 0]])
        modulus = num_buckets - 1 if back == ngram_size - 1 else _MIX
        hashed = ops.mod(ops.mod(earlier, _PRIME) * _PRIME + hashed, modulus)
        valid = ops.logical_and(valid, ops.not_equal(earlier, 0))
    return ops.where(valid, hashed + 1, 0)


@keras.saving.register_keras_serializable(package="kformer")
class HashedNgramEmbedding(keras.layers.Layer):
    """Token ids -> an embedding of the hashed n-gram ending at each token.

    Added to the token embeddings of a classifier, it gives the encoder the
    word pairs that a bag of n-grams classifies well (fastText: Joulin et al.
    2017, "Bag of Tricks for Efficient Text Classification", hashed bigrams;
    N-Grammer: Roy et al. 2022, n-gram embeddings added to a transformer's
    input). Positions without a full n-gram (the first `ngram_size - 1` tokens,
    padding) get zeros. Causal: position i sees tokens i-n+1..i only.

    Args:
        num_buckets: int >= 2. Rows of the hash table (bucket 0 is unused).
        hidden_dim: int. Embedding width.
        ngram_size: int >= 2. Defaults to `2` (bigrams).
        mask_zero: bool. Token id 0 is padding and produces a Keras mask (so
            adding this to a masked token embedding keeps the mask). Defaults to `False`.
        embeddings_initializer: Defaults to `RandomNormal(stddev=0.02)`.
        **kwargs: Passed to `keras.layers.Layer`.

    Call arguments:
        inputs: int `(batch, seq)` token ids, 0 = padding.

    Returns:
        `(batch, seq, hidden_dim)`.

    Example:

    >>> import numpy as np
    >>> out = HashedNgramEmbedding(1000, 8)(np.array([[5, 6, 7, 0]]))
    >>> out = keras.ops.convert_to_numpy(out)
    >>> out.shape, float(abs(out[0, 0]).sum()), float(abs(out[0, 3]).sum())  # no bigram there
    ((1, 4, 8), 0.0, 0.0)
    """

    def __init__(self, num_buckets, hidden_dim, ngram_size=2, mask_zero=False, embeddings_initializer=None,
                 **kwargs):
        super().__init__(**kwargs)
        check_positive_ints(num_buckets=num_buckets, hidden_dim=hidden_dim, ngram_size=ngram_size)
        if num_buckets < 2:
            raise ValueError(f"`num_buckets` must be >= 2 (bucket 0 means no n-gram). "
                             f"Received: num_buckets={num_buckets}")
        if ngram_size < 2:
            raise ValueError(f"`ngram_size` must be >= 2 (1 is the token embedding itself). "
                             f"Received: ngram_size={ngram_size}")
        self.num_buckets, self.hidden_dim, self.ngram_size = num_buckets, hidden_dim, ngram_size
        self.mask_zero = mask_zero
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.RandomNormal(stddev=0.02))
        self.table = keras.layers.Embedding(num_buckets, hidden_dim, embeddings_initializer=self.embeddings_initializer,
                                            dtype=self.dtype_policy, name="ngram_table")

    def build(self, inputs_shape):
        self.table.build(inputs_shape)
        self.built = True

    def call(self, inputs):
        if len(inputs.shape) != 2:
            raise ValueError(f"`inputs` must be int token ids (batch, seq). Received: inputs.shape={tuple(inputs.shape)}")
        buckets = ngram_hashes(inputs, self.num_buckets, self.ngram_size)
        present = ops.cast(ops.not_equal(buckets, 0), self.compute_dtype)[..., None]
        return self.table(buckets) * present

    def compute_mask(self, inputs, mask=None):
        return ops.not_equal(inputs, 0) if self.mask_zero else None

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape) + (self.hidden_dim,)

    def get_config(self):
        return {**super().get_config(), "num_buckets": self.num_buckets, "hidden_dim": self.hidden_dim,
                "ngram_size": self.ngram_size, "mask_zero": self.mask_zero,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer)}
