"""LoRA on a kformer task: adapters on named projections, the rest frozen, adapters saved apart.

`enable_lora(model, rank, target_names, alpha)` adds a low-rank update to
every projection whose name is in `target_names` (Hu et al., 2021; Keras's
`Dense.enable_lora` for the feed-forward matrices, `kformer.layers.lora` for
the attention projections, both factored as peft factors them) and freezes
every other weight except the task's new head (`HEADS`). `save_lora_weights`
writes the adapters and the head to one small safetensors file with the
adapted layers, their ranks and alphas in its metadata; `load_lora_weights` puts them on a
fresh load of the same checkpoint. A `.keras` file, `save_pretrained` and
`export_for_serving` read the merged kernels (`kernel` is the base plus the
update), so what they write needs no LoRA to run.
"""

import json
import os
import pathlib

import numpy as np
from keras import ops

from kformer.layers.lora import LoraEinsumDense

# The projections `target_names` usually names: those of `MultiHeadAttention` (and the Conformer's relative
# attention) and of `FeedForward`. Any other Dense or EinsumDense layer's name is accepted too.
TARGETS = ("query", "key", "value", "attention_output", "mlp_in", "mlp_out")
# A task's new head, trained with the adapters (peft's `modules_to_save`): the classifiers' "logits", and
# the layers `from_pretrained` initialized because the checkpoint lacks them (`KformerModel.new_layers`).
HEADS = ("logits",)
FORMAT = "kformer-lora"


def _leaves(model):
    return [layer for layer in model._flatten_layers() if len(list(layer._flatten_layers())) == 1]


def head_layers(model):
    """The layers trained and saved with the adapters: `HEADS` and the model's `new_layers`."""
    names = set(HEADS) | set(getattr(model, "new_layers", ()))
    return [layer for layer in _leaves(model) if layer.name in names and layer.weights]


def adapted_layers(model):
    """The layers of `model` with LoRA adapters, in the model's order."""
    return [layer for layer in _leaves(model)
            if (layer.adapted if isinstance(layer, LoraEinsumDense) else getattr(layer, "lora_enabled", False))]


def lora_config(model):
    """`{"layers": {layer path: [rank, alpha]}, "target_names": [...]}` of `model`'s adapters, or None."""
    layers = adapted_layers(model)
    if not layers:
        return None
    return {"layers": {layer.path: [int(layer.lora_rank), float(layer.lora_alpha)] for layer in layers},
            "target_names": sorted({layer.name for layer in layers})}


def _check(rank, target_names, alpha):
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
        raise ValueError(f"`rank` must be a positive int. Received: rank={rank!r}")
    if (isinstance(target_names, str) or not isinstance(target_names, (list, tuple)) or not target_names
            or not all(isinstance(name, str) for name in target_names)):
        raise ValueError(f"`target_names` must be a non-empty list or tuple of layer names, e.g. from {list(TARGETS)}. "
                         f"Received: target_names={target_names!r}")
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.number))
                              or not np.isfinite(alpha) or alpha <= 0):
        raise ValueError(f"`alpha` must be a positive number or None (the rank). Received: alpha={alpha!r}")


def enable_lora(model, rank, target_names=("query", "value"), alpha=None):
    """Add rank-`rank` adapters to `model`'s projections named in `target_names`; freeze the rest.

    Every weight stops training except the adapters and the task's new head
    (a classifier's `logits`, and what `from_pretrained` initialized because the
    checkpoint lacks it, e.g. a BertForMaskedLM checkpoint's pooler); the outputs are unchanged until training (the
    `B` factors start at zero). Compile after enabling: Keras collects the
    trainable weights when it compiles.

    Args:
        model: the kformer task (built).
        rank: int. The adapters' rank `r`.
        target_names: layer names, usually from `TARGETS` (any `Dense` or `EinsumDense` name of the
            model, e.g. BERT's `"pooler"`, is accepted). Defaults to `("query", "value")`,
            keras-hub's and the paper's choice.
        alpha: float or None. The update is scaled by `alpha / rank`. Defaults to None
            (`rank`: a scale of 1, as Keras's).

    Returns:
        The adapted layers.

    Raises:
        ValueError: a bad argument, adapters already enabled, a name no projection of the model
            has, or a float8-quantized target.
    """
    _check(rank, target_names, alpha)
    leaves = [layer for layer in _leaves(model) if hasattr(layer, "enable_lora")]
    missing = [name for name in target_names if not any(layer.name == name for layer in leaves)]
    if missing:
        raise ValueError(f"`target_names` holds {missing}, which name no projection of this {type(model).__name__} "
                         f"(its projections: {sorted({layer.name for layer in leaves})}).")
    alpha = float(rank if alpha is None else alpha)
    return adapt(model, {layer.path: (int(rank), alpha) for layer in leaves if layer.name in target_names})


