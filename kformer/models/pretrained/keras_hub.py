"""keras-hub presets (`save_to_preset` folders, `kaggle://` handles) as kformer tasks, exact.

A keras-hub preset folder holds `config.json` (`{"class_name": "GPT2Backbone", "config": {...},
"registered_name": "keras_hub>GPT2Backbone"}`), `model.weights.h5`, `metadata.json`,
`assets/tokenizer/...` and, with a task, `task.json` + `task.weights.h5`. The weights are read
through keras-hub's own preset loader (the keras-hub model is built in the active backend, then
its variables are read), turned into the Hugging Face tensor names and layouts, and assigned by
the Hugging Face family tables (`bert`, `gpt2`, `vit`), so there is one table per family.

    GPT2Backbone (+ GPT2CausalLM)     -> CausalLM (tied embeddings, tanh GELU), GPT-2's BPE preprocessor
    ViTBackbone + ViTImageClassifier  -> ViTImageClassifier (the task's head, or a new one: `num_classes`)
    BertBackbone                      -> BertBackbone (activation="gelu_approximate"), or a new classifier head

What kformer cannot compute exactly is a ValueError naming the file, the field and the value,
raised before any weight is assigned. keras-hub's BERT computes the tanh-approximate GELU in its
encoder blocks (as Google's original BERT): kformer's `BertBackbone(activation="gelu_approximate")`.
Its masked-LM head normalizes with epsilon 1e-5 where kformer's uses the backbone's: refused by name. keras-hub's ViT preprocessor crops to the aspect ratio before resizing; kformer's
model numbers equal keras-hub's on the same resized pixels.
"""

import json
import pathlib

import numpy as np

from kformer.models.pretrained.common import assign_all, check_options, field, read_json, to_kformer

WEIGHTS_FILE = "model.weights.h5"
TASK_FILE, TASK_WEIGHTS_FILE = "task.json", "task.weights.h5"
BACKBONES = ("BertBackbone", "GPT2Backbone", "ViTBackbone")
_COMMON = {"name", "trainable", "dtype"}  # keras Layer config keys with no effect on the numbers
_FLOAT_POLICIES = {"float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16"}


def is_preset(config):
    """Whether a parsed `config.json` is keras-hub's (`class_name` / `registered_name`) rather than
    Hugging Face's (`model_type`).

    Args:
        config: dict. `config.json`.

    Returns:
        bool.

    Example:

    >>> is_preset({"class_name": "GPT2Backbone", "config": {}, "registered_name": "keras_hub>GPT2Backbone"})
    True
    >>> is_preset({"model_type": "gpt2"})
    False
    """
    return "model_type" not in config and ("class_name" in config or "registered_name" in config)


def load(folder, config, task=None, **kwargs):
    """A keras-hub preset folder as a kformer task with its preprocessor.

    Args:
        folder: pathlib.Path. The preset folder (`config.json`, `model.weights.h5`, `assets/`).
        config: dict. Its `config.json`.
        task: GPT-2: None, `"causal_lm"` or `"text_generation"`. ViT: None or
            `"image_classification"`.
        **kwargs: GPT-2: `dropout`, `name`, `dtype`, `preprocessor` (as for Hugging Face
            checkpoints). ViT: `num_classes` (a new, randomly initialized head; needed when the
            preset has no `ViTImageClassifier` task) and `class_names`.

    Returns:
        The kformer task, its weights equal to the preset's.

    Example:

        model = kformer.models.from_pretrained("presets/gpt2_tiny")  # keras-hub's save_to_preset
        model.generate("The movie", max_length=20)
    """
    folder = pathlib.Path(folder)
    class_name = config.get("class_name")
    if class_name not in BACKBONES:
        raise ValueError(f"{folder / 'config.json'}: `class_name`={class_name!r} is not a keras-hub backbone kformer "
                         f"loads; expected one of {list(BACKBONES)}.")
    if not isinstance(config.get("config"), dict):
        raise ValueError(f"{folder / 'config.json'}: `config` must be the backbone's arguments (a JSON object). "
                         f"Received: {config.get('config')!r}")
    if not (folder / WEIGHTS_FILE).is_file():
        raise ValueError(f"{folder} holds no {WEIGHTS_FILE}: a keras-hub preset needs config.json and "
                         f"{WEIGHTS_FILE} (found {sorted(p.name for p in folder.iterdir())[:10]}).")
    loader = {"BertBackbone": _load_bert, "GPT2Backbone": _load_gpt2, "ViTBackbone": _load_vit}[class_name]
    return loader(folder, config["config"], task, **kwargs)


