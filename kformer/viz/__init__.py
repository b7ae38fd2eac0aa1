"""Plots for kformer models: attention maps, position encodings, ViT patch attention, training curves,
mixture-of-experts load.

Needs matplotlib (`pip install kformer[viz]`), imported when a plot is made,
not by `import kformer.viz`. Every function returns a `matplotlib.figure.Figure`
(save it with `fig.savefig(path)`; in a notebook it displays).
"""

from kformer.viz.attention import plot_attention
from kformer.viz.experts import plot_expert_load
from kformer.viz.history import plot_history
from kformer.viz.patches import plot_patch_attention
from kformer.viz.positions import plot_positional_encoding

__all__ = ["plot_attention", "plot_expert_load", "plot_history", "plot_patch_attention", "plot_positional_encoding"]
