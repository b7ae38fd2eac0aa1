"""Vision Transformer (Dosovitskiy et al. 2021), optionally with MoE blocks (V-MoE)."""

import math

import keras
import numpy as np

from kformer import blocks, layers
from kformer.layers.checks import check_positive_floats, check_positive_ints, check_rates
from kformer.models.registry import builder, register
from kformer.models.task import ClassifierTask, check_class_names

PAPER = dict(image_size=224, patch_size=16, num_classes=1000, channels=3, dropout=0.1)


@keras.saving.register_keras_serializable(package="kformer")
class ViTImageClassifier(ClassifierTask):
    """Images `(batch, image_size, image_size, channels)`, pixels 0-255 -> logits `(batch, num_classes)`.

    Pixels are scaled to [0, 1] inside the model (then, with `pixel_mean` /
    `pixel_std`, normalized per channel: `(x / 255 - mean) / std`). Patch embedding (a linear
    patchify, or with `stem_channels` the convolutional stem of Xiao et al.
    2021) with a class token, pre-norm GELU blocks, a final LayerNorm and a linear head on
    the class token. With `num_experts > 0`, every `moe_every`-th block (the
    last of each group, as in V-MoE) has a top-`top_k` mixture-of-experts
    feed-forward. With an `ImageClassifierPreprocessor`, `predict` takes
    uint8 images of any size.

    Args:
        image_size, patch_size, channels: ints (`image_size` divisible by `patch_size`).
        num_classes: int >= 2.
        hidden_dim, num_layers, num_heads, intermediate_dim: ints.
        dropout: float. Defaults to `0.0`.
        stem_channels: tuple of ints. Stride-2 3x3 convolutions before the
            patch projection (`layers.PatchEmbedding`). Defaults to `()`.
        num_experts, moe_every, top_k: mixture-of-experts settings (0 experts: none).
        class_names: optional list of `num_classes` str.
        preprocessor: `ImageClassifierPreprocessor` or None.
        layer_norm_epsilon: float. Of every LayerNorm. Defaults to `1e-6`.
        pixel_mean, pixel_std: None, a float or `channels` floats (std > 0). The model's input
            is `(pixels / 255 - pixel_mean) / pixel_std` (e.g. Hugging Face's ViT: 0.5 and 0.5).
            Defaults to `None`: 0 and 1, pixels / 255 only.

    Attributes: `patch_embedding`, `encoder_blocks`, `final_norm`, `head`.

    Example:

    >>> import numpy as np
    >>> model = ViTImageClassifier(image_size=8, patch_size=4, num_classes=3, channels=1,
    ...                            hidden_dim=16, num_layers=1, num_heads=2, intermediate_dim=32)
    >>> model.predict(np.zeros((2, 8, 8, 1)), verbose=0).shape
    (2, 3)
    """

    task_type = "image_classification"

    def __init__(self, image_size=224, patch_size=16, num_classes=1000, channels=3, hidden_dim=768,
                 num_layers=12, num_heads=12, intermediate_dim=3072, dropout=0.0, num_experts=0,
                 moe_every=2, top_k=2, stem_channels=(), class_names=None, preprocessor=None,
                 layer_norm_epsilon=1e-6, pixel_mean=None, pixel_std=None, **kwargs):
        check_positive_ints(image_size=image_size, patch_size=patch_size, hidden_dim=hidden_dim,
                            num_layers=num_layers, num_heads=num_heads, intermediate_dim=intermediate_dim)
        check_rates(dropout=dropout)
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"`num_classes` must be an int >= 2. Received: num_classes={num_classes!r}")
        if channels not in (1, 3):
            raise ValueError(f"`channels` must be 1 or 3. Received: channels={channels!r}")
        if image_size % patch_size:
            raise ValueError("`image_size` must be divisible by `patch_size`. Received: "
                             f"image_size={image_size}, patch_size={patch_size}")
        if num_experts and (not isinstance(moe_every, int) or moe_every < 1):
            raise ValueError(f"`moe_every` must be an int >= 1. Received: moe_every={moe_every}")
        class_names = check_class_names(class_names, num_classes)
        check_positive_floats(layer_norm_epsilon=layer_norm_epsilon)
        pixel_mean = _per_channel("pixel_mean", pixel_mean, channels, positive=False)
        pixel_std = _per_channel("pixel_std", pixel_std, channels, positive=True)
        patch_embedding = layers.PatchEmbedding(patch_size, hidden_dim, stem_channels=stem_channels,
                                                name="patch_embedding")
        encoder_blocks = [blocks.TransformerEncoderBlock(
            num_heads, intermediate_dim, dropout=dropout, activation="gelu", normalize_first=True,
            layer_norm_epsilon=layer_norm_epsilon,
            num_experts=num_experts if num_experts and (i + 1) % moe_every == 0 else 0, top_k=top_k,
            name=f"encoder_{i}") for i in range(num_layers)]
        final_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="final_norm")
        head = keras.layers.Dense(num_classes, dtype="float32", name="logits")

        images = keras.Input((image_size, image_size, channels), name="images")
        x = patch_embedding(_rescaling(pixel_mean, pixel_std, channels)(images))
        x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
        for block in encoder_blocks:
            x = block(x)
        x = layers.ClassTokenPooling(name="cls")(final_norm(x))
        super().__init__(inputs=images, outputs=head(x), **kwargs)
        self.patch_embedding, self.encoder_blocks = patch_embedding, encoder_blocks
        self.final_norm, self.head = final_norm, head
        self.image_size, self.patch_size, self.num_classes = image_size, patch_size, num_classes
        self.channels, self.hidden_dim, self.num_layers = channels, hidden_dim, num_layers
        self.num_heads, self.intermediate_dim, self.dropout = num_heads, intermediate_dim, dropout
        self.num_experts, self.moe_every, self.top_k = num_experts, moe_every, top_k
        self.stem_channels = patch_embedding.stem_channels
        self.class_names = class_names
        self.layer_norm_epsilon, self.pixel_mean, self.pixel_std = layer_norm_epsilon, pixel_mean, pixel_std
        self._set_preprocessor(preprocessor)

    def transformer_blocks(self):
        return self, list(self.encoder_blocks), []

    def validate_preprocessor(self, preprocessor=None):
        preprocessor = self.preprocessor if preprocessor is None else preprocessor
        if preprocessor is not None and (preprocessor.image_size, preprocessor.channels) != (
                self.image_size, self.channels):
            raise ValueError(f"The preprocessor must make {self.image_size}x{self.image_size}x{self.channels} "
                             f"images for this model. Received: image_size={preprocessor.image_size}, "
                             f"channels={preprocessor.channels}")


