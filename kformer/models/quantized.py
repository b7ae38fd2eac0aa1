"""Quantized layers kept in a model's config, so a quantized kformer model saves, loads and exports.

Keras's `Model.quantize(mode)` swaps each supported layer's float weights for
quantized ones (int8 / int4 values and their scales; float8's scaling state).
A `.keras` file stores those variables, but a kformer model is rebuilt from
its constructor's arguments, which know nothing of quantization: the rebuilt
float layers would not match the saved variables. `KformerModel.get_config`
therefore records each quantized layer (`quantized_layers`), and
`from_config` quantizes the same layers of the rebuilt model
(`quantize_as_saved`) before Keras loads the saved values into them.
"""

import json

import keras


def _leaves(model):
    return [layer for layer in model._flatten_layers() if len(list(layer._flatten_layers())) == 1]


def quantized_layers(model):
    """dict layer path -> `{"mode": ..., "config": ...}` for every quantized layer of `model` (the
    mode as `Model.quantize` takes it, the layer's serialized `QuantizationConfig` or None)."""
    found = {}
    for layer in _leaves(model):
        if layer.quantization_mode is not None:
            config = getattr(layer, "quantization_config", None)
            found[layer.path] = {"mode": layer.quantization_mode,
                                 "config": None if config is None else keras.saving.serialize_keras_object(config)}
    return found


def quantize_as_saved(model, saved):
    """Quantize the layers of a freshly built `model` that `saved` (`quantized_layers` of the saved
    model) names, as they were, so the saved quantized variables load into them.

    Layers already quantized (a nested model's own `from_config` did them) are left as they are.

    Raises:
        ValueError: a saved path names no layer of `model`, or a layer of another mode.
    """
    if not saved:
        return
    leaves = {layer.path: layer for layer in _leaves(model)}
    missing = sorted(set(saved) - set(leaves))
    if missing:
        raise ValueError(f"The saved model's quantized layers {missing} are not layers of the rebuilt "
                         f"{type(model).__name__} (its layers: {sorted(leaves)[:8]}...).")
    groups = {}
    for path, entry in saved.items():
        layer = leaves[path]
        if layer.quantization_mode is None:
            groups.setdefault(json.dumps(entry, sort_keys=True), set()).add(path)
        elif layer.quantization_mode != entry["mode"]:
            raise ValueError(f"Layer {path!r} is quantized as {layer.quantization_mode!r}; the saved model's is "
                             f"{entry['mode']!r}.")
    for key, paths in groups.items():
        entry = json.loads(key)
        config = None if entry["config"] is None else keras.saving.deserialize_keras_object(entry["config"])
        model.quantize(entry["mode"], config=config, filters=lambda layer, paths=paths: layer.path in paths)


def check_float(model, what):
    """Raise a ValueError naming the first quantized layer of `model`: `what` (e.g. "save_pretrained")
    writes float weights only."""
    found = quantized_layers(model)
    if found:
        path, entry = next(iter(found.items()))
        raise ValueError(f"`{what}` writes float weights, and this {type(model).__name__} is quantized "
                         f"({len(found)} layers; the first, {path!r}, as {entry['mode']!r}). Call it on the float "
                         "model before `quantize`, or load the float checkpoint again; nothing was written.")