# ---------------------------------------------------------------------------------------------
# Shared: reading the preset's config and variables


def _arguments(args, ints, floats=(), fixed=None, other=(), file="config.json"):
    """Checks a keras-hub backbone's `config`: positive ints, rates in [0, 1), `fixed` values, and no
    unknown key (a newer keras-hub option kformer does not know; `other`: keys the caller checks).
    Returns `args`."""
    fixed = fixed or {}
    unknown = sorted(set(args) - _COMMON - set(ints) - set(floats) - set(fixed) - set(other))
    if unknown:
        raise ValueError(f"{file}: `config.{unknown[0]}`={args[unknown[0]]!r} is an option kformer does not know "
                         "how to compute; the preset was not loaded.")
    for name in ints:
        value = args.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{file}: `config.{name}`={value!r} must be a positive int; the preset was not loaded.")
    for name in floats:
        value = args.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"{file}: `config.{name}`={value!r} must be a rate in [0, 1); the preset was not "
                             "loaded.")
    for name, (default, allowed) in fixed.items():
        field(args, name, default, allowed=allowed, file=f"{file} config")
    policy = args.get("dtype")
    policy = policy.get("config", {}).get("name") if isinstance(policy, dict) else policy
    if policy is not None and policy not in _FLOAT_POLICIES:
        raise ValueError(f"{file}: `config.dtype`={policy!r} cannot be represented exactly by kformer (float "
                         f"weights only: {sorted(_FLOAT_POLICIES)}); the preset was not loaded.")
    return args


def _backbone_variables(folder):
    """{variable path: float32 array} of the preset's backbone, through keras-hub's preset loader."""
    import keras_hub

    try:
        backbone = keras_hub.models.Backbone.from_preset(str(folder))
    except Exception as err:  # noqa: BLE001 (a damaged h5 file, a keras-hub version mismatch, ...)
        raise ValueError(f"{folder / WEIGHTS_FILE}: keras-hub could not load the preset's backbone "
                         f"({type(err).__name__}: {str(err)[:300]}).") from None
    return {v.path: np.asarray(v.numpy(), np.float32) for v in backbone.weights}


def _task(folder):
    """`task.json` as a dict, or None when the preset has no task (or a task without weights)."""
    if not ((folder / TASK_FILE).is_file() and (folder / TASK_WEIGHTS_FILE).is_file()):
        return None
    try:
        value = json.loads((folder / TASK_FILE).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{folder / TASK_FILE} is not valid JSON: {err}") from None
    if not isinstance(value, dict) or not isinstance(value.get("config"), dict):
        raise ValueError(f"{folder / TASK_FILE} must hold a keras-hub task (`class_name`, `config`).")
    return value


def _task_variables(folder, class_name):
    """{variable path: float32 array} of the preset's task (backbone included), through keras-hub."""
    import keras_hub

    try:
        model = getattr(keras_hub.models, class_name).from_preset(str(folder), preprocessor=None)
    except Exception as err:  # noqa: BLE001
        raise ValueError(f"{folder / TASK_WEIGHTS_FILE}: keras-hub could not load the preset's {class_name} "
                         f"({type(err).__name__}: {str(err)[:300]}).") from None
    return {v.path: np.asarray(v.numpy(), np.float32) for v in model.weights}


def _take(variables, path, shape):
    """`variables[path]`, checked to have `shape` (a ValueError naming the weights file otherwise)."""
    if path not in variables:
        raise ValueError(f"{WEIGHTS_FILE} has no variable {path!r}; the preset was not loaded.")
    array = variables[path]
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{WEIGHTS_FILE}: variable {path!r} has shape {tuple(array.shape)}, but config.json gives "
                         f"{tuple(shape)}; the preset was not loaded.")
    return array


