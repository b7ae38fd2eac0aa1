"""kformer layers: only `keras` and `keras.ops` inside, so every backend runs them.

The blocks live in `kformer.blocks`; they are re-exported here so that the
whole layer library reads as one namespace (`kformer.layers.TransformerEncoderBlock`).
"""

from kformer.layers import masks
from kformer.layers.attention import MultiHeadAttention
from kformer.layers.convolution import ConformerConvolution, ConvolutionSubsampling
from kformer.layers.embedding import PatchEmbedding, TokenAndPositionEmbedding
from kformer.layers.feed_forward import FeedForward
from kformer.layers.moe import MixtureOfExperts
from kformer.layers.pooling import ClassTokenPooling, MaskedMeanPooling
from kformer.layers.position import (
    PositionEmbedding,
    RotaryEmbedding,
    SinusoidalPositionEncoding,
)
from kformer.layers.relative_attention import RelativeMultiHeadAttention

_BLOCKS = ("TransformerDecoderBlock", "TransformerEncoderBlock")


def __getattr__(name):
    # The blocks are re-exported lazily: `kformer.blocks` imports this package.
    if name in _BLOCKS:
        from kformer import blocks

        return getattr(blocks, name)
    raise AttributeError(f"module 'kformer.layers' has no attribute {name!r}")

__all__ = [
    "ClassTokenPooling",
    "ConformerConvolution",
    "ConvolutionSubsampling",
    "MaskedMeanPooling",
    "FeedForward",
    "MixtureOfExperts",
    "MultiHeadAttention",
    "PatchEmbedding",
    "PositionEmbedding",
    "RelativeMultiHeadAttention",
    "RotaryEmbedding",
    "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "masks",
]
