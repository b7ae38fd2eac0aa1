"""Transformer decoder block ("Attention Is All You Need", 3.1), with caches."""

import keras
from keras import ops

from kformer.blocks.base import TransformerBlock
from kformer.layers.checks import check_positive_ints


@keras.saving.register_keras_serializable(package="kformer")
class TransformerDecoderBlock(TransformerBlock):
    """Causal self-attention, optional cross-attention, feed-forward.

    Self-attention is always causal: position `i` sees positions `<= i` (and
    its mixture-of-experts routing relies on it, `causal_routing`). For
    attention in both directions use `TransformerEncoderBlock`.

    Cross-attention exists when the block is built with an `encoder_sequence`
    (encoder-decoder); without one it is a decoder-only (GPT-style) block.

    Args:
        num_heads: int. Attention heads; must divide the input width.
        intermediate_dim: int. Hidden width of the feed-forward.
        dropout: float. Residual dropout on each sublayer output. Defaults to `0.0`.
        activation: Feed-forward activation. Defaults to `"relu"`.
        normalize_first: bool. `False`: post-norm `LN(x + f(x))` (the paper);
            `True`: pre-norm `x + f(LN(x))`. Defaults to `False`.
        attention_window: int or None. Self-attention over the last
            `attention_window` positions only (GPT-Neo's local layers; see
            `MultiHeadAttention`). Defaults to `None` (every earlier position).
        attention_scale: float or None. Multiplies the attention scores.
            Defaults to `None` (`1 / sqrt(key_dim)`).
        use_qkv_bias: bool. Biases in the query, key and value projections.
            Defaults to `True`.
        **kwargs: the other `kformer.blocks.base.TransformerBlock` arguments
            (`attention_dropout`, `layer_norm_epsilon`, `num_experts`,
            `rotary_max_wavelength`, ...) and `keras.layers.Layer`'s.

    Call arguments:
        decoder_sequence: `(batch, seq, hidden_dim)`.
        encoder_sequence: `(batch, enc_seq, hidden_dim)` or None.
        decoder_padding_mask: `(batch, seq)` (with a cache: `(batch, max_len)`).
            Defaults to the incoming Keras mask (not with a cache).
        encoder_padding_mask: `(batch, enc_seq)`. Defaults to the Keras mask
            of `encoder_sequence`.
        decoder_attention_mask: bool `(batch, seq, seq)` for self-attention.
        self_attention_cache: `(batch, 2, max_len, heads, key_dim)`.
        self_attention_cache_update_index: int or scalar tensor.
        cross_attention_cache: `(batch, 2, enc_seq, heads, key_dim)` from
            `compute_cross_attention_cache`; replaces `encoder_sequence`.
        training: bool.
        return_attention_scores: bool. Also return the attention
            probabilities. Defaults to `False`.

    Returns:
        `(batch, seq, hidden_dim)` alone, or a tuple in this order: the
        outputs; the updated self-attention cache (when one was passed); the
        cross-attention cache (when one was passed); with
        `return_attention_scores`, the self-attention scores
        `(batch, heads, seq, seq)` (with a cache `(batch, heads, seq, max_len)`)
        and, when the block has cross-attention, the cross-attention scores
        `(batch, heads, seq, enc_seq)`. Masked keys (future, padded) get 0.

    Example:

    >>> import numpy as np
    >>> block = TransformerDecoderBlock(num_heads=2, intermediate_dim=32)
    >>> target, source = np.ones((2, 4, 8), "float32"), np.ones((2, 6, 8), "float32")
    >>> tuple(block(target, source).shape)
    (2, 4, 8)
    >>> cache = np.zeros((2, 2, 4, 2, 4), "float32")  # (batch, 2, max_len, heads, head_dim)
    >>> out, cache, cross = block(target[:, :1], self_attention_cache=cache, self_attention_cache_update_index=0,
    ...                           cross_attention_cache=block.compute_cross_attention_cache(source))
    >>> tuple(out.shape)
    (2, 1, 8)
    """

    causal_routing = True  # a token's expert slot never depends on later tokens

    def __init__(self, num_heads, intermediate_dim, attention_window=None, attention_scale=None, use_qkv_bias=True,
                 **kwargs):
        super().__init__(num_heads, intermediate_dim, **kwargs)
        if attention_window is not None:
            check_positive_ints(attention_window=attention_window)
        self.attention_window, self.attention_scale, self.use_qkv_bias = attention_window, attention_scale, use_qkv_bias

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        hidden_dim = self._check_width(decoder_sequence_shape, "decoder_sequence")
        options = dict(attention_scale=self.attention_scale, use_qkv_bias=self.use_qkv_bias)
        self.self_attention = self._attention(hidden_dim, "self_attention", rotary=True,
                                              attention_window=self.attention_window, **options)
        self.self_attention.build(decoder_sequence_shape, decoder_sequence_shape)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.self_attention_norm.build(decoder_sequence_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self.cross_attention = None
        if encoder_sequence_shape is not None:
            self._check_width(encoder_sequence_shape, "encoder_sequence")
            self.cross_attention = self._attention(hidden_dim, "cross_attention", **options)
            self.cross_attention.build(decoder_sequence_shape, encoder_sequence_shape)
            self.cross_attention_norm = self._norm("cross_attention_norm")
            self.cross_attention_norm.build(decoder_sequence_shape)
            self.cross_attention_dropout = self._dropout("cross_attention_dropout")
        self._build_feed_forward(decoder_sequence_shape)
        self.built = True

    def compute_cross_attention_cache(self, encoder_sequence):
        """Cross-attention keys/values, once per source: `(batch, 2, enc_seq, heads, key_dim)`."""
        if self.cross_attention is None:
            raise ValueError("This block was built without an `encoder_sequence`: it has no cross-attention.")
        return self.cross_attention.compute_cache(encoder_sequence)

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        decoder_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        training=None,
        mask=None,
        encoder_sequence_mask=None,
        return_attention_scores=False,
    ):
        if decoder_padding_mask is None and self_attention_cache is None:
            decoder_padding_mask = mask  # a step's own Keras mask does not cover the cache
        if encoder_padding_mask is None:
            encoder_padding_mask = encoder_sequence_mask
        has_source = encoder_sequence is not None or cross_attention_cache is not None
        if has_source and self.cross_attention is None:
            raise ValueError(
                "This block was built without an `encoder_sequence`, so it has no cross-attention; "
                "build it by calling it with `encoder_sequence` first."
            )
        if self.cross_attention is not None and not has_source:
            raise ValueError(
                "This block has cross-attention: pass `encoder_sequence` or `cross_attention_cache`. "
                "Received: encoder_sequence=None, cross_attention_cache=None"
            )
        if self_attention_cache is not None and self_attention_cache_update_index is None:
            raise ValueError(
                "`self_attention_cache_update_index` is required with `self_attention_cache`. "
                "Received: self_attention_cache_update_index=None"
            )
        cached = self_attention_cache is not None
        if cached and decoder_padding_mask is not None:  # (batch, max_len) over the cache
            cache_mask = ops.cast(decoder_padding_mask, "bool")[:, None, :]
            decoder_attention_mask = cache_mask if decoder_attention_mask is None else \
                ops.logical_and(ops.cast(decoder_attention_mask, "bool"), cache_mask)

        def self_attend(h):
            return self.self_attention(
                h, h,
                query_mask=None if cached else decoder_padding_mask,
                value_mask=None if cached else decoder_padding_mask,
                attention_mask=decoder_attention_mask,
                use_causal_mask=True,
                cache=self_attention_cache,
                cache_update_index=self_attention_cache_update_index,
                return_attention_scores=return_attention_scores,
                training=training,
            )

        # Each attention returns (output, [cache], [scores]): caches first, then scores.
        x, extras = self._residual(decoder_sequence, self_attend, self.self_attention_norm,
                                   self.self_attention_dropout, training)
        caches, scores = extras[:int(cached)], extras[int(cached):]
        if self.cross_attention is not None:
            def cross_attend(h):
                return self.cross_attention(
                    h,
                    None if cross_attention_cache is not None else encoder_sequence,
                    query_mask=None if cached else decoder_padding_mask,
                    value_mask=encoder_padding_mask,
                    cache=cross_attention_cache,
                    return_attention_scores=return_attention_scores,
                    training=training,
                )

            x, cross_extras = self._residual(x, cross_attend, self.cross_attention_norm,
                                             self.cross_attention_dropout, training)
            cross_cached = int(cross_attention_cache is not None)
            caches, scores = caches + cross_extras[:cross_cached], scores + cross_extras[cross_cached:]
        x = self._run_feed_forward(x, None if cached else decoder_padding_mask, training)
        extras = caches + scores
        return (x,) + extras if extras else x

    def get_config(self):
        return {**super().get_config(), "attention_window": self.attention_window,
                "attention_scale": self.attention_scale, "use_qkv_bias": self.use_qkv_bias}
