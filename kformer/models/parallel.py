"""Model parallelism: a `keras.distribution.LayoutMap` for kformer's transformer weights.

Megatron-LM (Shoeybi et al. 2019, section 3) splits each block so that one
all-reduce follows attention and one follows the feed-forward network:
query/key/value kernels and the first feed-forward kernel are split by
column (heads, hidden units), the attention output and second feed-forward
kernels by row. Token embeddings are split along the hidden dimension (any
vocabulary size works), a mixture of experts by expert. Everything else
(norms, positions, heads) is replicated.
"""

import keras

from kformer.models.registry import get_preset

# (regex on `variable.path`, spec with "model" for the model axis); each path matches at most one.
_RULES = (
    (r".*/(query|key|value)/kernel", (None, "model", None)),  # (hidden, heads, head_dim)
    (r".*/(query|key|value)/bias", ("model", None)),  # (heads, head_dim)
    (r".*/attention_output/kernel", ("model", None, None)),  # (heads, head_dim, hidden)
    (r".*/mlp_in/kernel", (None, "model")),  # (hidden, intermediate)
    (r".*/mlp_in/bias", ("model",)),
    (r".*/mlp_out/kernel", ("model", None)),  # (intermediate, hidden)
    (r"(.*/)?token_embedding/embeddings", (None, "model")),  # (vocabulary, hidden)
    (r".*/(inner|outer)_kernel", ("model", None, None)),  # (experts, in, out)
    (r".*/(inner|outer)_bias", ("model", None)),  # (experts, out)
)
# The sizes each split divides, read from a preset or a model's config.
_DIVIDED = ("num_heads", "intermediate_dim", "hidden_dim", "num_experts")


def layout_map(model_or_preset, mesh, model_axis="model", **overrides):
    """A LayoutMap that shards `model_or_preset`'s weights over `mesh`'s `model_axis`.

    Use it with `keras.distribution.ModelParallel` before building the model.

    Args:
        model_or_preset: a kformer model or backbone, or a preset name (its
            sizes, with `overrides`, are checked against the mesh).
        mesh: `keras.distribution.DeviceMesh` with a `model_axis` (the other
            axis carries the batch).
        model_axis: str. The mesh axis the weights are split over. Defaults to
            `"model"`.
        **overrides: builder arguments that replace a preset's sizes.

    Returns:
        `keras.distribution.LayoutMap`.

    Example:

    >>> import keras
    >>> mesh = keras.distribution.DeviceMesh((1, 1), ["batch", "model"], keras.distribution.list_devices()[:1])
    >>> layout = layout_map("transformer_base", mesh)
    >>> tuple(layout["decoder_0/self_attention/query/kernel"].axes)
    (None, 'model', None)
    """
    if not isinstance(mesh, keras.distribution.DeviceMesh):
        raise TypeError(f"`mesh` must be a keras.distribution.DeviceMesh. Received: mesh={mesh!r}")
    if model_axis not in mesh.axis_names:
        raise ValueError(f"`model_axis` must be one of the mesh's axes {list(mesh.axis_names)}. "
                         f"Received: model_axis={model_axis!r}")
    splits = mesh.shape[list(mesh.axis_names).index(model_axis)]
    sizes = _sizes(model_or_preset, overrides)
    for name in _DIVIDED:
        value = sizes.get(name)
        if isinstance(value, int) and value > 1 and value % splits:
            raise ValueError(f"`{name}` must split evenly over the {splits} devices of mesh axis {model_axis!r} "
                             f"(or pick a mesh whose {model_axis!r} axis divides it). Received: {name}={value}")
    layout = keras.distribution.LayoutMap(mesh)
    for pattern, spec in _RULES:
        layout[pattern] = tuple(model_axis if axis == "model" else axis for axis in spec)
    return layout


def _sizes(model_or_preset, overrides):
    if isinstance(model_or_preset, str):
        return {**get_preset(model_or_preset), **overrides}
    if isinstance(model_or_preset, keras.Model):
        config = model_or_preset.get_config()
        backbone = getattr(model_or_preset, "backbone", None)
        if isinstance(backbone, keras.Model):  # BERT tasks keep their sizes in the backbone
            config = {**backbone.get_config(), **config}
        return {**config, **overrides}
    raise TypeError("`model_or_preset` must be a kformer model or a preset name (kformer.models.list_models()). "
                    f"Received: model_or_preset={model_or_preset!r}")