def _attention_linear(variables, path, hidden, heads):
    """keras `MultiHeadAttention` projections under `path` -> Hugging Face Linear weights `(out, in)`.

    Returns:
        {"query" | "key" | "value" | "output": (weight, bias)}.
    """
    head_dim = hidden // heads
    out = {}
    for name in ("query", "key", "value"):
        kernel = _take(variables, f"{path}/{name}/kernel", (hidden, heads, head_dim))
        bias = _take(variables, f"{path}/{name}/bias", (heads, head_dim))
        out[name] = (kernel.reshape(hidden, hidden).T, bias.reshape(hidden))
    kernel = _take(variables, f"{path}/attention_output/kernel", (heads, head_dim, hidden))
    out["output"] = (kernel.reshape(hidden, hidden).T, _take(variables, f"{path}/attention_output/bias", (hidden,)))
    return out


def _dense(variables, path, inputs, outputs):
    """A keras Dense under `path` -> Hugging Face Linear (weight `(out, in)`, bias)."""
    return (_take(variables, f"{path}/kernel", (inputs, outputs)).T, _take(variables, f"{path}/bias", (outputs,)))


def _norm(variables, path, width):
    return _take(variables, f"{path}/gamma", (width,)), _take(variables, f"{path}/beta", (width,))


def _put(tensors, name, pair):
    tensors[f"{name}.weight"], tensors[f"{name}.bias"] = pair


# ---------------------------------------------------------------------------------------------
# GPT-2


_GPT2_INTS = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim", "max_sequence_length")


def _load_gpt2(folder, args, task=None, **kwargs):
    from kformer.models.gpt import CausalLM
    from kformer.models.pretrained import gpt2

    if task not in gpt2.TASKS:
        raise ValueError(f"A GPT-2 preset loads as one task (a causal LM). Received: task={task!r}; expected one of "
                         f"{list(gpt2.TASKS)}.")
    check_options("GPT-2", kwargs, gpt2.OPTIONS)
    _arguments(args, _GPT2_INTS, floats=("dropout",))
    if args["hidden_dim"] % args["num_heads"]:
        raise ValueError(f"config.json: `config.hidden_dim`={args['hidden_dim']} is not divisible by "
                         f"`config.num_heads`={args['num_heads']}; the preset was not loaded.")
    tokenizer = _gpt2_tokenizer_files(folder)  # checked before any weight is read
    hf_config = {"vocab_size": args["vocabulary_size"], "n_positions": args["max_sequence_length"],
                 "n_embd": args["hidden_dim"], "n_layer": args["num_layers"], "n_head": args["num_heads"],
                 "n_inner": args["intermediate_dim"], "layer_norm_epsilon": 1e-5,  # GPT2Backbone's, fixed
                 "activation_function": "gelu_new", "resid_pdrop": args.get("dropout", 0.1)}
    arguments = gpt2.model_arguments(hf_config)
    variables = _backbone_variables(folder)
    tensors = _gpt2_tensors(variables, args)
    preprocessor = kwargs.pop("preprocessor", None)
    if preprocessor is None and tokenizer is not None:
        from kformer.data.bpe import GPT2CausalLMPreprocessor, gpt2_tokenizer

        preprocessor = GPT2CausalLMPreprocessor(gpt2_tokenizer(vocabulary=str(tokenizer[0]), merges=str(tokenizer[1])),
                                                arguments["sequence_length"])
    arguments.update(kwargs)
    model = CausalLM(**arguments, preprocessor=preprocessor or None)
    entries = gpt2.table(model, prefix="")
    assign_all(to_kformer(tensors, entries, WEIGHTS_FILE))
    return model


def _gpt2_tokenizer_files(folder):
    """(vocabulary.json, merges.txt) of the preset's GPT-2 tokenizer, or None without `assets/tokenizer`."""
    assets = folder / "assets" / "tokenizer"
    files = assets / "vocabulary.json", assets / "merges.txt"
    present = [path.is_file() for path in files]
    if not any(present):
        return None
    if not all(present):
        raise ValueError(f"{assets} must hold both vocabulary.json and merges.txt (GPT-2's BPE); found "
                         f"{sorted(p.name for p in assets.iterdir())}.")
    settings = folder / "tokenizer.json"
    if settings.is_file():
        tokenizer = read_json(settings)
        field(tokenizer, "class_name", "GPT2Tokenizer", allowed={"GPT2Tokenizer"}, file="tokenizer.json")
        options = tokenizer.get("config") or {}
        field(options, "sequence_length", None, allowed={None}, file="tokenizer.json config")
        field(options, "add_prefix_space", False, allowed={False}, file="tokenizer.json config")
    return files


