"""What encoder and decoder blocks share: arguments, sublayer factories, residuals."""

import keras
from keras.src.backend.common import masking  # private: see `Rematerializable`

from kformer.layers.attention import MultiHeadAttention
from kformer.layers.checks import check_positive_floats, check_positive_ints, check_rates, clone_initializer
from kformer.layers.feed_forward import FeedForward
from kformer.layers.moe import MixtureOfExperts


class Rematerializable:
    """Mixin of the blocks: under `kformer.models.remat_blocks()` (a `keras.RematScope` naming them), the
    block's forward computation runs again in the backward pass instead of keeping its activations.

    Keras hands the block's keyword arguments to the backend's checkpoint as keywords, and
    TensorFlow's `recompute_grad` takes none in a graph; here every float tensor among them (the
    encoder output a decoder attends) is passed by position, so it gets its gradient on every
    backend, and the rest (masks, `training`, None) is bound. The inputs' Keras masks, which the
    checkpoint's copies of them lose, are put back on the copies (Keras's private `masking` helpers:
    keras is pinned in constraints.txt; tests/training/test_remat.py checks a masked translator).
    """

    def _check_rematerializable(self):
        """Refuse, when built under a scope that names this block, what a recomputation would not repeat
        exactly: dropout (Keras draws its masks from a seed state the first pass has already advanced; on
        JAX the draw fails inside the checkpoint) and experts' load-balancing loss (added in the forward
        pass)."""
        mode = self._remat_mode
        if mode is None or not (mode.mode == "full" or self.name in (mode.layer_names or ())):
            return
        if getattr(self, "num_experts", 0):
            raise ValueError(f"Block {self.name!r} has {self.num_experts} experts, whose load-balancing loss is added "
                             "in the forward pass; it cannot be rematerialized. Build the mixture-of-experts "
                             "model outside `remat_blocks()`.")
        rates = {k: getattr(self, k, 0.0) for k in ("dropout", "attention_dropout") if getattr(self, k, 0.0)}
        if rates:
            shown = ", ".join(f"{k}={v}" for k, v in rates.items())
            raise ValueError(f"Block {self.name!r} has {shown}: the recomputation would draw other dropout masks "
                             "than the forward pass (Keras's RematScope does not replay random draws). Build it "
                             "with dropout=0 (and attention_dropout=0) to rematerialize it.")

    def rematerialized_call(self, layer_call, *args, **kwargs):
        checkpointed = super().rematerialized_call(layer_call, *args, **kwargs)
        if checkpointed is layer_call:
            return layer_call

        def call(*positional, **keywords):
            tensors = [k for k, v in keywords.items() if hasattr(v, "shape") and "float" in str(v.dtype)]
            bound = {k: v for k, v in keywords.items() if k not in tensors}
            masks = [masking.get_keras_mask(x) for x in positional]

            def forward(*flat):
                for x, mask in zip(flat, masks):  # the checkpoint's copies of the inputs lose the Keras masks
                    masking.set_keras_mask(x, mask)  # the sublayers read (an attention's query_mask)
                return layer_call(*flat[:len(positional)], **bound, **dict(zip(tensors, flat[len(positional):])))

            return keras.remat(forward)(*positional, *(keywords[k] for k in tensors))

        return call


