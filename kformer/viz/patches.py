"""Where a ViT's class token looks: attention over the image patches (ViT paper, Figure 6)."""

import numpy as np
from keras import ops

from kformer.viz._common import pyplot, to_numpy
from kformer.viz._scores import attention_scores, block_calls, encode, parts

METHODS = ("rollout", "last")


def plot_patch_attention(vit, image, method="rollout", cmap="inferno", alpha=0.6, figsize=(11.0, 3.8)):
    """Class-token attention over the patches, upsampled to the image and overlaid on it.

    `method="rollout"` is attention rollout (Abnar & Zuidema 2020), which the
    ViT paper uses for Figure 6 (appendix D.8): per block, the attention
    averaged over heads plus the identity for the residual, rows
    renormalized, multiplied through all blocks; the class token's row over
    the patches is the map. `method="last"` is the last block's class-token
    attention averaged over heads. The map is scaled to a maximum of 1 and
    resized bilinearly to the image.

    Args:
        vit: `ViTImageClassifier` (a patch embedding with a class token).
        image: one image `(height, width, channels)` or `(1, height, width,
            channels)`, pixels 0-255. With the model's preprocessor, uint8
            images of any size and channel count; without one, exactly the
            model's input size.
        method: `"rollout"` or `"last"`. Defaults to `"rollout"`.
        cmap: matplotlib colormap of the overlay. Defaults to `"inferno"`.
        alpha: float. Opacity of the overlay. Defaults to `0.6`.
        figsize: `(width, height)` in inches. Defaults to `(11.0, 3.8)`.

    Returns:
        `matplotlib.figure.Figure`: the image, the map overlaid on it, the
        image multiplied by the map (as in the paper's figure), a colorbar.

    Example:

    >>> import matplotlib; matplotlib.use("Agg")
    >>> import numpy as np
    >>> from kformer.models import ViTImageClassifier
    >>> vit = ViTImageClassifier(image_size=8, patch_size=4, num_classes=2, channels=1, hidden_dim=8,
    ...                          num_layers=2, num_heads=2, intermediate_dim=16)
    >>> fig = plot_patch_attention(vit, np.full((8, 8, 1), 128, "uint8"))
    >>> [ax.get_title() for ax in fig.axes[:3]]
    ['image', 'class-token attention (rollout)', 'image × attention']
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}. Received: method={method!r}")
    owner, blocks, _ = parts(vit)
    embedding = getattr(owner, "patch_embedding", None)
    if embedding is None or not embedding.use_class_token:
        raise ValueError("`vit` must be a ViT task whose `patch_embedding` has a class token. "
                         f"Received: {type(vit).__name__}")
    image = np.asarray(to_numpy(image))
    if image.ndim == 4 and len(image) == 1:
        image = image[0]
    if image.ndim != 3:
        raise ValueError(f"`image` must be one image (height, width, channels). "
                         f"Received: shape={image.shape}")
    feed = np.asarray(encode(vit, image), "float32")  # (1, size, size, channels) with a preprocessor
    feed = feed if feed.ndim == 4 else feed[None]
    expected = tuple(owner.input.shape[1:])
    if tuple(feed.shape[1:]) != expected:
        raise ValueError(f"`image` must be {expected} for this model (it has no preprocessor to resize it). "
                         f"Received: shape={image.shape}")
    calls = block_calls(owner, blocks, feed)
    scores = [attention_scores(block, *call)["self"][0] for block, call in zip(blocks, calls)]
    heat = _rollout(scores) if method == "rollout" else scores[-1].mean(0)[0, 1:]
    side = expected[0] // embedding.patch_size
    heat = heat.reshape(side, side)  # patches are row-major (Conv2D output reshaped)
    heat = heat / max(float(heat.max()), 1e-12)
    upsampled = to_numpy(ops.image.resize(heat[None, :, :, None].astype("float32"), image.shape[:2],
                                          interpolation="bilinear"))[0, :, :, 0]
    return _draw(image, upsampled, method, cmap, alpha, figsize)


def _rollout(scores):
    """Attention rollout: prod over blocks of normalize(mean_heads(A) + I); class-token row over patches."""
    rollout = np.eye(scores[0].shape[-1])
    for attention in scores:  # (heads, tokens, tokens)
        a = attention.mean(0) + np.eye(attention.shape[-1])
        rollout = (a / a.sum(-1, keepdims=True)) @ rollout
    return rollout[0, 1:]


def _draw(image, heat, method, cmap, alpha, figsize):
    plt = pyplot()
    shown = np.clip(image.astype("float32") / 255.0, 0.0, 1.0)
    gray = shown.shape[-1] == 1
    shown = shown[..., 0] if gray else shown
    masked = shown * (heat if gray else heat[..., None])  # ViT paper Figure 6: image times the map
    fig, axes = plt.subplots(1, 3, figsize=figsize, layout="constrained")
    titles = ("image", f"class-token attention ({method})", "image × attention")
    for ax, title, pixels in zip(axes, titles, (shown, shown, masked)):
        ax.imshow(pixels, cmap="gray" if gray else None, vmin=0.0, vmax=1.0)
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
    overlay = axes[1].imshow(heat, cmap=cmap, alpha=alpha, vmin=0.0, vmax=1.0, interpolation="bilinear")
    legend = plt.cm.ScalarMappable(norm=overlay.norm, cmap=overlay.cmap)  # opaque colours in the bar
    fig.colorbar(legend, ax=list(axes), shrink=0.8, label="attention (max = 1)")
    return fig
