"""Hugging Face `ViTForImageClassification` checkpoints as kformer `ViTImageClassifier`s, exact.

`config.json` gives the architecture, `preprocessor_config.json` (`ViTImageProcessor`) the pixel
normalization, which the kformer model applies itself from 0-255 pixels (`pixel_mean`,
`pixel_std`), so exports do too. The model's numbers equal the reference on the same resized
pixels; the resize itself differs slightly (kformer: `tf.image.resize` bilinear, Hugging Face:
PIL bilinear with antialiasing when shrinking).
"""

import json
import math
import re

from kformer.models.pretrained.common import (CONV, Entry, assign_all, check_sizes, field, linear, norm, read_weights,
                                               refuse, to_hf, to_kformer, write_folder, write_json)

ARCHITECTURES = ("ViTForImageClassification",)
TASKS = (None, "image_classification")
PREPROCESSOR_FILE = "preprocessor_config.json"
PROCESSORS = ("ViTImageProcessor", "ViTImageProcessorFast", "ViTImageProcessorPil", "ViTFeatureExtractor")
UNUSED = ("vit.pooler.",)  # ViTModel's pooler: not part of the classifier
BILINEAR = 2  # PIL.Image.BILINEAR, `ViTImageProcessor`'s default `resample`


def load(folder, config, task=None, num_classes=None, class_names=None, **kwargs):
    """A `ViTImageClassifier` (with its `ImageClassifierPreprocessor` and class names) from `folder`.

    Args:
        folder: pathlib.Path. Holds `config.json`, `model.safetensors` and optionally
            `preprocessor_config.json` (without it, `ViTImageProcessor`'s defaults: mean and
            std 0.5 per channel).
        config: dict. `config.json`.
        task: None or `"image_classification"` (the checkpoint's head).
        num_classes: int or None. Another number of classes than the checkpoint's: a new, randomly
            initialized head (for fine-tuning). Defaults to the checkpoint's (`id2label`).
        class_names: list of str or None. Names for the classes (their number sets `num_classes`
            when that is None); with the checkpoint's number of classes its head is kept.
        **kwargs: none other is accepted.

    Every unsupported value, missing tensor or shape mismatch is a ValueError naming the file and
    the field, raised before any weight is assigned.
    """
    from kformer.data.preprocessors import ImageClassifierPreprocessor
    from kformer.models.vit import ViTImageClassifier

    if task not in TASKS:
        raise ValueError(f"A ViT checkpoint loads as an image classifier: `task` must be one of {list(TASKS)}. "
                         f"Received: task={task!r}")
    if kwargs:
        raise ValueError(f"A ViT checkpoint takes `task`, `num_classes` and `class_names`. Received: {sorted(kwargs)}")
    arguments = _model_arguments(config)
    if class_names is not None:
        class_names = [str(name) for name in class_names]
        num_classes = len(class_names) if num_classes is None else num_classes
    if num_classes is not None:
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2 or (
                class_names is not None and len(class_names) != num_classes):
            raise ValueError(f"`num_classes` must be an int >= 2 (the length of `class_names` when both are given). "
                             f"Received: num_classes={num_classes!r}, class_names={class_names!r}")
        new_head = num_classes != arguments["num_classes"]
        arguments["num_classes"] = num_classes
        if class_names is not None or new_head:
            arguments["class_names"] = class_names
    else:
        new_head = False
    pixels = _pixel_arguments(folder, arguments["image_size"], arguments["channels"])
    weights = read_weights(folder)
    _check_sizes(weights, arguments)
    model = ViTImageClassifier(**arguments, **pixels, preprocessor=ImageClassifierPreprocessor(
        arguments["image_size"], arguments["channels"]))
    pairs = _pairs(model, weights, arguments, new_head)
    assign_all(pairs)
    return model