def _per_channel(name, value, channels, positive):
    """None, or `value` (a number or `channels` numbers) as a list of `channels` floats."""
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value] * channels
    if len(values) != channels or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v > 0 or not positive)
            for v in values):
        raise ValueError(f"`{name}` must be None, a {'positive ' if positive else ''}finite number or {channels} "
                         f"such numbers (one per channel). Received: {name}={value!r}")
    return [float(v) for v in values]


def _rescaling(pixel_mean, pixel_std, channels):
    """Pixels 0-255 -> `pixels / 255` (no mean and std: as every earlier ViT), else one per-channel
    affine map `(pixels / 255 - mean) / std`, folded as `pixels * scale + offset` (computed in float64)."""
    if pixel_mean is None and pixel_std is None:
        return keras.layers.Rescaling(1.0 / 255, name="rescale")
    mean = np.asarray([0.0] * channels if pixel_mean is None else pixel_mean, np.float64)
    std = np.asarray([1.0] * channels if pixel_std is None else pixel_std, np.float64)
    return keras.layers.Rescaling([float(v) for v in 1.0 / (255.0 * std)],
                                  offset=[float(v) for v in -mean / std], name="rescale")


@register("vit_large_patch16_224", **PAPER, hidden_dim=1024, num_layers=24, num_heads=16,
          intermediate_dim=4096)
@register("vit_base_patch16_224", **PAPER, hidden_dim=768, num_layers=12, num_heads=12,
          intermediate_dim=3072)
@register("vit_hybrid_cifar", image_size=32, patch_size=8, num_classes=10, channels=3,
          stem_channels=(64, 128, 256), hidden_dim=192, num_layers=5, num_heads=3, intermediate_dim=384)
@register("vit_conv_stem_cifar", image_size=32, patch_size=4, num_classes=10, channels=3,
          stem_channels=(64, 128), hidden_dim=192, num_layers=5, num_heads=3, intermediate_dim=384)
@register("vit_small_cifar", image_size=32, patch_size=4, num_classes=10, channels=3,
          hidden_dim=192, num_layers=6, num_heads=3, intermediate_dim=384)
@register("vit_tiny", image_size=28, patch_size=7, num_classes=10, channels=1, hidden_dim=64,
          num_layers=4, num_heads=4, intermediate_dim=128)
@builder
def vit(**kwargs):
    """Build a `ViTImageClassifier`: `vit(preset="vit_tiny")`.

    Args:
        preset: str. `"vit_tiny"` (MNIST), `"vit_small_cifar"`, `"vit_conv_stem_cifar"`
            (CIFAR-10; the convolutional stem of Xiao et al. 2021 and one block
            fewer), `"vit_hybrid_cifar"` (a third stem convolution: 16 tokens
            of a 4x4 map, Dosovitskiy et al.'s hybrid; a faster step, the
            recipe's CIFAR-10 default), `"vit_base_patch16_224"`, ...
        **kwargs: `ViTImageClassifier` arguments; they replace the preset's.

    Example:

    >>> vit(preset="vit_tiny").input.shape
    (None, 28, 28, 1)
    """
    return ViTImageClassifier(**kwargs)
