"""Per-expert load of each mixture-of-experts layer: bars of the token choices each expert got and kept."""

import numpy as np

from kformer.layers.moe import MixtureOfExperts
from kformer.viz._common import grid, pyplot, remove_unused, to_numpy


def plot_expert_load(model_or_layers, figsize=None):
    """One bar chart per `MixtureOfExperts` layer: the share of the token choices each expert received.

    The numbers are the routing of the last training batch, which each
    layer records in its state (`MixtureOfExperts.routing_statistics`). A
    bar's solid part is what the expert processed, the hatched part what it
    dropped over its capacity; the dashed line is an even split (`1 /
    num_experts`), the dotted one the capacity (`capacity_factor /
    num_experts` of a sequence's choices). A router that sends everything to
    one expert shows as one tall bar, mostly hatched.

    Args:
        model_or_layers: a task with `transformer_blocks()` (`CausalLM`,
            `ViTImageClassifier`) whose blocks have experts, or a list of
            `MixtureOfExperts` layers.
        figsize: `(width, height)` in inches, or None (4.2 x 3.2 per panel).

    Returns:
        `matplotlib.figure.Figure`: one axes per expert layer, titled with
        the layer's block, balancing loss and dropped share.

    Example:

    >>> import matplotlib; matplotlib.use("Agg")
    >>> import numpy as np
    >>> moe = MixtureOfExperts(num_experts=4, intermediate_dim=8, top_k=2)
    >>> _ = moe(np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32"), training=True)
    >>> fig = plot_expert_load([moe])
    >>> len(fig.axes), len(fig.axes[0].patches)  # 4 kept bars and 4 dropped bars
    (1, 8)
    """
    named = _expert_layers(model_or_layers)
    plt = pyplot()
    rows, columns = grid(len(named), 3)
    fig, axes = plt.subplots(rows, columns, squeeze=False, layout="constrained",
                             figsize=figsize or (4.2 * columns, 3.2 * rows))
    for ax, (name, layer) in zip(remove_unused(axes, len(named)), named):
        stats = {key: to_numpy(value) for key, value in layer.routing_statistics().items()}
        total = float(stats["routed_tokens"].sum())
        if total <= 0:
            raise ValueError(f"The expert layer {name!r} has no recorded routing: it records the batches of "
                             "`fit` (training=True); train the model for a step first.")
        experts = np.arange(layer.num_experts)
        kept, dropped = stats["kept_tokens"] / total, (stats["routed_tokens"] - stats["kept_tokens"]) / total
        ax.bar(experts, kept, color="tab:blue", label="kept")
        ax.bar(experts, dropped, bottom=kept, color="white", edgecolor="tab:red", hatch="///",
               label="dropped (over capacity)")
        ax.axhline(1.0 / layer.num_experts, color="black", linestyle="--", linewidth=1, label="even split")
        ax.axhline(layer.capacity_factor / layer.num_experts, color="gray", linestyle=":", linewidth=1,
                   label="capacity")
        ax.set_title(f"{name}: balancing loss {float(stats['balancing_loss']):.3f}, "
                     f"dropped {100 * float(stats['dropped_fraction']):.1f}%", fontsize=9)
        ax.set_xlabel("expert")
        ax.set_ylabel("share of token choices")
        ax.set_xticks(experts)
        ax.set_ylim(0, max(1.05 * float((kept + dropped).max()), 1.3 * layer.capacity_factor / layer.num_experts))
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    return fig


def _expert_layers(model_or_layers):
    """[(name, MixtureOfExperts)] of a task's blocks, or of a list of layers."""
    if hasattr(model_or_layers, "transformer_blocks"):
        _, encoder_blocks, decoder_blocks = model_or_layers.transformer_blocks()
        named = [(block.name, block.feed_forward) for block in [*encoder_blocks, *decoder_blocks]
                 if getattr(block, "num_experts", 0)]
    elif isinstance(model_or_layers, (list, tuple)) and all(
            isinstance(layer, MixtureOfExperts) for layer in model_or_layers):
        named = [(layer.name, layer) for layer in model_or_layers]
    else:
        raise ValueError("`model_or_layers` must be a kformer task (with `transformer_blocks()`) or a list of "
                         f"MixtureOfExperts layers. Received: {type(model_or_layers).__name__}")
    if not named:
        raise ValueError("`model_or_layers` has no mixture-of-experts layer (build the model with "
                         f"`num_experts > 0`). Received: {getattr(model_or_layers, 'name', model_or_layers)!r}")
    return named