def _model_arguments(config):
    """`config.json` -> `ViTImageClassifier` arguments; a ValueError for what kformer cannot represent."""
    architectures = config.get("architectures") or list(ARCHITECTURES)  # absent or null: transformers' default
    if not isinstance(architectures, list) or not any(a in ARCHITECTURES for a in architectures):
        raise ValueError(f"config.json: `architectures`={architectures!r}: kformer loads ViT image classifiers "
                         f"({list(ARCHITECTURES)}) only; the checkpoint was not loaded.")
    field(config, "hidden_act", "gelu", allowed={"gelu"})  # erf GELU, as Keras's "gelu" (approximate=False)
    field(config, "qkv_bias", True, allowed={True})
    ints = {name: _int(config, name, default) for name, default in (
        ("image_size", 224), ("patch_size", 16), ("num_channels", 3), ("hidden_size", 768),
        ("num_hidden_layers", 12), ("num_attention_heads", 12), ("intermediate_size", 3072))}
    field(config, "num_channels", 3, allowed={1, 3})
    if ints["image_size"] % ints["patch_size"]:
        raise ValueError(f"config.json: `image_size`={ints['image_size']} is not divisible by `patch_size`="
                         f"{ints['patch_size']}; the checkpoint was not loaded.")
    if ints["hidden_size"] % ints["num_attention_heads"]:
        raise ValueError(f"config.json: `hidden_size`={ints['hidden_size']} is not divisible by "
                         f"`num_attention_heads`={ints['num_attention_heads']}; the checkpoint was not loaded.")
    names = _class_names(config)
    epsilon = config.get("layer_norm_eps", 1e-12)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon < math.inf:
        raise ValueError(f"config.json: `layer_norm_eps`={epsilon!r} must be a positive number; the checkpoint "
                         "was not loaded.")
    return dict(image_size=ints["image_size"], patch_size=ints["patch_size"], channels=ints["num_channels"],
                hidden_dim=ints["hidden_size"], num_layers=ints["num_hidden_layers"],
                num_heads=ints["num_attention_heads"], intermediate_dim=ints["intermediate_size"],
                layer_norm_epsilon=float(epsilon), num_classes=len(names), class_names=names)


def _check_sizes(weights, arguments):
    """config.json's sizes against the tensors, before anything is built (a stranger's config can ask for
    a model of any size)."""
    hidden, patch = arguments["hidden_dim"], arguments["patch_size"]
    check_sizes(weights, {"num_hidden_layers": (arguments["num_layers"], r"vit\.encoder\.layer\.(\d+)\."),
                          "hidden_size": (hidden, "vit.embeddings.cls_token", 2),
                          "patch_size": (patch, "vit.embeddings.patch_embeddings.projection.weight", 2),
                          "num_channels": (arguments["channels"], "vit.embeddings.patch_embeddings.projection.weight",
                                           1),
                          "intermediate_size": (arguments["intermediate_dim"],
                                                "vit.encoder.layer.0.intermediate.dense.bias", 0)})
    positions = weights.get("vit.embeddings.position_embeddings")
    tokens = (arguments["image_size"] // patch) ** 2 + 1
    if positions is not None and positions.ndim == 3 and positions.shape[1] != tokens:
        raise ValueError(f"config.json: `image_size`={arguments['image_size']} with `patch_size`={patch} makes "
                         f"{tokens} positions, but model.safetensors holds tensor 'vit.embeddings.position_embeddings'"
                         f" of shape {tuple(positions.shape)}; the checkpoint was not loaded (nothing was built).")


def _int(config, name, default):
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config.json: `{name}`={value!r} must be a positive int (kformer takes square images "
                         "and patches); the checkpoint was not loaded.")
    return value


def _class_names(config):
    """id2label as a list in id order (ids 0..n-1), checked against `num_labels`."""
    id2label = config.get("id2label")
    if id2label is None:  # transformers' default: two labels
        id2label = {"0": "LABEL_0", "1": "LABEL_1"}
    if not isinstance(id2label, dict) or not all(isinstance(v, str) for v in id2label.values()):
        raise ValueError(f"config.json: `id2label` must map class ids to names. Received: {id2label!r}")
    try:
        labels = {int(k): v for k, v in id2label.items()}
    except (TypeError, ValueError):
        raise ValueError(f"config.json: `id2label` keys must be class ids. Received: {sorted(id2label)[:5]}") from None
    if sorted(labels) != list(range(len(labels))) or len(labels) < 2:
        raise ValueError(f"config.json: `id2label` must name the classes 0..n-1 (n >= 2). Received ids: "
                         f"{sorted(labels)[:10]}; the checkpoint was not loaded.")
    num_labels = config.get("num_labels", len(labels))
    if num_labels != len(labels):
        raise ValueError(f"config.json: `num_labels`={num_labels!r} but `id2label` names {len(labels)} classes; "
                         "the checkpoint was not loaded.")
    return [labels[i] for i in range(len(labels))]


def _pixel_arguments(folder, image_size, channels):
    """`preprocessor_config.json` -> `pixel_mean` / `pixel_std`, refusing what the kformer preprocessor
    and model do not do (another resample, crop, rescale factor or output size)."""
    path = folder / PREPROCESSOR_FILE
    if path.is_file():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f"{path} is not valid JSON: {err}") from None
        if not isinstance(config, dict):
            raise ValueError(f"{path} must hold a JSON object. Received: {type(config).__name__}")
    else:
        config = {}
    name = PREPROCESSOR_FILE

    def check(key, default, allowed):
        return field(config, key, default, allowed=allowed, file=name)

    kind = config.get("image_processor_type", config.get("feature_extractor_type", "ViTImageProcessor"))
    if kind not in PROCESSORS:
        raise ValueError(f"{name}: `image_processor_type`={kind!r} cannot be represented exactly by kformer "
                         f"(supported: {list(PROCESSORS)}); the checkpoint was not loaded.")
    check("do_center_crop", False, {False, None})
    check("do_pad", False, {False, None})
    check("resample", BILINEAR, {BILINEAR})
    size = config.get("size", {"height": image_size, "width": image_size})
    if config.get("do_resize", True) and size not in ({"height": image_size, "width": image_size}, image_size):
        raise ValueError(f"{name}: `size`={size!r}, but the model takes {image_size}x{image_size} images "
                         "(config.json `image_size`); the checkpoint was not loaded.")
    check("do_rescale", True, {True})
    factor = config.get("rescale_factor", 1 / 255)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isclose(factor, 1 / 255,
                                                                                           rel_tol=1e-9):
        raise ValueError(f"{name}: `rescale_factor`={factor!r} cannot be represented exactly by kformer "
                         f"(supported: 1/255); the checkpoint was not loaded.")
    if not config.get("do_normalize", True):
        return {}
    mean, std = (_channel_values(name, key, config.get(key, 0.5), channels, positive)
                 for key, positive in (("image_mean", False), ("image_std", True)))
    return {"pixel_mean": mean, "pixel_std": std}


