"""Transformer encoder block ("Attention Is All You Need", 3.1)."""

import keras

from kformer.blocks.base import TransformerBlock


@keras.saving.register_keras_serializable(package="kformer")
class TransformerEncoderBlock(TransformerBlock):
    """Self-attention then feed-forward, each with residual, dropout and LayerNorm.

    `num_experts > 0` makes the feed-forward a `MixtureOfExperts`.

    Args:
        num_heads: int. Attention heads; must divide the input width.
        intermediate_dim: int. Hidden width of the feed-forward.
        dropout: float. Residual dropout on each sublayer output. Defaults to `0.0`.
        activation: Feed-forward activation. Defaults to `"relu"`.
        normalize_first: bool. `False`: post-norm `LN(x + f(x))` (the paper);
            `True`: pre-norm `x + f(LN(x))`. Defaults to `False`.
        **kwargs: the other `kformer.blocks.base.TransformerBlock` arguments
            (`attention_dropout`, `layer_norm_epsilon`, `num_experts`,
            `rotary_max_wavelength`, ...) and `keras.layers.Layer`'s.

    Call arguments:
        inputs: `(batch, seq, hidden_dim)`.
        padding_mask: `(batch, seq)`, True = real token. Defaults to the
            incoming Keras mask.
        attention_mask: bool `(batch, seq, seq)`, merged with the padding mask.
        training: bool.
        return_attention_scores: bool. Also return the self-attention
            probabilities. Defaults to `False`.

    Returns:
        `(batch, seq, hidden_dim)`; the input mask is passed through. With
        `return_attention_scores`, `(outputs, scores)`, scores
        `(batch, heads, seq, seq)` (padded keys get 0).

    Example:

    >>> import numpy as np
    >>> block = TransformerEncoderBlock(num_heads=2, intermediate_dim=32)
    >>> x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    >>> out, scores = block(x, padding_mask=np.array([[1, 1, 1, 0, 0]] * 2, bool), return_attention_scores=True)
    >>> tuple(out.shape), float(np.asarray(scores)[0, 0, 0, 3:].sum())  # padded keys get no weight
    ((2, 5, 8), 0.0)
    """

    def build(self, inputs_shape):
        hidden_dim = self._check_width(inputs_shape, "inputs")
        self.self_attention = self._attention(hidden_dim, "self_attention", rotary=True)
        self.self_attention.build(inputs_shape, inputs_shape)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.self_attention_norm.build(inputs_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self._build_feed_forward(inputs_shape)
        self.built = True

    def call(self, inputs, padding_mask=None, attention_mask=None, training=None, mask=None,
             return_attention_scores=False):
        padding_mask = mask if padding_mask is None else padding_mask

        def attend(h):
            return self.self_attention(
                h, h, query_mask=padding_mask, value_mask=padding_mask,
                attention_mask=attention_mask, return_attention_scores=return_attention_scores,
                training=training,
            )

        x, scores = self._residual(inputs, attend, self.self_attention_norm,
                                   self.self_attention_dropout, training)
        x = self._run_feed_forward(x, padding_mask, training)
        return (x,) + scores if return_attention_scores else x