def adapt(model, layers):
    """Enable LoRA on `layers` (dict layer path -> (rank, alpha)), then train only the adapters and the
    new head. Checked first: nothing changes on an error."""
    present = lora_config(model)
    if present is not None:
        raise ValueError(f"LoRA is already enabled on this {type(model).__name__} ({len(present['layers'])} "
                         f"layers: {present['target_names']}); enable it once.")
    leaves = {layer.path: layer for layer in _leaves(model)}
    unknown = sorted(set(layers) - set(leaves))
    if unknown:
        raise ValueError(f"No layers {unknown[:3]} in this {type(model).__name__}.")
    for path in layers:
        layer = leaves[path]
        if not hasattr(layer, "enable_lora") or layer.quantization_mode not in (None, "int8", "int4"):
            raise ValueError(f"LoRA on layer {path!r} needs a Dense or EinsumDense with float, int8 or int4 weights; "
                             f"it is a {type(layer).__name__} quantized as {layer.quantization_mode!r}.")
    for path, (rank, alpha) in layers.items():
        leaves[path].enable_lora(int(rank), lora_alpha=float(alpha))
    adapted = [leaves[path] for path in layers]
    trained = {id(v) for layer in adapted for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    trained |= {id(v) for layer in head_layers(model) for v in layer.weights}
    model.trainable = True
    for variable in model.weights:
        variable.trainable = id(variable) in trained
    # as Keras's `quantize`: the traced train / test / predict steps do not read the new variables
    model.train_function = model.test_function = model.predict_function = None
    return adapted


def lora_tensors(model):
    """{variable path: array} of the adapters and the new head (what `save_lora_weights` writes)."""
    config = lora_config(model)
    if config is None:
        raise ValueError(f"This {type(model).__name__} has no LoRA adapters: call `enable_lora(rank)` first.")
    variables = [v for layer in adapted_layers(model) for v in (layer.lora_kernel_a, layer.lora_kernel_b)]
    variables += [v for layer in head_layers(model) for v in layer.weights]
    return {v.path: np.asarray(ops.convert_to_numpy(v), dtype=np.float32) for v in variables}


def save_lora_weights(model, path):
    """Write the adapters and the new head of `model` to `path` (safetensors, written atomically).

    The metadata holds the rank, alpha and targets, so `load_lora_weights`
    enables the same adapters on a fresh load.

    Returns:
        `pathlib.Path(path)`.
    """
    from kformer.models.pretrained.common import write_safetensors

    path = _check_path(path)
    if path.is_dir():
        raise ValueError(f"`path`={str(path)!r} is a folder; pass the file to write, e.g. 'adapter.lora.safetensors'.")
    tensors = lora_tensors(model)
    config = lora_config(model)
    metadata = {"format": FORMAT, "task": type(model).__name__, "layers": json.dumps(config["layers"])}
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_safetensors(path, tensors, metadata=metadata)


def load_lora_weights(model, path):
    """Put the adapters and head that `save_lora_weights` wrote onto `model` (a fresh load of the same
    checkpoint, or a model with the same adapters enabled). Nothing is assigned on a mismatch.

    Returns:
        The model's adapted layers.
    """
    from kformer.models.pretrained.common import assign_all, read_safetensors, read_safetensors_metadata

    path = _check_path(path)
    if not path.is_file():
        raise ValueError(f"`path`={str(path)!r} is not a file written by `save_lora_weights`.")
    metadata = read_safetensors_metadata(path)
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{path} is not a kformer LoRA file (its metadata has format="
                         f"{metadata.get('format')!r}, expected {FORMAT!r}); a peft adapter folder loads with "
                         "`from_pretrained(source, adapter=FOLDER)`.")
    saved = {path: [int(rank), float(alpha)] for path, (rank, alpha) in json.loads(metadata["layers"]).items()}
    layers = {layer.path for layer in _leaves(model)}
    absent = sorted(set(saved) - layers)
    if absent:
        raise ValueError(f"{path} does not fit this {type(model).__name__} (saved from a {metadata.get('task')!r}): "
                         f"it adapts layers {absent[:3]} ({len(absent)} in all) that this model does not have; "
                         "nothing was loaded.")
    present = lora_config(model)
    if present is None:
        adapt(model, saved)
    elif present["layers"] != saved:
        raise ValueError(f"{path} holds adapters on {len(saved)} layers that differ from this "
                         f"{type(model).__name__}'s {len(present['layers'])} (layer paths, ranks or alphas); "
                         "load it onto a model without adapters.")
    tensors = read_safetensors(path)
    expected = {v.path: v for layer in adapted_layers(model) for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    expected.update({v.path: v for layer in head_layers(model) for v in layer.weights})
    missing, unknown = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unknown:
        raise ValueError(f"{path} does not fit this {type(model).__name__} (saved from a "
                         f"{metadata.get('task')!r}): missing {missing[:3]}, unknown {unknown[:3]} "
                         f"({len(missing)} and {len(unknown)} in all); nothing was loaded.")
    assign_all([(expected[name], tensors[name]) for name in sorted(expected)])
    return adapted_layers(model)


def merged(model):
    """A copy of `model` without adapters whose kernels are the merged ones (through a `.keras` file,
    which holds them): what an export serves. `model` itself is returned when it has no adapters."""
    import tempfile

    from kformer.models.load import load

    if not adapted_layers(model):
        return model
    with tempfile.TemporaryDirectory(prefix="kformer-merge-") as folder:
        model.save(pathlib.Path(folder) / "merged.keras")
        return load(pathlib.Path(folder) / "merged.keras")


def _check_path(path):
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"`path` must be a str or path of a file. Received: path={path!r}")
    return pathlib.Path(path)


def check_keras_quantize(model):
    """`quantize` after `enable_lora` cannot merge: a clear error instead of Keras's."""
    config = lora_config(model)
    if config is not None:
        raise ValueError(f"This {type(model).__name__} has LoRA adapters ({config}): quantize before `enable_lora` "
                         "(QLoRA), or save it (merged) and quantize the loaded model.")

