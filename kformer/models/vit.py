"""Vision Transformer (Dosovitskiy et al. 2021), optionally with MoE blocks (V-MoE)."""

import keras

from kformer import blocks, layers
from kformer.models.registry import builder, register

PAPER = dict(image_size=224, patch_size=16, num_classes=1000, channels=3, dropout=0.1)


@register("vit_large_patch16_224", **PAPER, hidden_dim=1024, num_layers=24, num_heads=16,
          intermediate_dim=4096)
@register("vit_base_patch16_224", **PAPER, hidden_dim=768, num_layers=12, num_heads=12,
          intermediate_dim=3072)
@register("vit_small_cifar", image_size=32, patch_size=4, num_classes=10, channels=3,
          hidden_dim=192, num_layers=6, num_heads=3, intermediate_dim=384)
@register("vit_tiny", image_size=28, patch_size=7, num_classes=10, channels=1, hidden_dim=64,
          num_layers=4, num_heads=4, intermediate_dim=128)
@builder
def vit(
    *,
    image_size=224,
    patch_size=16,
    num_classes=1000,
    channels=3,
    hidden_dim=768,
    num_layers=12,
    num_heads=12,
    intermediate_dim=3072,
    dropout=0.0,
    num_experts=0,
    moe_every=2,
    top_k=2,
    name="vit",
):
    """Images `(batch, image_size, image_size, channels)`, pixel values 0-255 -> logits `(batch, num_classes)`.

    Pixels are scaled to [0, 1] inside the model. Pre-norm GELU blocks, a
    final LayerNorm and a linear head on the class token. With
    `num_experts > 0`, every `moe_every`-th block (the last of each group, as
    in V-MoE) uses a top-`top_k` mixture-of-experts feed-forward.
    """
    if num_experts and (not isinstance(moe_every, int) or moe_every < 1):
        raise ValueError(f"`moe_every` must be an int >= 1. Received: moe_every={moe_every}")
    images = keras.Input((image_size, image_size, channels), name="images")
    x = keras.layers.Rescaling(1.0 / 255, name="rescale")(images)
    x = layers.PatchEmbedding(patch_size, hidden_dim, name="patch_embedding")(x)
    x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
    for i in range(num_layers):
        experts = num_experts if num_experts and (i + 1) % moe_every == 0 else 0
        x = blocks.TransformerEncoderBlock(
            num_heads, intermediate_dim, dropout=dropout, activation="gelu",
            normalize_first=True, layer_norm_epsilon=1e-6, num_experts=experts, top_k=top_k,
            name=f"encoder_{i}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    x = layers.ClassTokenPooling(name="cls")(x)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(images, logits, name=name)
