"""peft LoRA adapter folders in and out: `from_pretrained(source, adapter=FOLDER)` and
`save_pretrained(folder, adapter_only=True)`.

A peft adapter folder holds `adapter_config.json` (rank `r`, `lora_alpha`, `target_modules`,
`fan_in_fan_out`, ...) and `adapter_model.safetensors`: for each adapted torch module `M` of the
base model, `base_model.model.M.lora_A.weight` `(r, in)` and `lora_B.weight` `(out, r)`, the update
to `M`'s weight being `(lora_alpha / r) B A` (transposed for GPT-2's `Conv1D`, `fan_in_fan_out`),
plus the trained copies of `modules_to_save` (a classifier head) under their own names.

The family's tensor table (`table(task)`, the one `save_pretrained` and the loaders use) names
the torch module of every kformer kernel, its layout and, for GPT-2's fused `c_attn`, which
third of the output is which projection. So `A` and `B` map as the weight does: `A^T` to the
kernel's input axes, `B^T` to its output axes (`kformer.layers.lora`), the fused `B` split in
three with `A` shared. Writing goes the other way; a fused module whose three projections do
not share one `A` is written exactly with the rank summed (`rank_pattern`) and `B` block-diagonal.
"""

import numpy as np
from keras import ops

from kformer.layers.lora import base_kernels
from kformer.models import lora
from kformer.models.pretrained.common import (LINEAR, assign_all, read_json, read_safetensors, to_hf, to_kformer,
                                              write_folder, write_json)

CONFIG, WEIGHTS, PREFIX = "adapter_config.json", "adapter_model.safetensors", "base_model.model."
# adapter_config.json fields for what kformer's adapters do not compute: refused unless at their default
UNSUPPORTED = {"use_dora": False, "lora_bias": False, "layer_replication": None, "target_parameters": None,
               "trainable_token_indices": None, "use_qalora": False, "alora_invocation_tokens": None,
               "use_bdlora": None}
# peft's `task_type` per task (the class peft wraps the model in). None for a Translator: peft 0.21's
# SEQ_2_SEQ_LM class needs a method transformers 5's MarianMTModel no longer has; the plain class computes the same.
TASK_TYPES = {"BertTextClassifier": "SEQ_CLS", "CausalLM": "CAUSAL_LM", "BertBackbone": "FEATURE_EXTRACTION"}


def _modules(task, family):
    """{torch module name: [(Entry, kformer layer), ...]} for every kernel in the `family` module's table
    that LoRA can adapt (a Dense or EinsumDense), the table itself, and {older module name: name} for a
    family transformers 5 renamed (ViT: `module_name`)."""
    rename = getattr(family, "module_name", lambda name: name)
    layers = {id(layer._kernel): layer for layer in task._flatten_layers()
              if hasattr(layer, "enable_lora") and hasattr(layer, "_kernel")}
    with base_kernels(task):  # the table then holds the kernel variables themselves
        table = family.table(task)
    modules, older = {}, {}
    for entry in table:
        layer = layers.get(id(entry.variable))
        if layer is not None and entry.name.endswith(".weight") and entry.axes in (None, LINEAR):
            name = rename(entry.name[:-len(".weight")])
            older[entry.name[:-len(".weight")]] = name
            modules.setdefault(name, []).append((entry, layer))
    return modules, table, older


def _in_out(entry):
    """The torch module's (in, out) features from its weight's table entry."""
    out, inputs = entry.shape if entry.axes == LINEAR else entry.shape[::-1]  # Conv1D weights are (in, out)
    return inputs, out