def _gpt2_tensors(variables, args):
    """GPT2Backbone variables -> `GPT2LMHeadModel` tensors (without the `transformer.` prefix)."""
    e, inner, heads = args["hidden_dim"], args["intermediate_dim"], args["num_heads"]
    tensors = {"wte.weight": _take(variables, "token_embedding/embeddings", (args["vocabulary_size"], e)),
               "wpe.weight": _take(variables, "position_embedding/embeddings", (args["max_sequence_length"], e))}
    _put(tensors, "ln_f", _norm(variables, "layer_norm", e))
    for i in range(args["num_layers"]):
        layer, h = f"transformer_layer_{i}", f"h.{i}."
        attention = _attention_linear(variables, f"{layer}/self_attention", e, heads)
        # Conv1D weights are (in, out): the transposes of Linear's; c_attn is query|key|value
        tensors[h + "attn.c_attn.weight"] = np.concatenate([attention[n][0].T for n in ("query", "key", "value")], 1)
        tensors[h + "attn.c_attn.bias"] = np.concatenate([attention[n][1] for n in ("query", "key", "value")])
        tensors[h + "attn.c_proj.weight"], tensors[h + "attn.c_proj.bias"] = attention["output"][0].T, attention[
            "output"][1]
        _put(tensors, h + "ln_1", _norm(variables, f"{layer}/self_attention_layer_norm", e))
        _put(tensors, h + "ln_2", _norm(variables, f"{layer}/feedforward_layer_norm", e))
        for name, path, (n_in, n_out) in (("mlp.c_fc", "feedforward_intermediate_dense", (e, inner)),
                                          ("mlp.c_proj", "feedforward_output_dense", (inner, e))):
            tensors[f"{h}{name}.weight"] = _take(variables, f"{layer}/{path}/kernel", (n_in, n_out))
            tensors[f"{h}{name}.bias"] = _take(variables, f"{layer}/{path}/bias", (n_out,))
    return tensors


# ---------------------------------------------------------------------------------------------
# ViT


_VIT_FIXED = {"use_mha_bias": (True, {True}), "use_mlp_bias": (True, {True}), "use_class_token": (True, {True}),
              "use_patch_bias": (True, {True}), "data_format": ("channels_last", {"channels_last", None})}
_VIT_TASK_FIXED = {"pooling": ("token", {"token"}), "intermediate_dim": (None, {None}),
                   "activation": (None, {None, "linear"}), "head_dtype": (None, {None, "float32"})}


