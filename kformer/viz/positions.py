"""Heat maps of position information (positions x dimensions): sinusoidal, learned, rotary."""

import numpy as np
from keras import ops

from kformer import layers
from kformer.viz._common import pyplot, to_numpy

KINDS = {layers.SinusoidalPositionEncoding: "sinusoidal", layers.PositionEmbedding: "learned",
         layers.RotaryEmbedding: "rotary"}
EMBEDDINGS = ("token_embedding", "encoder_embedding", "patch_embedding")  # where tasks keep positions


def plot_positional_encoding(kind=None, sequence_length=None, hidden_dim=None, layer=None, cmap="RdBu_r",
                             figsize=(8.0, 4.5)):
    """Position encodings as a heat map: one row per position, one column per dimension.

    `"sinusoidal"`: "Attention Is All You Need" 3.5, sin on even and cos on
    odd dimensions, wavelengths growing along the dimensions. `"learned"`:
    the trained table of a `PositionEmbedding`. `"rotary"` (RoPE): the
    rotation of each feature pair `(i, i + dim/2)` at each position, drawn as
    `cos(position * theta_i)` and `sin(position * theta_i)` (what the layer
    does to a vector whose pairs are `(1, 0)`).

    Args:
        kind: `"sinusoidal"`, `"learned"` or `"rotary"`, or None to take it
            from `layer` (without a layer: `"sinusoidal"`).
        sequence_length: int. Positions shown. Defaults to all rows of a
            learned table, else the layer's `sequence_length` or `64`.
        hidden_dim: int. Dimensions (sinusoidal, rotary). Defaults to the
            layer's width, else `128`.
        layer: None (a fresh layer with default settings), a
            `SinusoidalPositionEncoding`, `PositionEmbedding` or
            `RotaryEmbedding`, a `TokenAndPositionEmbedding` /
            `PatchEmbedding`, or a task whose embedding holds one.
        cmap: matplotlib colormap (diverging, centred on 0). Defaults to `"RdBu_r"`.
        figsize: `(width, height)` in inches. Defaults to `(8.0, 4.5)`.

    Returns:
        `matplotlib.figure.Figure`: the heat map(s) and a colorbar.

    Example:

    >>> import matplotlib; matplotlib.use("Agg")
    >>> fig = plot_positional_encoding("sinusoidal", sequence_length=32, hidden_dim=16)
    >>> fig.axes[0].get_images()[0].get_array().shape  # (positions, dimensions)
    (32, 16)
    >>> len(plot_positional_encoding("rotary", sequence_length=32, hidden_dim=16).axes)  # cos, sin, colorbar
    3
    """
    source, width, length = (None, None, None) if layer is None else _position_layer(layer)
    found = "sinusoidal" if source is None else KINDS[type(source)]
    kind = kind or found
    if kind not in KINDS.values() or (source is not None and kind != found):
        match = "" if source is None else f" and match `layer` (a {found} position layer)"
        raise ValueError(f"`kind` must be one of {list(KINDS.values())}{match}. Received: kind={kind!r}")
    if kind == "learned":
        if source is None:
            raise ValueError("`kind='learned'` needs `layer`: a PositionEmbedding, an embedding holding "
                             "one, or a task. Received: layer=None")
        return _learned(source, layer, sequence_length, hidden_dim, cmap, figsize)
    length = sequence_length or length or 64
    dim = hidden_dim or width or 128
    if kind == "sinusoidal":
        source = source or layers.SinusoidalPositionEncoding()
        table = to_numpy(source(ops.zeros((1, length, dim))))[0].astype("float32")
        return _heat_maps([table], ["dimension (even: sin, odd: cos)"], [""], 1.0, cmap, figsize,
                          f"Sinusoidal position encoding (max_wavelength={source.max_wavelength})")
    if dim % 2:
        raise ValueError(f"Rotary embeddings need an even `hidden_dim`. Received: hidden_dim={dim}")
    source = source or layers.RotaryEmbedding()
    unit = np.concatenate([np.ones(dim // 2), np.zeros(dim // 2)]).astype("float32")  # pairs (1, 0)
    rotated = to_numpy(source(ops.broadcast_to(unit, (1, length, dim))))[0].astype("float32")  # [cos | sin]
    pair = f"rotation pair i (dims i, i + {dim // 2})"
    return _heat_maps([rotated[:, : dim // 2], rotated[:, dim // 2:]], [pair, pair],
                      ["cos(position · θ_i)", "sin(position · θ_i)"], 1.0, cmap, figsize,
                      f"Rotary embedding (max_wavelength={source.max_wavelength}, "
                      f"scaling_factor={source.scaling_factor})")


def _learned(source, layer, sequence_length, hidden_dim, cmap, figsize):
    if not source.built:
        raise ValueError("The PositionEmbedding is not built yet: call the layer (or build the model) first.")
    table = to_numpy(source.position_embeddings).astype("float32")  # (sequence_length, dim)
    if sequence_length is not None and not 0 < sequence_length <= len(table):
        raise ValueError(f"`sequence_length` must be in [1, {len(table)}] (rows of the learned table). "
                         f"Received: sequence_length={sequence_length}")
    if hidden_dim is not None and hidden_dim != table.shape[1]:
        raise ValueError(f"The learned table has {table.shape[1]} dimensions. "
                         f"Received: hidden_dim={hidden_dim}")
    table = table[:sequence_length]
    return _heat_maps([table], ["dimension"], [""], float(np.abs(table).max()) or 1.0, cmap, figsize,
                      f"Learned position embedding ({layer.name})")


def _position_layer(layer):
    """(position layer, width if known, sequence length if known) inside a layer or task."""
    original, width, length = layer, None, None
    for _ in range(4):  # task -> backbone -> embedding -> position layer
        width = getattr(layer, "hidden_dim", None) or width
        length = getattr(layer, "sequence_length", None) or length
        if type(layer) in KINDS:
            return layer, width, length
        if getattr(layer, "position_embedding", None) is not None:
            layer = layer.position_embedding
            continue
        owner = layer if getattr(layer, "backbone", None) is None else layer.backbone
        layer = next((getattr(owner, n) for n in EMBEDDINGS if getattr(owner, n, None) is not None), None)
        if layer is None:
            break
    raise ValueError("`layer` must be a position layer (SinusoidalPositionEncoding, PositionEmbedding, "
                     "RotaryEmbedding), an embedding holding one, or a task. Received: "
                     f"{type(original).__name__}")


def _heat_maps(tables, xlabels, titles, limit, cmap, figsize, suptitle):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(tables), figsize=figsize, layout="constrained", squeeze=False)
    for ax, table, xlabel, title in zip(axes[0], tables, xlabels, titles):
        image = ax.imshow(table, aspect="auto", cmap=cmap, vmin=-limit, vmax=limit, interpolation="nearest")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("position")
        ax.set_title(title)
    fig.colorbar(image, ax=list(axes[0]), shrink=0.9, label="value")
    fig.suptitle(suptitle)
    return fig