def _channel_values(file, key, value, channels, positive):
    values = value if isinstance(value, list) else [value] * channels
    if len(values) != channels or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v > 0 or not positive)
            for v in values):
        raise ValueError(f"{file}: `{key}`={value!r} must be {channels} finite numbers (one per channel"
                         f"{', positive' if positive else ''}); the checkpoint was not loaded.")
    return [float(v) for v in values]


# transformers 5 names ViT's modules anew (`vit.layers.N.attention.q_proj`, ...) and still writes
# checkpoints with the older names of `table`; a peft adapter holds the module names of the
# transformers it was trained with: adapters for either load, and adapters are written with these.
MODULES = {"attention.attention.query": "attention.q_proj", "attention.attention.key": "attention.k_proj",
           "attention.attention.value": "attention.v_proj", "attention.output.dense": "attention.o_proj",
           "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2"}


def module_name(name):
    """transformers 5's module name for `table`'s `vit.encoder.layer.N.<part>` (others unchanged)."""
    match = re.fullmatch(r"vit\.encoder\.layer\.(\d+)\.(.+)", name)
    if match and match.group(2) in MODULES:
        return f"vit.layers.{match.group(1)}.{MODULES[match.group(2)]}"
    return name


def table(model, head=True):
    """The `Entry` table of a `ViTImageClassifier`: `ViTForImageClassification` tensor names
    (without the classifier when `head` is False)."""
    hidden, inner, patch = model.hidden_dim, model.intermediate_dim, model.patch_size
    tokens = (model.image_size // patch) ** 2 + 1
    embedding = model.patch_embedding
    entries = [Entry("vit.embeddings.cls_token", embedding.class_token, (1, 1, hidden)),
               Entry("vit.embeddings.position_embeddings", embedding.position_embedding.position_embeddings,
                     (1, tokens, hidden)),
               Entry("vit.embeddings.patch_embeddings.projection.weight", embedding.projection.kernel,
                     (hidden, model.channels, patch, patch), CONV),
               Entry("vit.embeddings.patch_embeddings.projection.bias", embedding.projection.bias, (hidden,))]
    for i, block in enumerate(model.encoder_blocks):
        prefix = f"vit.encoder.layer.{i}"
        attention = block.self_attention
        for name, layer in (("query", attention.query_dense), ("key", attention.key_dense),
                            ("value", attention.value_dense)):  # kernel (hidden, heads, head_dim)
            entries += linear(layer, f"{prefix}.attention.attention.{name}", hidden, hidden)
        entries += linear(attention.output_dense, f"{prefix}.attention.output.dense", hidden, hidden)
        entries += norm(block.self_attention_norm, f"{prefix}.layernorm_before", hidden)
        entries += linear(block.feed_forward.inner, f"{prefix}.intermediate.dense", hidden, inner)
        entries += linear(block.feed_forward.outer, f"{prefix}.output.dense", inner, hidden)
        entries += norm(block.feed_forward_norm, f"{prefix}.layernorm_after", hidden)
    entries += norm(model.final_norm, "vit.layernorm", hidden)
    return entries + (linear(model.head, "classifier", hidden, model.num_classes) if head else [])


def _pairs(model, weights, arguments, new_head=False):
    """[(kformer variable, array)] for every weight, each checkpoint tensor shape-checked (`take`)."""
    entries = table(model, head=not new_head)
    pairs = to_kformer(weights, entries)
    used = {entry.name for entry in entries}
    if new_head:  # another number of classes: the checkpoint's classifier is left out
        used.update({"classifier.weight", "classifier.bias"})
    unused = sorted(k for k in set(weights) - used if not k.startswith(UNUSED))
    if unused:  # e.g. more layers than config.json's num_hidden_layers: the two disagree
        raise ValueError(f"model.safetensors holds {len(unused)} tensors a ViTForImageClassification of this "
                         f"config.json does not have, e.g. {unused[:3]}; the checkpoint was not loaded.")
    return pairs


def save(task, folder, overwrite=False):
    """Write a `ViTImageClassifier` as a Hugging Face ViT folder (`ViTForImageClassification`).

    `config.json` (with `id2label` / `label2id`), `model.safetensors` and
    `preprocessor_config.json` (a `ViTImageProcessor` resizing to `image_size`, rescaling by 1/255
    and normalizing with the model's `pixel_mean` / `pixel_std`). A convolutional stem or
    mixture-of-experts blocks are a ValueError naming the attribute, raised before anything is
    written. kformer has no attention-probability dropout, so `attention_probs_dropout_prob` is 0.

    Args:
        task: the `ViTImageClassifier`.
        folder: the folder to write (atomically).
        overwrite: bool. Replace a non-empty `folder`. Defaults to `False`.

    Returns:
        `pathlib.Path(folder)`.
    """
    if task.stem_channels:
        raise refuse(task, "stem_channels", tuple(task.stem_channels), "ViT's patch embedding is one linear "
                     "projection, without a convolutional stem")
    if task.num_experts:
        raise refuse(task, "num_experts", task.num_experts, "ViT's blocks have one dense MLP each, no experts")
    names = list(task.class_names) if task.class_names else [f"LABEL_{i}" for i in range(task.num_classes)]
    config = {"model_type": "vit", "architectures": list(ARCHITECTURES), "image_size": task.image_size,
              "patch_size": task.patch_size, "num_channels": task.channels, "hidden_size": task.hidden_dim,
              "num_hidden_layers": task.num_layers, "num_attention_heads": task.num_heads,
              "intermediate_size": task.intermediate_dim, "hidden_act": "gelu", "qkv_bias": True,
              "layer_norm_eps": float(task.layer_norm_epsilon), "hidden_dropout_prob": float(task.dropout),
              "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02, "dtype": "float32",
              "id2label": {str(i): name for i, name in enumerate(names)},
              "label2id": {name: i for i, name in enumerate(names)}}
    normalize = task.pixel_mean is not None or task.pixel_std is not None
    processor = {"image_processor_type": "ViTImageProcessor", "do_resize": True, "resample": BILINEAR,
                 "size": {"height": task.image_size, "width": task.image_size}, "do_rescale": True,
                 "rescale_factor": 1 / 255, "do_normalize": normalize,
                 "image_mean": list(task.pixel_mean or [0.0] * task.channels),
                 "image_std": list(task.pixel_std or [1.0] * task.channels)}
    files = {"config.json": write_json(config), PREPROCESSOR_FILE: write_json(processor),
             "model.safetensors": to_hf(table(task))}
    return write_folder(folder, files, overwrite)