def _load_vit(folder, args, task=None, num_classes=None, class_names=None, **kwargs):
    from kformer.data.preprocessors import ImageClassifierPreprocessor
    from kformer.models.pretrained import vit
    from kformer.models.vit import ViTImageClassifier

    if task not in vit.TASKS:
        raise ValueError(f"A ViT preset loads as an image classifier: `task` must be one of {list(vit.TASKS)}. "
                         f"Received: task={task!r}")
    if kwargs:
        raise ValueError(f"A ViT preset takes `task`, `num_classes` and `class_names`. Received: {sorted(kwargs)}")
    _arguments(args, ("num_layers", "num_heads", "hidden_dim", "mlp_dim"), floats=("dropout_rate", "attention_dropout"),
               fixed=_VIT_FIXED, other=("image_shape", "patch_size", "layer_norm_epsilon"))
    size, patch, channels = _vit_geometry(args)
    epsilon = args.get("layer_norm_epsilon", 1e-6)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not epsilon > 0:
        raise ValueError(f"config.json: `config.layer_norm_epsilon`={epsilon!r} must be a positive number.")
    hidden = args["hidden_dim"]
    if hidden % args["num_heads"]:
        raise ValueError(f"config.json: `config.hidden_dim`={hidden} is not divisible by `config.num_heads`="
                         f"{args['num_heads']}; the preset was not loaded.")
    head = _vit_head(folder, args)
    if class_names is not None:
        class_names = [str(name) for name in class_names]
        num_classes = len(class_names) if num_classes is None else num_classes
    if num_classes is None and head is None:
        raise ValueError(f"{folder} holds a ViTBackbone without a classification head ({TASK_FILE} + "
                         f"{TASK_WEIGHTS_FILE} of a ViTImageClassifier): pass `num_classes` for a new, randomly "
                         "initialized head. Received: num_classes=None")
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < 2 or (class_names is not None and len(class_names) != num_classes)):
        raise ValueError(f"`num_classes` must be an int >= 2 (the length of `class_names` when both are given). "
                         f"Received: num_classes={num_classes!r}, class_names={class_names!r}")
    new_head = head is None or (num_classes is not None and num_classes != head)
    num_classes = head if num_classes is None else num_classes
    pixels = _vit_pixels(folder, channels)
    arguments = dict(image_size=size, patch_size=patch, channels=channels, hidden_dim=hidden,
                     num_layers=args["num_layers"], num_heads=args["num_heads"], intermediate_dim=args["mlp_dim"],
                     dropout=float(args.get("dropout_rate", 0.0)), layer_norm_epsilon=float(epsilon),
                     num_classes=num_classes, class_names=class_names)
    variables = _task_variables(folder, "ViTImageClassifier") if not new_head else _backbone_variables(folder)
    tensors = _vit_tensors(variables, args, size, patch, channels, None if new_head else num_classes)
    model = ViTImageClassifier(**arguments, **pixels, preprocessor=ImageClassifierPreprocessor(size, channels))
    assign_all(to_kformer(tensors, vit.table(model, head=not new_head), WEIGHTS_FILE))
    return model


def _vit_geometry(args):
    shape, patch = args.get("image_shape"), args.get("patch_size")
    if not (isinstance(shape, list) and len(shape) == 3 and all(isinstance(v, int) for v in shape)
            and shape[0] == shape[1] and shape[2] in (1, 3)):
        raise ValueError(f"config.json: `config.image_shape`={shape!r} cannot be represented exactly by kformer "
                         "(square images of 1 or 3 channels, channels last); the preset was not loaded.")
    if isinstance(patch, int) and not isinstance(patch, bool):
        patch = [patch, patch]
    if not (isinstance(patch, list) and len(patch) == 2 and patch[0] == patch[1] and isinstance(patch[0], int)
            and patch[0] >= 1 and shape[0] % patch[0] == 0):
        raise ValueError(f"config.json: `config.patch_size`={args.get('patch_size')!r} cannot be represented "
                         "exactly by kformer (square patches dividing the image); the preset was not loaded.")
    return shape[0], patch[0], shape[2]


def _vit_head(folder, args):
    """The number of classes of the preset's `ViTImageClassifier` task, or None without one."""
    task = _task(folder)
    if task is None:
        return None
    field(task, "class_name", allowed={"ViTImageClassifier"}, file=TASK_FILE)
    options = task["config"]
    for name, (default, allowed) in _VIT_TASK_FIXED.items():
        field(options, name, default, allowed=allowed, file=f"{TASK_FILE} config")
    num_classes = options.get("num_classes")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"{TASK_FILE}: `config.num_classes`={num_classes!r} must be an int >= 2 (kformer's "
                         "classifier is single-label softmax); the preset was not loaded.")
    return num_classes


def _vit_pixels(folder, channels):
    """The preset's `ViTImageConverter` (`scale`, `offset` on 0-255 pixels) as `pixel_mean` / `pixel_std`:
    kformer computes `pixels * 1 / (255 std) - mean / std`, the same affine map."""
    path = folder / "image_converter.json"
    if not path.is_file():
        return {}
    config = read_json(path).get("config") or {}
    file = "image_converter.json config"
    field(config, "interpolation", "bilinear", allowed={"bilinear"}, file=file)
    field(config, "antialias", False, allowed={False}, file=file)
    field(config, "pad_to_aspect_ratio", False, allowed={False}, file=file)
    scale, offset = (_per_channel(config.get(key), channels, default, f"image_converter.json: `config.{key}`")
                     for key, default in (("scale", 1.0), ("offset", 0.0)))
    if any(s <= 0 for s in scale):
        raise ValueError(f"image_converter.json: `config.scale`={config.get('scale')!r} must be positive (kformer's "
                         "`pixel_std`); the preset was not loaded.")
    std = [1.0 / (255.0 * s) for s in scale]
    return {"pixel_mean": [-o * s for o, s in zip(offset, std)], "pixel_std": std}


