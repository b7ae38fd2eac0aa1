"""Conformer encoder (Gulati et al. 2020): 4x convolutional subsampling, then Conformer blocks."""

import keras

from kformer import blocks, layers
from kformer.layers.checks import check_positive_ints, check_rates
from kformer.models.registry import builder, register
from kformer.models.task import KformerModel


@keras.saving.register_keras_serializable(package="kformer")
class ConformerEncoder(KformerModel):
    """`features` `(batch, frames, num_features)` + `padding_mask` `(batch, frames)` ->
    `(batch, (frames - 3) // 4, hidden_dim)`.

    The encoder of the paper's Figure 1: two 3x3 stride-2 convolutions
    (`ConvolutionSubsampling`, 4x fewer frames), a linear projection to
    `hidden_dim`, dropout, then `num_layers` `ConformerBlock`s. A subsampled
    frame is real when every input frame it sees is; padded frames never
    change real ones (attention masks them, the convolution zeroes them);
    `output_padding_mask(padding_mask)` gives the subsampled mask.

    Args:
        num_features: int. Input features per frame (80 log-mel filterbanks
            in the paper). Defaults to `80`.
        num_layers, hidden_dim, num_heads: ints. Table 1's encoder layers,
            encoder dim and attention heads.
        kernel_size: int. Depthwise convolution width. Defaults to `32`.
        intermediate_dim: int. Feed-forward width. Defaults to `4 * hidden_dim`.
        dropout: float. Defaults to `0.1` (paper: P_drop = 0.1).

    Attributes: `subsampling`, `input_dropout`, `conformer_blocks`.

    Example:

    >>> import numpy as np
    >>> encoder = ConformerEncoder(num_features=16, num_layers=1, hidden_dim=16, num_heads=2,
    ...                            kernel_size=3)
    >>> features = np.zeros((2, 40, 16), "float32")
    >>> padding_mask = np.arange(40) < np.array([[40], [20]])
    >>> tuple(encoder({"features": features, "padding_mask": padding_mask}).shape)
    (2, 9, 16)
    >>> np.asarray(encoder.output_padding_mask(padding_mask)).sum(axis=1).tolist()
    [9, 4]
    """

    def __init__(self, num_features=80, num_layers=16, hidden_dim=144, num_heads=4, kernel_size=32,
                 intermediate_dim=None, dropout=0.1, **kwargs):
        check_positive_ints(num_features=num_features, num_layers=num_layers, hidden_dim=hidden_dim,
                            num_heads=num_heads, kernel_size=kernel_size)
        if intermediate_dim is not None:
            check_positive_ints(intermediate_dim=intermediate_dim)
        check_rates(dropout=dropout)
        if hidden_dim % num_heads:
            raise ValueError(f"`hidden_dim` must be divisible by `num_heads`. Received: "
                             f"hidden_dim={hidden_dim}, num_heads={num_heads}")
        subsampling = layers.ConvolutionSubsampling(hidden_dim, name="subsampling")
        input_dropout = keras.layers.Dropout(dropout, name="input_dropout")
        conformer_blocks = [blocks.ConformerBlock(
            num_heads, intermediate_dim or 4 * hidden_dim, kernel_size=kernel_size, dropout=dropout,
            name=f"conformer_{i}") for i in range(num_layers)]

        inputs = {"features": keras.Input((None, num_features), name="features"),
                  "padding_mask": keras.Input((None,), dtype="bool", name="padding_mask")}
        x = input_dropout(subsampling(inputs["features"]))
        mask = subsampling.subsample_mask(inputs["padding_mask"])
        for block in conformer_blocks:
            x = block(x, padding_mask=mask)
        super().__init__(inputs=inputs, outputs=x, **kwargs)
        self.subsampling, self.input_dropout, self.conformer_blocks = subsampling, input_dropout, conformer_blocks
        self.num_features, self.num_layers, self.hidden_dim = num_features, num_layers, hidden_dim
        self.num_heads, self.kernel_size, self.intermediate_dim = num_heads, kernel_size, intermediate_dim
        self.dropout = dropout

    def output_padding_mask(self, padding_mask):
        """`(batch, frames)` -> `(batch, (frames - 3) // 4)` bool: the real subsampled frames."""
        return self.subsampling.subsample_mask(padding_mask)


# Table 1 of the paper (encoder sizes; the paper's parameter counts include its LSTM decoder).
@register("conformer_l", num_layers=17, hidden_dim=512, num_heads=8, kernel_size=32)
@register("conformer_m", num_layers=16, hidden_dim=256, num_heads=4, kernel_size=32)
@register("conformer_s", num_layers=16, hidden_dim=144, num_heads=4, kernel_size=32)
@builder
def conformer_encoder(**kwargs):
    """Build a `ConformerEncoder`: `conformer_encoder(preset="conformer_s")`.

    Args:
        preset: str. `"conformer_s"` (16 blocks, dim 144, 4 heads),
            `"conformer_m"` (16, 256, 4) or `"conformer_l"` (17, 512, 8);
            kernel 32 in all (paper Table 1).
        **kwargs: `ConformerEncoder` arguments; they replace the preset's.

    Example:

    >>> encoder = conformer_encoder(preset="conformer_s", num_layers=1)
    >>> encoder.output.shape
    (None, None, 144)
    """
    return ConformerEncoder(**kwargs)
