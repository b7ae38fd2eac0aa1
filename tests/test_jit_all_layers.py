"""Every layer inside one model, trained with `jit_compile=True` on every backend.

The per-layer tests compile with XLA on TensorFlow and JAX; torch.compile
costs tens of seconds a model, so on torch this one model covers all layers.
"""

import keras
import numpy as np

from kformer import blocks, layers
from tests.helpers import to_numpy


def _model():
    ids = keras.Input((8,), dtype="int32", name="token_ids")
    images = keras.Input((8, 8, 3), name="images")
    embed = layers.TokenAndPositionEmbedding(50, 8, 16, mask_zero=True, name="embedding")
    x = embed(ids)
    x = x + layers.SinusoidalPositionEncoding()(x) + layers.HashedNgramEmbedding(64, 16, name="bigrams")(ids)
    x = blocks.TransformerEncoderBlock(2, 32, dropout=0.1, num_experts=2, name="encoder")(x)
    patches = layers.PatchEmbedding(4, 16, name="patches")(images)
    patches = layers.PositionEmbedding(5)(patches) + patches
    y = blocks.TransformerDecoderBlock(2, 32, normalize_first=True, name="decoder")(x, patches)
    y = layers.MultiHeadAttention(2, 8, name="attention")(y, x, use_causal_mask=True)
    y = layers.FeedForward(32, name="ffn")(y)
    y = keras.layers.Reshape((8, 2, 8))(y)
    y = keras.layers.Reshape((8, 16))(layers.RotaryEmbedding()(y))
    logits = embed(y, reverse=True)
    return keras.Model({"token_ids": ids, "images": images}, logits)


def test_all_layers_train_under_jit_compile():
    model = _model()
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    rng = np.random.default_rng(0)
    data = {"token_ids": rng.integers(1, 50, (8, 8)).astype("int32"),
            "images": rng.random((8, 8, 8, 3)).astype("float32")}
    target = rng.integers(0, 50, (8, 8))
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    history = model.fit(data, target, batch_size=4, epochs=2, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    moved = [not np.allclose(a, to_numpy(b)) for a, b in zip(before, model.trainable_weights)]
    assert all(moved), [w.path for w, m in zip(model.trainable_weights, moved) if not m]
    assert tuple(model(data).shape) == (8, 8, 50)