class TransformerBlock(Rematerializable, keras.layers.Layer):
    """Base of the encoder and decoder blocks (not registered, not used alone).

    Args:
        num_heads: int. Attention heads; must divide the input width.
        intermediate_dim: int. Hidden width of the feed-forward.
        dropout: float. Residual dropout on each sublayer output (paper 5.4).
        activation: Feed-forward activation. Defaults to `"relu"`.
        normalize_first: bool. `False`: post-norm `LN(x + f(x))` as in the
            paper; `True`: pre-norm `x + f(LN(x))`.
        attention_dropout: float. Dropout on attention probabilities; it
            disables the fused attention kernel while training. Defaults to `0.0`.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        key_dim: int. Per-head size. Defaults to `width // num_heads`.
        num_experts: int. `> 0` replaces the feed-forward by a
            `MixtureOfExperts`. Defaults to `0`.
        top_k, capacity_factor, aux_loss_weight: `MixtureOfExperts` arguments.
        kernel_initializer: Defaults to `"glorot_uniform"`.
        rotary_max_wavelength: int or None. Rotary positions (RoPE) in the
            self-attention. Defaults to `None`.
        **kwargs: Passed to `keras.layers.Layer`.
    """

    causal_routing = False  # mixture-of-experts slots in sequence order (`MixtureOfExperts(causal=)`)

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.0,
        activation="relu",
        normalize_first=False,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-5,
        key_dim=None,
        num_experts=0,
        top_k=1,
        capacity_factor=1.25,
        aux_loss_weight=0.01,
        kernel_initializer="glorot_uniform",
        rotary_max_wavelength=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_ints(num_heads=num_heads, intermediate_dim=intermediate_dim)
        check_rates(dropout=dropout, attention_dropout=attention_dropout)
        check_positive_floats(layer_norm_epsilon=layer_norm_epsilon)
        if not isinstance(num_experts, int) or isinstance(num_experts, bool) or num_experts < 0:
            raise ValueError(f"`num_experts` must be an int >= 0. Received: num_experts={num_experts}")
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.normalize_first = normalize_first
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.key_dim = key_dim
        self.num_experts = num_experts
        self.top_k = top_k
        self.capacity_factor = capacity_factor
        self.aux_loss_weight = aux_loss_weight
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.rotary_max_wavelength = rotary_max_wavelength
        self.supports_masking = True
        self._check_rematerializable()

    def _check_width(self, inputs_shape, name):
        if len(inputs_shape) != 3:
            raise ValueError(
                f"`{name}` must be (batch, seq, hidden_dim). Received: {name}.shape={tuple(inputs_shape)}"
            )
        hidden_dim = inputs_shape[-1]
        if self.key_dim is None and hidden_dim % self.num_heads:
            raise ValueError(
                "The hidden size must be divisible by `num_heads`. Received: "
                f"hidden_dim={hidden_dim} ({name}.shape={tuple(inputs_shape)}), "
                f"num_heads={self.num_heads}"
            )
        return hidden_dim

    def _attention(self, hidden_dim, name, rotary=False, **options):
        """A `MultiHeadAttention`; `options` (a decoder's `attention_window`, ...) are passed on."""
        return MultiHeadAttention(
            self.num_heads,
            self.key_dim or hidden_dim // self.num_heads,
            dropout=self.attention_dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            rotary_max_wavelength=self.rotary_max_wavelength if rotary else None,
            dtype=self.dtype_policy,
            name=name,
            **options,
        )

    def _norm(self, name):
        return keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def _dropout(self, name):
        return keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _feed_forward(self):
        if self.num_experts:
            return MixtureOfExperts(
                self.num_experts,
                self.intermediate_dim,
                top_k=self.top_k,
                capacity_factor=self.capacity_factor,
                activation=self.activation,
                aux_loss_weight=self.aux_loss_weight,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                causal=self.causal_routing,
                dtype=self.dtype_policy,
                name="mixture_of_experts",
            )
        return FeedForward(
            self.intermediate_dim,
            activation=self.activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="feed_forward",
        )

    def _residual(self, x, sublayer, norm, dropout, training):
        """Post-norm `LN(x + f(x))` or pre-norm `x + f(LN(x))`.

        `sublayer(h)` returns the output, or a tuple whose first item is the
        output (the rest, e.g. caches, is returned after the new `x`).
        """
        out = sublayer(norm(x) if self.normalize_first else x)
        out, extra = (out[0], tuple(out[1:])) if isinstance(out, tuple) else (out, ())
        y = x + self._drop(dropout, out, training)
        return (y if self.normalize_first else norm(y)), extra

    def _drop(self, dropout, x, training):
        """Residual dropout; no layer call when it cannot act (inference or rate 0): fewer calls per decoding step."""
        if self.dropout == 0 or training is None or training is False:
            return x
        return dropout(x, training=training)

    def _run_feed_forward(self, x, padding_mask, training):
        def feed_forward(h):
            if self.num_experts:
                return self.feed_forward(h, padding_mask=padding_mask, training=training)
            return self.feed_forward(h, training=training)

        return self._residual(x, feed_forward, self.feed_forward_norm,
                              self.feed_forward_dropout, training)[0]

    def _build_feed_forward(self, inputs_shape):
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(inputs_shape)
        self.feed_forward_norm = self._norm("feed_forward_norm")
        self.feed_forward_norm.build(inputs_shape)
        self.feed_forward_dropout = self._dropout("feed_forward_dropout")

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "activation": keras.activations.serialize(self.activation),
            "normalize_first": self.normalize_first,
            "attention_dropout": self.attention_dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "key_dim": self.key_dim,
            "num_experts": self.num_experts,
            "top_k": self.top_k,
            "capacity_factor": self.capacity_factor,
            "aux_loss_weight": self.aux_loss_weight,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "rotary_max_wavelength": self.rotary_max_wavelength,
        }
