"""kformer layers: only `keras` and `keras.ops` inside, so every backend runs them.

The blocks built from them (residual + norm + feed-forward) are in `kformer.blocks`.
"""

from kformer.layers import masks
from kformer.layers.attention import MultiHeadAttention
from kformer.layers.convolution import ConformerConvolution, ConvolutionSubsampling
from kformer.layers.embedding import PatchEmbedding, TokenAndPositionEmbedding
from kformer.layers.feed_forward import FeedForward
from kformer.layers.log_mel import LogMelSpectrogram
from kformer.layers.moe import MixtureOfExperts
from kformer.layers.ngram import HashedNgramEmbedding
from kformer.layers.pooling import ClassTokenPooling, MaskedMeanPooling
from kformer.layers.position import (
    PositionEmbedding,
    RotaryEmbedding,
    SinusoidalPositionEncoding,
    Sinusoids,
)
from kformer.layers.relative_attention import RelativeMultiHeadAttention

__all__ = [
    "ClassTokenPooling",
    "ConformerConvolution",
    "ConvolutionSubsampling",
    "MaskedMeanPooling",
    "FeedForward",
    "HashedNgramEmbedding",
    "LogMelSpectrogram",
    "MixtureOfExperts",
    "MultiHeadAttention",
    "PatchEmbedding",
    "PositionEmbedding",
    "RelativeMultiHeadAttention",
    "RotaryEmbedding",
    "SinusoidalPositionEncoding",
    "Sinusoids",
    "TokenAndPositionEmbedding",
    "masks",
]