def _per_channel(value, channels, default, name):
    value = default if value is None else value
    values = value if isinstance(value, list) else [value] * channels
    if len(values) != channels or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                          and np.isfinite(v) for v in values):
        raise ValueError(f"{name}={value!r} must be a number or {channels} numbers; the preset was not loaded.")
    return [float(v) for v in values]


def _vit_tensors(variables, args, size, patch, channels, num_classes):
    """ViTBackbone (+ classifier) variables -> `ViTForImageClassification` tensors."""
    hidden, inner, heads = args["hidden_dim"], args["mlp_dim"], args["num_heads"]
    tokens = (size // patch) ** 2 + 1
    e = "vit_patching_and_embedding"
    kernel = _take(variables, f"{e}/patch_embedding/kernel", (patch, patch, channels, hidden))
    tensors = {"vit.embeddings.cls_token": _take(variables, f"{e}/class_token", (1, 1, hidden)),
               "vit.embeddings.position_embeddings": _take(variables, f"{e}/position_embedding/embeddings",
                                                           (tokens, hidden))[None],
               "vit.embeddings.patch_embeddings.projection.weight": np.transpose(kernel, (3, 2, 0, 1)),
               "vit.embeddings.patch_embeddings.projection.bias": _take(variables, f"{e}/patch_embedding/bias",
                                                                         (hidden,))}
    for i in range(args["num_layers"]):
        block, h = f"vit_encoder/transformer_block_{i + 1}", f"vit.encoder.layer.{i}."
        attention = _attention_linear(variables, f"{block}/mha", hidden, heads)
        for name in ("query", "key", "value"):
            _put(tensors, f"{h}attention.attention.{name}", attention[name])
        _put(tensors, f"{h}attention.output.dense", attention["output"])
        _put(tensors, f"{h}layernorm_before", _norm(variables, f"{block}/ln_1", hidden))
        _put(tensors, f"{h}layernorm_after", _norm(variables, f"{block}/ln_2", hidden))
        _put(tensors, f"{h}intermediate.dense", _dense(variables, f"{block}/mlp/dense_1", hidden, inner))
        _put(tensors, f"{h}output.dense", _dense(variables, f"{block}/mlp/dense_2", inner, hidden))
    _put(tensors, "vit.layernorm", _norm(variables, "vit_encoder/ln", hidden))
    if num_classes is not None:
        _put(tensors, "classifier", _dense(variables, "predictions", hidden, num_classes))
    return tensors


# ---------------------------------------------------------------------------------------------
# BERT


_BERT_INTS = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim", "max_sequence_length",
              "num_segments")


