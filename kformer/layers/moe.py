"""Mixture-of-experts feed-forward with a learned top-k router (Switch / GShard)."""

import fractions
import math

import keras
from keras import ops

from kformer.layers.checks import check_positive_ints, check_rates, clone_initializer


@keras.saving.register_keras_serializable(package="kformer")
class MixtureOfExperts(keras.layers.Layer):
    """Sparse feed-forward: each token is processed by its `top_k` experts.

    A float32 router picks the experts; each sequence is a routing group and
    each expert takes at most `capacity = ceil(capacity_factor * top_k * seq /
    num_experts)` tokens of it (first choices first, as in GShard; with
    `causal=True`, in sequence order, so that whether a token is kept depends
    only on it and the tokens before it, as a decoder needs); tokens over
    capacity get a zero output, so the residual passes them through (Switch
    Transformer, Fedus et al. 2021). Capacity is a training device: outside
    training every token reaches its `top_k` experts, so a decoder's full
    pass gives the same outputs as its cached steps (one token at a time,
    which no capacity can cut). The load-balancing loss
    `num_experts * sum_e f_e * P_e` (f: fraction of tokens whose first choice
    is e, P: mean router probability of e) is added with `add_loss`, scaled by
    `aux_loss_weight`; it is 1 for perfectly balanced routing. Each training
    call (`training=True`) also records its batch's routing in non-trainable
    float32 state: `balancing_loss` (unscaled), `routed_tokens` and
    `kept_tokens` `(num_experts,)` (token choices per expert, before and after
    the capacity cut); `routing_statistics()` reads them.

    Args:
        num_experts: int. Number of expert feed-forwards.
        intermediate_dim: int. Hidden width of each expert.
        top_k: int. Experts per token. Defaults to `1` (Switch); `2` is GShard.
        capacity_factor: float. Slack over an even split, in training. Defaults to `1.25`.
        activation: Expert activation. Defaults to `"relu"`.
        dropout: float. Dropout on expert hidden activations. Defaults to `0.0`.
        aux_loss_weight: float. Weight of the balancing loss. Defaults to `0.01`.
        kernel_initializer: Defaults to `"glorot_uniform"`. Each expert's
            kernel is initialized as a `Dense` kernel of its own shape
            (`expert_initializer`).
        causal: bool. Fill expert slots in sequence order (token by token,
            each token's choices in rank order) instead of all first choices
            first. Decoder blocks set it. Defaults to `False`.
        **kwargs: Passed to `keras.layers.Layer`.

    Call arguments:
        inputs: `(batch, seq, dim)`.
        padding_mask: `(batch, seq)`, True = real token; padded tokens are not
            routed and take no capacity. Defaults to the incoming Keras mask.

    Returns:
        `(batch, seq, dim)`.

    Example:

    >>> import numpy as np
    >>> moe = MixtureOfExperts(num_experts=4, intermediate_dim=16, top_k=2)
    >>> out = moe(np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32"))
    >>> tuple(out.shape), len(moe.losses)  # the load-balancing loss is added
    ((2, 6, 8), 1)
    """

    def __init__(
        self,
        num_experts,
        intermediate_dim,
        top_k=1,
        capacity_factor=1.25,
        activation="relu",
        dropout=0.0,
        aux_loss_weight=0.01,
        kernel_initializer="glorot_uniform",
        causal=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_ints(num_experts=num_experts, intermediate_dim=intermediate_dim)
        if not isinstance(causal, bool):
            raise ValueError(f"`causal` must be a bool. Received: causal={causal!r}")
        self.causal = causal
        check_rates(dropout=dropout)
        if not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
            raise ValueError(
                f"`top_k` must be an int in [1, num_experts={num_experts}]. Received: top_k={top_k}"
            )
        if capacity_factor <= 0:
            raise ValueError(
                f"`capacity_factor` must be positive. Received: capacity_factor={capacity_factor}"
            )
        self.num_experts = num_experts
        self.intermediate_dim = intermediate_dim
        self.top_k = top_k
        self.capacity_factor = capacity_factor
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.aux_loss_weight = aux_loss_weight
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        self.router = keras.layers.Dense(
            num_experts, use_bias=False, dtype="float32", name="router",
            kernel_initializer=clone_initializer(self.kernel_initializer),
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, inputs_shape):
        dim = inputs_shape[-1]
        self.router.build(inputs_shape)
        experts, hidden = self.num_experts, self.intermediate_dim
        self.inner_kernel = self.add_weight(
            name="inner_kernel", shape=(experts, dim, hidden),
            initializer=expert_initializer(self.kernel_initializer, experts),
        )
        self.inner_bias = self.add_weight(name="inner_bias", shape=(experts, hidden), initializer="zeros")
        self.outer_kernel = self.add_weight(
            name="outer_kernel", shape=(experts, hidden, dim),
            initializer=expert_initializer(self.kernel_initializer, experts),
        )
        self.outer_bias = self.add_weight(name="outer_bias", shape=(experts, dim), initializer="zeros")
        # The last training batch's routing (diagnostics, not parameters); `routing_statistics()`.
        state = dict(initializer="zeros", dtype="float32", trainable=False, aggregation="only_first_replica")
        self.balancing_loss_value = self.add_weight(name="balancing_loss", shape=(), **state)
        self.routed_tokens = self.add_weight(name="routed_tokens", shape=(experts,), **state)
        self.kept_tokens = self.add_weight(name="kept_tokens", shape=(experts,), **state)
        self.built = True

    def capacity(self, sequence_length):
        """Slots per expert for a group of `sequence_length` tokens."""
        if isinstance(sequence_length, int):
            slots = self.capacity_factor * self.top_k * sequence_length / self.num_experts
            return max(1, min(sequence_length, math.ceil(slots)))
        if ops.is_tensor(sequence_length):
            slots = self.capacity_factor * self.top_k * ops.cast(sequence_length, "float32") / self.num_experts
            return ops.clip(ops.cast(ops.ceil(slots), "int32"), 1, sequence_length)
        # A symbolic dimension (JAX's shape inference of an unknown length): integer arithmetic only; a
        # capacity over the length just leaves slots empty.
        ratio = fractions.Fraction(self.capacity_factor * self.top_k / self.num_experts).limit_denominator(10**6)
        return -(-(sequence_length * ratio.numerator) // ratio.denominator)

    def route(self, inputs, padding_mask=None, training=None):
        """Router decisions for `inputs` `(batch, seq, dim)`.

        With `training=True` each expert takes at most `capacity(seq)` tokens;
        otherwise every token keeps its `top_k` choices (capacity `seq`).

        Returns a dict: `router_probs` `(batch, seq, experts)`, `expert_index`
        and `gates` `(batch, seq, top_k)`, and the float32 `dispatch` and
        `combine` tensors `(batch, seq, experts, capacity)`.
        """
        seq = inputs.shape[1] if inputs.shape[1] is not None else ops.shape(inputs)[1]
        k, experts = self.top_k, self.num_experts
        probs = ops.softmax(self.router(ops.cast(inputs, "float32")), axis=-1)
        gates, index = ops.top_k(probs, k)  # (batch, seq, k)
        if k > 1:
            gates = gates / ops.sum(gates, axis=-1, keepdims=True)
        choice = ops.one_hot(index, experts, dtype="float32")  # (batch, seq, k, experts)
        if padding_mask is not None:
            choice = choice * ops.cast(padding_mask, "float32")[:, :, None, None]
        if self.causal:  # slots fill token by token: a token's slot never depends on later tokens
            position = ops.cumsum(ops.reshape(choice, (-1, seq * k, experts)), axis=1) - 1.0
            position = ops.reshape(position, (-1, seq, k, experts))
        else:  # every token's first choice, then second choices, ... (GShard)
            by_rank = ops.reshape(ops.transpose(choice, (0, 2, 1, 3)), (-1, k * seq, experts))
            position = ops.cumsum(by_rank, axis=1) - 1.0  # (batch, k * seq, experts)
            position = ops.transpose(ops.reshape(position, (-1, k, seq, experts)), (0, 2, 1, 3))
        capacity = self.capacity(seq) if training else seq  # inference drops no token
        kept = choice * ops.cast(position < ops.cast(capacity, "float32"), "float32")
        slots = ops.cast(ops.arange(capacity), "float32")
        slot = ops.cast(ops.equal(position[..., None], slots), "float32") * kept[..., None]
        return {
            "router_probs": probs,
            "expert_index": index,
            "gates": gates,
            "dispatch": ops.sum(slot, axis=2),  # (batch, seq, experts, capacity)
            "combine": ops.sum(slot * gates[..., None, None], axis=2),
        }

    def balancing_loss(self, routing, padding_mask=None):
        """`num_experts * sum_e f_e * P_e` over the real tokens."""
        first = ops.one_hot(routing["expert_index"][..., 0], self.num_experts, dtype="float32")
        probs = routing["router_probs"]
        if padding_mask is None:
            weights = ops.ones(ops.shape(probs)[:2], "float32")
        else:
            weights = ops.cast(padding_mask, "float32")
        count = ops.maximum(ops.sum(weights), 1.0)
        fraction = ops.sum(first * weights[..., None], axis=(0, 1)) / count
        mean_prob = ops.sum(probs * weights[..., None], axis=(0, 1)) / count
        return self.num_experts * ops.sum(fraction * mean_prob)

    def routing_statistics(self):
        """The last training batch's routing, from this layer's state (zeros before any training step).

        Returns:
            dict of float32 tensors: `balancing_loss` (unscaled, 1 = balanced),
            `routed_tokens` and `kept_tokens` `(num_experts,)` (token choices
            per expert before and after the capacity cut), `dropped_tokens`
            (choices over capacity) and `dropped_fraction` (of all choices).
        """
        routed, kept = ops.convert_to_tensor(self.routed_tokens), ops.convert_to_tensor(self.kept_tokens)
        dropped = ops.sum(routed) - ops.sum(kept)
        return {"balancing_loss": ops.convert_to_tensor(self.balancing_loss_value), "routed_tokens": routed,
                "kept_tokens": kept, "dropped_tokens": dropped,
                "dropped_fraction": dropped / ops.maximum(ops.sum(routed), 1.0)}

    def _record(self, routing, balancing_loss, padding_mask):
        routed = ops.sum(ops.one_hot(routing["expert_index"], self.num_experts, dtype="float32"), axis=2)
        if padding_mask is not None:
            routed = routed * ops.cast(padding_mask, "float32")[:, :, None]
        self.balancing_loss_value.assign(balancing_loss)
        self.routed_tokens.assign(ops.sum(routed, axis=(0, 1)))  # (experts,)
        self.kept_tokens.assign(ops.sum(routing["dispatch"], axis=(0, 1, 3)))

    def call(self, inputs, padding_mask=None, training=None, mask=None):
        if len(inputs.shape) != 3:
            raise ValueError(
                f"`inputs` must be (batch, seq, dim). Received: inputs.shape={tuple(inputs.shape)}"
            )
        if inputs.shape[1] == 0:  # an empty sequence: no token to route, nothing to compute
            return ops.zeros_like(inputs)
        padding_mask = mask if padding_mask is None else padding_mask
        routing = self.route(inputs, padding_mask, training=training)
        balancing_loss = self.balancing_loss(routing, padding_mask)
        if self.aux_loss_weight:
            self.add_loss(self.aux_loss_weight * balancing_loss)
        if training is True:  # fit's steps only: inference and decoding loops leave the state alone
            self._record(routing, balancing_loss, padding_mask)
        dispatch = ops.cast(routing["dispatch"], inputs.dtype)
        combine = ops.cast(routing["combine"], inputs.dtype)
        x = ops.einsum("bsec,bsd->becd", dispatch, inputs)  # (batch, experts, capacity, dim)
        x = ops.einsum("becd,edf->becf", x, self.inner_kernel) + self.inner_bias[None, :, None, :]
        x = self.dropout_layer(self.activation(x), training=training)
        x = ops.einsum("becf,efd->becd", x, self.outer_kernel) + self.outer_bias[None, :, None, :]
        return ops.einsum("bsec,becd->bsd", combine, x)  # (batch, seq, dim)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_experts": self.num_experts,
            "intermediate_dim": self.intermediate_dim,
            "top_k": self.top_k,
            "capacity_factor": self.capacity_factor,
            "activation": keras.activations.serialize(self.activation),
            "dropout": self.dropout,
            "aux_loss_weight": self.aux_loss_weight,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "causal": self.causal,
        }


def expert_initializer(initializer, num_experts):
    """`initializer` for an `(num_experts, fan_in, fan_out)` kernel, each expert drawn as a `Dense` kernel
    `(fan_in, fan_out)` would be.

    Keras counts a 3-D kernel's leading axis into both fans, as a convolution's
    receptive field, so a variance-scaling initializer (Glorot, He, LeCun)
    would draw every expert with `num_experts` times too small a variance;
    its scale is multiplied back. Other initializers do not use the fans and
    are returned as they are (a fresh copy).

    Example:

    >>> import numpy as np
    >>> kernel = np.asarray(expert_initializer("glorot_uniform", 8)((8, 128, 256)))
    >>> round(float(kernel.std() / np.sqrt(2 / (128 + 256))), 1)  # Glorot's standard deviation for (128, 256)
    1.0
    """
    initializer = clone_initializer(initializer)
    if not isinstance(initializer, keras.initializers.VarianceScaling):
        return initializer
    return keras.initializers.VarianceScaling(
        scale=initializer.scale * num_experts, mode=initializer.mode,
        distribution=initializer.distribution, seed=initializer.seed,
    )
