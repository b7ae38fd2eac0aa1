"""Transformer blocks: residual + norm + feed-forward around `kformer.layers`."""

from kformer.blocks.conformer import ConformerBlock
from kformer.blocks.decoder import TransformerDecoderBlock
from kformer.blocks.encoder import TransformerEncoderBlock

__all__ = ["ConformerBlock", "TransformerDecoderBlock", "TransformerEncoderBlock"]