def load_adapter(task, folder, family):
    """Apply the peft LoRA adapter in `folder` to `task` (loaded from the adapter's base checkpoint;
    `family`: its `kformer.models.pretrained` family module).

    The adapted kformer layers get the adapter's factors (their outputs then equal the peft
    model's), the `modules_to_save` tensors replace the head's weights, and only the adapters and
    the head stay trainable, as in peft. Everything is checked before anything is assigned.

    Raises:
        ValueError: the folder is not a LoRA adapter, uses an option kformer does not compute
            (DoRA, LoRA biases, ...), or names a module or shape this task does not have.
    """
    import pathlib

    folder = pathlib.Path(folder)
    if not (folder / CONFIG).is_file():
        raise ValueError(f"`adapter`={str(folder)!r} is not a peft adapter folder (no {CONFIG}).")
    config = read_json(folder / CONFIG)
    file = folder / WEIGHTS
    if not file.is_file():
        found = "adapter_model.bin (a pickle, which kformer does not read)" if (folder / "adapter_model.bin").exists() \
            else "nothing"
        raise ValueError(f"{folder} has no {WEIGHTS} (found {found}); save the adapter with safetensors.")
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{folder / CONFIG}: `peft_type`={config.get('peft_type')!r}; kformer applies LoRA adapters "
                         "(peft_type 'LORA') only.")
    for name, default in UNSUPPORTED.items():
        if config.get(name, default) not in (default, [], {}):
            raise ValueError(f"{folder / CONFIG}: `{name}`={config[name]!r} is not something kformer's LoRA "
                             f"computes (expected {default!r}); the adapter was not applied.")
    if config.get("bias", "none") != "none":
        raise ValueError(f"{folder / CONFIG}: `bias`={config['bias']!r}: kformer's adapters train no biases "
                         "(expected 'none'); the adapter was not applied.")
    modules, table, older = _modules(task, family)
    tensors = {}
    for name, array in read_safetensors(file).items():
        name = name[len(PREFIX):] if name.startswith(PREFIX) else name
        module, dot, rest = name.partition(".lora_")
        tensors[older.get(module, module) + dot + rest if dot else name] = array
    adapted = sorted({name.rsplit(".lora_", 1)[0] for name in tensors if ".lora_" in name})
    unknown = [name for name in adapted if name not in modules]
    if unknown:
        raise ValueError(f"{file} adapts {unknown[:3]} ({len(unknown)} in all), which are not linear modules of the "
                         f"{type(task).__name__}'s checkpoint layout (e.g. {sorted(modules)[:2]}); the adapter was "
                         "not applied.")
    ranks, alphas = config.get("rank_pattern") or {}, config.get("alpha_pattern") or {}
    layers, pairs = {}, []
    for module in adapted:
        a = _take(tensors, f"{module}.lora_A.weight", file)
        b = _take(tensors, f"{module}.lora_B.weight", file)
        rank = a.shape[0]
        inputs, out = _in_out(modules[module][0][0])
        if a.shape != (rank, inputs) or b.shape != (out, rank):
            raise ValueError(f"{file}: `{module}` has lora_A {a.shape} and lora_B {b.shape}; its weight needs "
                             f"({rank}, {inputs}) and ({out}, {rank}).")
        expected = _pattern(ranks, module, config.get("r"))
        if expected is not None and int(expected) != rank:
            raise ValueError(f"{folder / CONFIG} gives `{module}` rank {expected}, but its tensors have rank {rank}.")
        alpha = float(_pattern(alphas, module, config.get("lora_alpha", 8)))
        scale = alpha / np.sqrt(rank) if config.get("use_rslora") else alpha / rank
        for entry, layer in modules[module]:
            up = b.T  # (r, out)
            if entry.part is not None:
                index, count = entry.part
                width = out // count
                up = up[:, index * width:(index + 1) * width]
            layers[layer.path] = (rank, scale * rank)  # kformer scales by alpha / rank
            pairs.append((layer, a.T, up))
    head = [entry for entry in table if entry.name in tensors and ".lora_" not in entry.name]
    left = sorted(set(tensors) - {e.name for e in head} - {n for n in tensors if ".lora_" in n})
    if left:
        raise ValueError(f"{file} holds {left[:3]} ({len(left)} in all), which are neither LoRA factors nor "
                         f"weights of the {type(task).__name__}; the adapter was not applied.")
    head_pairs = _head_pairs(tensors, head)
    lora.adapt(task, layers)
    assign_all([(layer.lora_kernel_a, np.reshape(down, tuple(layer.lora_kernel_a.shape)))
                for layer, down, _ in pairs]
               + [(layer.lora_kernel_b, np.reshape(up, tuple(layer.lora_kernel_b.shape))) for layer, _, up in pairs]
               + head_pairs)
    return task


def _take(tensors, name, file):
    if name not in tensors:
        raise ValueError(f"{file} has no tensor {PREFIX + name!r}.")
    return np.asarray(tensors[name], dtype=np.float32)


def _pattern(patterns, module, default):
    """peft's per-module override: the first key that is the module's name or ends it after a dot."""
    for key, value in patterns.items():
        if module == key or module.endswith("." + key):
            return value
    return default


def _head_pairs(tensors, entries):
    """[(variable, array)] for `modules_to_save` tensors (a head's weights) in the checkpoint layout."""
    return to_kformer(tensors, entries, file=WEIGHTS)


