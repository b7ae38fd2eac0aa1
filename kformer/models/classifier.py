"""Encoder-only text classifier (IMDB sentiment and the like)."""

import keras

from kformer import blocks, layers
from kformer.models.registry import builder, register

POOLINGS = ("mean", "cls")


@register("imdb_small", hidden_dim=64, num_heads=2, intermediate_dim=128, num_layers=2)
@register("imdb_tiny", hidden_dim=32, num_heads=2, intermediate_dim=64, num_layers=1)
@builder
def imdb_classifier(
    *,
    vocabulary_size=20000,
    sequence_length=200,
    hidden_dim=64,
    num_heads=2,
    intermediate_dim=128,
    num_layers=2,
    num_classes=2,
    dropout=0.1,
    pooling="mean",
    normalize_first=False,
    name="imdb_classifier",
):
    """Token ids `(batch, sequence_length)` -> class logits `(batch, num_classes)`.

    Token id 0 is padding. `pooling="mean"` averages the real tokens;
    `"cls"` takes the first token (put a [CLS] id there).
    """
    if pooling not in POOLINGS:
        raise ValueError(f"`pooling` must be one of {POOLINGS}. Received: pooling={pooling!r}")
    token_ids = keras.Input((sequence_length,), dtype="int32", name="token_ids")
    x = layers.TokenAndPositionEmbedding(vocabulary_size, sequence_length, hidden_dim,
                                         mask_zero=True, name="embedding")(token_ids)
    x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
    for i in range(num_layers):
        x = blocks.TransformerEncoderBlock(num_heads, intermediate_dim, dropout=dropout,
                                           normalize_first=normalize_first, name=f"encoder_{i}")(x)
    if normalize_first:
        x = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")(x)
    if pooling == "mean":
        x = layers.MaskedMeanPooling(name="pool")(x)  # over real tokens; empty text -> zeros
    else:
        x = layers.ClassTokenPooling(name="pool")(x)
    x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    logits = keras.layers.Dense(num_classes, name="logits", dtype="float32")(x)
    return keras.Model(token_ids, logits, name=name)