def _load_bert(folder, args, task=None, num_classes=None, sequence_length=None, **kwargs):
    from kformer.models.bert import BertBackbone
    from kformer.models.pretrained import bert

    if kwargs:
        raise ValueError(f"BERT presets take `task`, `num_classes` and `sequence_length`. Received: {sorted(kwargs)}")
    args = dict(args)
    args.setdefault("num_segments", 2)
    _arguments(args, _BERT_INTS, floats=("dropout",))
    own = _bert_task(folder)
    task = own if task is None else task
    if task not in bert.TASKS:
        raise ValueError(f"`task` must be None or one of {bert.TASKS}. Received: task={task!r}")
    if task == "fill_mask":
        raise ValueError(f"{folder / TASK_FILE}: keras-hub's BertMaskedLM head normalizes with `layer_norm_epsilon`"
                         "=1e-05, kformer's BertPretrainer with the backbone's (1e-12); task='fill_mask' cannot be "
                         "represented exactly. Use task='backbone' or task='text_classification' (with num_classes).")
    if task == "text_classification" and num_classes is None:
        raise ValueError(f"{folder} holds no classification head kformer reads: task='text_classification' needs "
                         "`num_classes` for a new, randomly initialized head. Received: num_classes=None")
    if task != "text_classification" and num_classes is not None:
        raise ValueError(f"`num_classes` applies to task='text_classification' only. Received: "
                         f"num_classes={num_classes!r}, task={task!r}")
    hf_config = {"vocab_size": args["vocabulary_size"], "hidden_size": args["hidden_dim"],
                 "num_hidden_layers": args["num_layers"], "num_attention_heads": args["num_heads"],
                 "intermediate_size": args["intermediate_dim"], "max_position_embeddings": args["max_sequence_length"],
                 "type_vocab_size": args["num_segments"], "hidden_dropout_prob": args.get("dropout", 0.1),
                 "attention_probs_dropout_prob": args.get("dropout", 0.1), "layer_norm_eps": 1e-12,
                 "hidden_act": "gelu_new"}  # keras-hub's BERT: the tanh GELU
    arguments = bert.backbone_arguments(hf_config)
    if task == "backbone" and sequence_length is not None:
        raise ValueError("`sequence_length` sets the preprocessor's length: task='backbone' has no preprocessor.")
    preprocessor = None
    if task != "backbone":  # the backbone has no tokenizer: one kformer cannot reproduce does not stop it
        if not (folder / "assets" / "tokenizer").is_dir():
            raise ValueError(f"{folder} holds no assets/tokenizer/vocabulary.txt: task={task!r} needs the tokenizer.")
        tokenizer = bert_tokenizer(folder, args["vocabulary_size"])
        preprocessor = _bert_preprocessor(tokenizer, sequence_length, args["max_sequence_length"])
    tensors = _bert_tensors(_backbone_variables(folder), args)
    backbone = BertBackbone(**arguments)
    table = bert.backbone_table(backbone)
    if task == "backbone":
        model = backbone
    else:
        from kformer.models.bert import BertTextClassifier

        model = BertTextClassifier(backbone, num_classes=num_classes, dropout=arguments["dropout"],
                                   preprocessor=preprocessor)
    assign_all(to_kformer(tensors, table, WEIGHTS_FILE))
    return model


def _bert_task(folder):
    task = _task(folder)
    if task is None:
        return "backbone"
    names = {"BertMaskedLM": "fill_mask", "BertTextClassifier": "text_classification"}
    field(task, "class_name", allowed=set(names), file=TASK_FILE)
    if names[task["class_name"]] == "text_classification":
        raise ValueError(f"{folder / TASK_FILE}: `class_name`='BertTextClassifier' puts a Dense layer and dropout "
                         "between the pooler and the logits as kformer does not; pass task='backbone', or "
                         "task='text_classification' with num_classes for a new head.")
    return names[task["class_name"]]


def _bert_tensors(variables, args):
    """BertBackbone variables -> Hugging Face `BertModel` tensors."""
    hidden, inner, heads = args["hidden_dim"], args["intermediate_dim"], args["num_heads"]
    tensors = {"embeddings.word_embeddings.weight": _take(variables, "token_embedding/embeddings",
                                                          (args["vocabulary_size"], hidden)),
               "embeddings.position_embeddings.weight": _take(variables, "position_embedding/embeddings",
                                                              (args["max_sequence_length"], hidden)),
               "embeddings.token_type_embeddings.weight": _take(variables, "segment_embedding/embeddings",
                                                                (args["num_segments"], hidden))}
    _put(tensors, "embeddings.LayerNorm", _norm(variables, "embeddings_layer_norm", hidden))
    for i in range(args["num_layers"]):
        layer, b = f"transformer_layer_{i}", f"encoder.layer.{i}."
        attention = _attention_linear(variables, f"{layer}/self_attention_layer", hidden, heads)
        for name in ("query", "key", "value"):
            _put(tensors, f"{b}attention.self.{name}", attention[name])
        _put(tensors, f"{b}attention.output.dense", attention["output"])
        _put(tensors, f"{b}attention.output.LayerNorm", _norm(variables, f"{layer}/self_attention_layer_norm", hidden))
        _put(tensors, f"{b}intermediate.dense", _dense(variables, f"{layer}/feedforward_intermediate_dense", hidden,
                                                       inner))
        _put(tensors, f"{b}output.dense", _dense(variables, f"{layer}/feedforward_output_dense", inner, hidden))
        _put(tensors, f"{b}output.LayerNorm", _norm(variables, f"{layer}/feedforward_layer_norm", hidden))
    _put(tensors, "pooler.dense", _dense(variables, "pooled_dense", hidden, hidden))
    return tensors