def save_adapter(task, folder, family, overwrite=False):
    """Write `task`'s LoRA adapters (and a classifier's head) as a peft adapter folder (`family`: the
    task's `kformer.models.pretrained` family module).

    `peft.PeftModel.from_pretrained(base, folder)` over the base checkpoint
    (`save_pretrained` of the task before its adapters were trained, or the checkpoint it was
    loaded from) then computes the same logits. Written atomically.

    Raises:
        ValueError: no adapters, or an adapted layer the family's layout has no module for.
    """
    config = lora.lora_config(task)
    if config is None:
        raise ValueError(f"This {type(task).__name__} has no LoRA adapters to write (`adapter_only=True`): call "
                         "`enable_lora` first, or save the whole model with `adapter_only=False`.")
    modules, table, _ = _modules(task, family)
    adapted = {layer.path for layer in lora.adapted_layers(task)}
    placed = {layer.path for items in modules.values() for _, layer in items}
    unplaced = sorted(adapted - placed)
    if unplaced:
        raise ValueError(f"Adapted layers {unplaced[:3]} have no module in the {type(task).__name__}'s Hugging Face "
                         "layout; nothing was written.")
    tensors, ranks, alphas, fused = {}, {}, {}, False
    for module, items in modules.items():
        items = [(entry, layer) for entry, layer in items if layer.path in adapted]
        if not items:
            continue
        down, up, rank, alpha = _module_factors(items)
        tensors[f"{PREFIX}{module}.lora_A.weight"] = down
        tensors[f"{PREFIX}{module}.lora_B.weight"] = up
        ranks[module], alphas[module] = rank, alpha
        fused |= items[0][0].part is not None
    rank = max(set(ranks.values()), key=list(ranks.values()).count)
    alpha = max(set(alphas.values()), key=list(alphas.values()).count)
    heads = [entry for entry in table if any(entry.variable is v for layer in lora.head_layers(task)
                                             for v in layer.weights)]
    tensors.update({PREFIX + name: array for name, array in to_hf(heads).items()})
    adapter_config = {
        "peft_type": "LORA", "task_type": TASK_TYPES.get(type(task).__name__), "base_model_name_or_path": None,
        "r": int(rank), "lora_alpha": alpha, "lora_dropout": 0.0, "bias": "none",
        "target_modules": _target_modules(ranks, modules),
        "fan_in_fan_out": any(entry.axes is None for items in modules.values() for entry, _ in items),
        "modules_to_save": sorted({entry.name.rsplit(".", 1)[0] for entry in heads}) or None,
        "rank_pattern": {m: int(r) for m, r in ranks.items() if r != rank},
        "alpha_pattern": {m: a for m, a in alphas.items() if a != alpha},
        "use_rslora": False, "use_dora": False, "init_lora_weights": True, "inference_mode": True}
    return write_folder(folder, {CONFIG: write_json(adapter_config), WEIGHTS: tensors}, overwrite)


def _target_modules(adapted, modules):
    """peft's `target_modules`: a short name ("query") where every module of that name is adapted, the
    full names otherwise (peft would add zero adapters to the others; exact, but not what was trained)."""
    names = []
    for short in sorted({module.rsplit(".", 1)[-1] for module in adapted}):
        every = [module for module in modules if module.rsplit(".", 1)[-1] == short]
        names += [short] if all(module in adapted for module in every) else sorted(m for m in every if m in adapted)
    return names


def _factors(layer):
    """A `(r, in)` and B `(out, r)` as peft holds them, and the scale `alpha / rank`."""
    down = np.asarray(ops.convert_to_numpy(layer.lora_kernel_a), np.float32)
    up = np.asarray(ops.convert_to_numpy(layer.lora_kernel_b), np.float32)
    return down.reshape(-1, down.shape[-1]).T, up.reshape(up.shape[0], -1).T, layer.lora_alpha / layer.lora_rank


def _module_factors(items):
    """One torch module's (A, B, rank, alpha) from its kformer layers (one, or a fused module's parts)."""
    entry, layer = items[0]
    if entry.part is None:
        down, up, scale = _factors(layer)
        return down, up, down.shape[0], float(layer.lora_alpha)
    count = entry.part[1]
    inputs, out = _in_out(entry)
    width = out // count
    parts = {e.part[0]: _factors(layer) for e, layer in items}
    first = next(iter(parts.values()))
    if len(parts) == count and all(np.array_equal(p[0], first[0]) and p[2] == first[2] for p in parts.values()):
        # one A shared by the parts (as peft trains a fused module): the module's own rank
        up = np.concatenate([parts[i][1] for i in range(count)], axis=0)
        return first[0], up, first[0].shape[0], float(first[2] * first[0].shape[0])
    # parts with their own A (kformer trains query, key and value apart): stacked, B block-diagonal,
    # each part's scale folded into its block, the module's scale 1 (alpha = rank)
    rank = sum(p[0].shape[0] for p in parts.values())
    down, up, start = np.zeros((rank, inputs), np.float32), np.zeros((out, rank), np.float32), 0
    for index in sorted(parts):
        a, b, scale = parts[index]
        down[start:start + a.shape[0]] = a
        up[index * width:(index + 1) * width, start:start + a.shape[0]] = b * scale
        start += a.shape[0]
    return down, up, rank, float(rank)