def bert_tokenizer(folder, vocabulary_size=None):
    """The preset's keras-hub `BertTokenizer` as a kformer `WordPieceTokenizer` with the same ids.

    `assets/tokenizer/vocabulary.txt` and `tokenizer.json`'s `lowercase`. kformer's uncased
    normalization is Hugging Face's (lowercase, accents stripped): a preset that lowercases
    without stripping accents (keras-hub's default) would split accented words differently, so
    it is refused, as are another suffix, unknown token or special tokens. keras-hub folds case
    with Unicode case folding (NFKC), kformer with `str.lower`: the ids differ on the few
    characters where the two differ (e.g. "ß", ligatures, full-width forms).

    Args:
        folder: the preset folder.
        vocabulary_size: int or None. The backbone's; the vocabulary must have that many tokens.

    Returns:
        `kformer.data.wordpiece.WordPieceTokenizer`.

    Example:

        tokenizer = bert_tokenizer("presets/bert_tiny_en_uncased")
        tokenizer.token_to_id("[CLS]")
    """
    from kformer.data.wordpiece import BERT_SPECIAL_TOKENS, WordPieceTokenizer

    folder = pathlib.Path(folder)
    path = folder / "assets" / "tokenizer" / "vocabulary.txt"
    if not path.is_file():
        raise ValueError(f"{folder} holds no assets/tokenizer/vocabulary.txt: no BERT tokenizer to load.")
    settings = read_json(folder / "tokenizer.json") if (folder / "tokenizer.json").is_file() else {}
    field(settings, "class_name", "BertTokenizer", allowed={"BertTokenizer"}, file="tokenizer.json")
    options = settings.get("config") or {}
    file = "tokenizer.json config"
    lowercase = field(options, "lowercase", False, allowed={True, False}, file=file)
    field(options, "strip_accents", False, allowed={lowercase}, file=file)
    for name, default, allowed in (("split", True, {True}), ("split_on_cjk", True, {True}),
                                   ("suffix_indicator", "##", {"##"}), ("oov_token", "[UNK]", {"[UNK]"}),
                                   ("special_tokens", None, {None}), ("special_tokens_in_strings", False, {False}),
                                   ("sequence_length", None, {None})):
        field(options, name, default, allowed=allowed, file=file)
    vocabulary = path.read_text(encoding="utf-8").split("\n")
    if vocabulary and vocabulary[-1] == "":
        vocabulary.pop()
    if vocabulary_size is not None and len(vocabulary) != vocabulary_size:
        raise ValueError(f"{path} holds {len(vocabulary)} tokens, but config.json's `config.vocabulary_size` is "
                         f"{vocabulary_size}: the tokenizer and the weights do not match.")
    if not vocabulary or vocabulary[0] != "[PAD]":
        raise ValueError(f"{path}: token 0 is {vocabulary[:1]!r}; kformer pads with id 0, which must be '[PAD]'.")
    try:
        return WordPieceTokenizer(vocabulary, special_tokens=BERT_SPECIAL_TOKENS,
                                  normalizer="bert_uncased" if lowercase else "bert_cased")
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def _bert_preprocessor(tokenizer, sequence_length, limit):
    from kformer.data.preprocessors import BertPreprocessor

    sequence_length = limit if sequence_length is None else sequence_length
    if not isinstance(sequence_length, int) or isinstance(sequence_length, bool) or not 2 <= sequence_length <= limit:
        raise ValueError(f"`sequence_length` must be an int in [2, {limit}] (config.json's "
                         f"`config.max_sequence_length`). Received: sequence_length={sequence_length!r}")
    return BertPreprocessor(tokenizer, sequence_length)
