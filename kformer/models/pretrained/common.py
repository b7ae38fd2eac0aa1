"""What every checkpoint family shares: finding the folder, reading `config.json` and safetensors
weights, and assigning them to kformer variables with every mismatch named.

Nothing here is approximate: a checkpoint kformer cannot represent exactly is refused with the
file, the field and the value, before any weight is assigned.
"""

import json
import os
import pathlib
import re
import warnings

import numpy as np

CACHE_ENV = "KFORMER_CACHE"  # where `hf://` handles are downloaded (default ~/.cache/kformer)

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}


def cache_dir():
    """The folder `hf://` checkpoints are downloaded into: `$KFORMER_CACHE` or `~/.cache/kformer`."""
    return pathlib.Path(os.environ.get(CACHE_ENV, pathlib.Path.home() / ".cache" / "kformer"))


def resolve(source):
    """A local folder, an `hf://org/name` handle or a `kaggle://owner/model/framework/variation[/version]`
    handle (a keras-hub preset), downloaded once into `cache_dir()` (`hf/` and `kaggle/` below it).

    Offline, a handle that is not cached is a ValueError naming the handle and the cache folder.

    Args:
        source: str or path. The folder or the handle.

    Returns:
        `pathlib.Path` of the local folder.

    Example:

    >>> resolve("kaggle://keras/bert")
    Traceback (most recent call last):
    ...
    ValueError: `source` must be `kaggle://owner/model/framework/variation[/version]`. Received: source='kaggle://keras/bert'
    """
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"`source` must be a folder or an `hf://org/name` handle. Received: source={source!r}")
    text = os.fspath(source)
    if text.startswith("kaggle://"):
        return _resolve_kaggle(text)
    if text.startswith("hf://"):
        repo = text[len("hf://"):].strip("/")
        if repo.count("/") > 1 or not repo:
            raise ValueError(f"`source` must be `hf://org/name`. Received: source={text!r}")
        try:
            import huggingface_hub
        except ImportError:
            raise ValueError(f"`source`={text!r} needs the `huggingface_hub` package (pip install "
                             "'kformer[pretrained]') to download; or pass a local folder.") from None
        where = cache_dir() / "hf"
        patterns = ["config.json", "*.safetensors", "*.safetensors.index.json", "vocab.txt", "vocab.json",
                    "merges.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "preprocessor_config.json", "adapter_config.json"]  # and peft adapters' files
        try:
            return pathlib.Path(huggingface_hub.snapshot_download(repo, cache_dir=where, allow_patterns=patterns,
                                                                  local_files_only=True))
        except Exception:  # noqa: BLE001 (not cached yet: download)
            pass
        try:
            return pathlib.Path(huggingface_hub.snapshot_download(repo, cache_dir=where, allow_patterns=patterns))
        except Exception as err:  # noqa: BLE001 (offline, unknown repository, ...)
            raise ValueError(f"`source`={text!r} is not in the cache folder {where} and could not be downloaded "
                             f"({type(err).__name__}: {str(err)[:200]}). Connect once, or pass a local "
                             "folder.") from None
    if "://" in text:
        raise ValueError(f"`source` must be a local folder, an `hf://org/name` or a `kaggle://owner/model/framework/"
                         f"variation[/version]` handle. Received: source={text!r}")
    folder = pathlib.Path(text)
    if not folder.is_dir():
        raise ValueError(f"`source` must be a checkpoint folder (config.json and weights). Received: "
                         f"source={text!r} ({'a file' if folder.exists() else 'does not exist'})")
    return folder


def _resolve_kaggle(text):
    """A `kaggle://` handle -> its preset folder, through `kagglehub.model_download` with `KAGGLEHUB_CACHE`
    set to `cache_dir() / "kaggle"` for the call (kagglehub reuses a cached version without a network)."""
    handle = text[len("kaggle://"):].strip("/")
    parts = handle.split("/")
    if len(parts) not in (4, 5) or not all(parts) or (len(parts) == 5 and not parts[4].isdigit()):
        raise ValueError(f"`source` must be `kaggle://owner/model/framework/variation[/version]`. Received: "
                         f"source={text!r}")
    try:
        import kagglehub
    except ImportError:
        raise ValueError(f"`source`={text!r} needs the `kagglehub` package to download; or pass a local "
                         "folder.") from None
    where = cache_dir() / "kaggle"
    before = os.environ.get("KAGGLEHUB_CACHE")
    os.environ["KAGGLEHUB_CACHE"] = str(where)
    try:
        return pathlib.Path(kagglehub.model_download(handle))
    except Exception as err:  # noqa: BLE001 (offline, unknown model, no access, ...)
        raise ValueError(f"`source`={text!r} is not in the cache folder {where} and could not be downloaded "
                         f"({type(err).__name__}: {str(err)[:200]}). Connect once, or pass a local "
                         "folder.") from None
    finally:
        if before is None:
            os.environ.pop("KAGGLEHUB_CACHE", None)
        else:
            os.environ["KAGGLEHUB_CACHE"] = before


def read_config(folder):
    """`folder/config.json` as a dict; a ValueError naming the file when it is missing or not JSON."""
    path = pathlib.Path(folder) / "config.json"
    if not path.is_file():
        raise ValueError(f"{folder} holds no config.json: expected a Hugging Face checkpoint folder "
                         "(config.json, model.safetensors and the tokenizer files).")
    return read_json(path)


def read_json(path):
    """A JSON file holding an object, as a dict; a ValueError naming the file when it is not JSON or
    not an object (config.json, tokenizer_config.json, keras-hub's tokenizer.json, ...)."""
    try:
        value = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to read; the checkpoint was not loaded.") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} must hold a JSON object. Received: {type(value).__name__}")
    return value


def positive_int(config, name, default=None):
    """config.json's `name` (or `default`) as a positive int; a ValueError naming the field otherwise."""
    value = field(config, name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"config.json: `{name}`={value!r} must be a positive int; the checkpoint was not loaded.")
    return value


def check_options(family, kwargs, options):
    """A ValueError naming `from_pretrained` options the family does not take."""
    unknown = sorted(set(kwargs) - set(options))
    if unknown:
        raise ValueError(f"Unknown {family} `from_pretrained` options {unknown}; expected some of {list(options)}.")


def field(config, name, default=None, *, allowed=None, file="config.json"):
    """`config[name]` (or `default`), refused with the file, field and value unless in `allowed`."""
    value = config.get(name, default)
    try:
        refused = allowed is not None and value not in allowed
    except TypeError:  # an unhashable value (a list, a dict) against a set: never one of the allowed
        refused = True
    if refused:
        raise ValueError(f"{file}: `{name}`={value!r} cannot be represented exactly by kformer (supported: "
                         f"{sorted(map(repr, allowed))}); the checkpoint was not loaded.")
    return value


def read_weights(folder):
    """Every tensor of `model.safetensors` (or the shards its index lists) as float32 / int NumPy arrays.

    A missing, truncated or malformed file is a ValueError naming it, raised before any weight
    is assigned.
    """
    folder = pathlib.Path(folder)
    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        return read_safetensors(single)
    if index.is_file():
        try:
            shards = list(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{index} is not a safetensors index (a `weight_map` of tensor -> file): "
                             f"{type(err).__name__}: {err}") from None
        paths = [_shard_path(folder, index, shard) for shard in shards]  # every name checked before any is opened
        weights = {}
        for path in sorted(set(paths)):
            weights.update(read_safetensors(path))
        return weights
    found = sorted(p.name for p in folder.iterdir())[:10]
    raise ValueError(f"{folder} holds no model.safetensors (nor model.safetensors.index.json); it holds "
                     f"{found}. Only safetensors weights are read (never pickled .bin files).")


def _shard_path(folder, index, shard):
    """The shard file `shard` that `index` names, refused unless it is a plain file name inside `folder`.

    An index from a stranger could name `../elsewhere.safetensors`, an absolute path or a symbolic
    link leading out of the folder; nothing outside the checkpoint folder is ever opened.
    """
    if not isinstance(shard, str) or not shard or pathlib.PurePath(shard).is_absolute() \
            or ".." in pathlib.PurePath(shard).parts:
        raise ValueError(f"{index}: `weight_map` names the shard {shard!r}; expected a file name inside "
                         f"{folder} (no absolute path, no `..`). No weights were read.")
    path = folder / shard
    inside = folder.resolve()
    if not path.resolve().is_relative_to(inside):
        raise ValueError(f"{index}: `weight_map` names the shard {shard!r}, which leads to {path.resolve()}, outside "
                         f"the checkpoint folder {inside} (a symbolic link?). No weights were read.")
    if not path.is_file():
        raise ValueError(f"{index}: `weight_map` names the shard {shard!r}, which is not a file in {folder}. No "
                         "weights were read.")
    return path


def read_safetensors(path):
    """A safetensors file -> {name: array} (bfloat16 and float16 widened to float32)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist (listed by the safetensors index).")
    data = path.read_bytes()
    if len(data) < 8:
        raise ValueError(f"{path} is not a safetensors file: {len(data)} bytes (truncated?).")
    size = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + size].decode("utf-8")) if 8 + size <= len(data) else None
    except (ValueError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a safetensors file: its header does not parse (truncated or another "
                         "format).")
    body = memoryview(data)[8 + size:]
    tensors, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (start, end) = _DTYPES[info["dtype"]], tuple(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: tensor {name!r} has an unsupported or malformed entry {info!r}.") from None
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ValueError(f"{path}: tensor {name!r} has the shape {list(shape)}; dimensions must be ints >= 0 (the "
                             "file is damaged or forged).")
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= start <= end <= len(body) or end - start != count * np.dtype(dtype).itemsize:
            raise ValueError(f"{path}: tensor {name!r} ({info['dtype']} {list(shape)}) needs bytes {start}-{end} "
                             f"of {len(body)}: the file is truncated or damaged.")
        spans.append((start, end, name))
        array = np.frombuffer(body[start:end], dtype).reshape(shape)
        if info["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in ("F16", "F64"):
            array = array.astype(np.float32)
        tensors[name] = array
    spans.sort()
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:  # the format gives each tensor its own bytes
            raise ValueError(f"{path}: tensors {first!r} and {second!r} share bytes {start}-{end} (overlapping "
                             "`data_offsets`, which the safetensors format forbids): the file is damaged or forged.")
    return tensors


def read_safetensors_metadata(path):
    """The `__metadata__` dict of a safetensors file (empty when it has none)."""
    with open(path, "rb") as file:
        size = int.from_bytes(file.read(8), "little")
        try:
            header = json.loads(file.read(size).decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise ValueError(f"{path} is not a safetensors file: its header does not parse.") from None
    metadata = header.get("__metadata__", {}) if isinstance(header, dict) else {}
    return metadata if isinstance(metadata, dict) else {}


def take(weights, name, shape, file="model.safetensors"):
    """`weights[name]`, checked to have `shape`; a ValueError naming the tensor otherwise."""
    if name not in weights:
        close = sorted(k for k in weights if k.split(".")[-1] == name.split(".")[-1])[:3]
        raise ValueError(f"{file} has no tensor {name!r} (tensors with that ending: {close}).")
    array = weights[name]
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{file}: tensor {name!r} has shape {tuple(array.shape)}, but the config gives "
                         f"{tuple(shape)}.")
    return array


def check_sizes(weights, sizes, file="model.safetensors"):
    """The sizes config.json states, checked against the tensors before any model is built.

    A config from a stranger can ask for 100,000 layers or a width of a million: building that
    takes minutes and gigabytes before the first tensor is compared. Each size is compared with
    what the tensors hold, and the first that differs is a ValueError naming the field.

    Args:
        weights: dict of tensor name -> array (from `read_weights`).
        sizes: dict of config field -> (value, tensor name, axis) for a tensor dimension, or
            (value, regex) for a count: the number of distinct first groups the regex matches
            among the tensor names (layer indices).
        file: the weights file named in errors.
    """
    for name, (value, *where) in sizes.items():
        if len(where) == 1:
            pattern = re.compile(where[0])
            found = len({m.group(1) for m in map(pattern.match, weights) if m})
            what = f"{found} layers"
        else:
            tensor, axis = where
            if tensor not in weights:
                continue  # `to_kformer` names the missing tensor
            shape = tuple(weights[tensor].shape)
            found = shape[axis] if -len(shape) <= axis < len(shape) else None
            what = f"tensor {tensor!r} of shape {shape}"
        if found != value:
            raise ValueError(f"config.json: `{name}`={value!r}, but {file} holds {what}; the checkpoint was not "
                             "loaded (nothing was built).")


def assign_all(pairs):
    """Assign `[(variable, array), ...]` after checking every shape first (nothing assigned on a mismatch)."""
    for variable, array in pairs:
        if tuple(variable.shape) != tuple(array.shape):
            raise ValueError(f"The checkpoint tensor for {variable.path} has shape {tuple(array.shape)}, but the "
                             f"kformer variable has {tuple(variable.shape)}.")
    for variable, array in pairs:
        variable.assign(np.asarray(array, dtype=variable.dtype))


# One table per family serves both directions: each `Entry` ties a checkpoint tensor (or one of
# its equal slices along the last axis) to a kformer variable. Loading reads the tensor, slices,
# transposes by `axes` and reshapes to the variable; saving does the inverse.
LINEAR = (1, 0)  # torch Linear weight (out, in) <-> Keras Dense kernel (in, out)
CONV = (2, 3, 1, 0)  # torch Conv2d weight (out, in, kh, kw) <-> Keras Conv2D kernel (kh, kw, in, out)


class Entry:
    """Checkpoint tensor `name` of `shape` <-> kformer `variable`.

    Args:
        name: str. The Hugging Face tensor name.
        variable: the kformer variable.
        shape: tuple. The whole checkpoint tensor's shape.
        axes: tuple or None. `np.transpose` axes from the checkpoint layout to kformer's (then
            reshaped to the variable's shape). Defaults to None (reshape only).
        part: (index, count) or None. The variable is slice `index` of `count` equal slices of
            the tensor's last axis (GPT-2's fused query/key/value). Defaults to None.
    """

    __slots__ = ("name", "variable", "shape", "axes", "part")

    def __init__(self, name, variable, shape, axes=None, part=None):
        self.name, self.variable, self.shape, self.axes, self.part = name, variable, tuple(shape), axes, part


def linear(layer, name, inputs, outputs, bias=True):
    """Entries of a torch Linear `name` (weight `(outputs, inputs)`, bias) <-> Keras Dense `layer`."""
    entries = [Entry(f"{name}.weight", layer.kernel, (outputs, inputs), LINEAR)]
    return entries + ([Entry(f"{name}.bias", layer.bias, (outputs,))] if bias else [])


def norm(layer, name, width):
    """Entries of a torch LayerNorm `name` <-> Keras `LayerNormalization` `layer`."""
    return [Entry(f"{name}.weight", layer.gamma, (width,)), Entry(f"{name}.bias", layer.beta, (width,))]


def bart_layers(model, key_bias=True):
    """Entries of an encoder-decoder's blocks under BART's names (Marian, Whisper): `model.{encoder,decoder}.
    layers.i.` `self_attn`, `encoder_attn` (decoder), `{q,k,v,out}_proj`, their `*_layer_norm`, `fc1`,
    `fc2` and `final_layer_norm` <-> `model.encoder_blocks` / `decoder_blocks`. `key_bias=False`: the
    checkpoint's key projections have no bias (Whisper's; the kformer bias stays out of the table)."""
    e, inner = model.hidden_dim, model.intermediate_dim

    def attention(layer, name):
        return (linear(layer.query_dense, f"{name}.q_proj", e, e)
                + linear(layer.key_dense, f"{name}.k_proj", e, e, bias=key_bias)
                + linear(layer.value_dense, f"{name}.v_proj", e, e)
                + linear(layer.output_dense, f"{name}.out_proj", e, e))

    entries = []
    for side, blocks in (("encoder", model.encoder_blocks), ("decoder", model.decoder_blocks)):
        for i, block in enumerate(blocks):
            b = f"model.{side}.layers.{i}."
            entries += attention(block.self_attention, b + "self_attn")
            entries += norm(block.self_attention_norm, b + "self_attn_layer_norm", e)
            if side == "decoder":
                entries += attention(block.cross_attention, b + "encoder_attn")
                entries += norm(block.cross_attention_norm, b + "encoder_attn_layer_norm", e)
            entries += linear(block.feed_forward.inner, b + "fc1", e, inner)
            entries += linear(block.feed_forward.outer, b + "fc2", inner, e)
            entries += norm(block.feed_forward_norm, b + "final_layer_norm", e)
    return entries


def to_kformer(weights, entries, file="model.safetensors"):
    """`[(variable, array), ...]` for `assign_all`: every tensor taken (and shape-checked) from `weights`."""
    pairs = []
    for entry in entries:
        array = take(weights, entry.name, entry.shape, file)
        if entry.part is not None:
            index, count = entry.part
            width = array.shape[-1] // count
            array = array[..., index * width:(index + 1) * width]
        if entry.axes is not None:
            array = np.transpose(array, entry.axes)
        if "float" in str(entry.variable.dtype) and array.dtype.kind != "f":
            raise ValueError(f"{file}: tensor {entry.name!r} is stored as {array.dtype} (integer or boolean), but "
                             f"{entry.variable.path} holds floating-point weights; the checkpoint was not loaded.")
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            warnings.warn(f"{file}: tensor {entry.name!r} holds {int(np.size(array) - np.isfinite(array).sum())} "
                          f"NaN or infinite values of {np.size(array)}; the model's outputs will not be finite.",
                          stacklevel=2)
        pairs.append((entry.variable, np.reshape(array, tuple(entry.variable.shape))))
    return pairs


def to_hf(entries):
    """{tensor name: float32 array in the checkpoint layout} from the kformer variables of `entries`."""
    from keras import ops

    tensors, parts = {}, {}
    for entry in entries:
        shape = list(entry.shape)
        if entry.part is not None:
            shape[-1] //= entry.part[1]
        array = np.asarray(ops.convert_to_numpy(entry.variable), dtype=np.float32)
        if entry.axes is not None:
            array = np.transpose(array.reshape([shape[a] for a in entry.axes]), np.argsort(entry.axes))
        array = array.reshape(shape)
        if entry.part is None:
            tensors[entry.name] = array
        else:
            parts.setdefault(entry.name, {})[entry.part[0]] = array
    for name, pieces in parts.items():
        tensors[name] = np.concatenate([pieces[i] for i in sorted(pieces)], axis=-1)
    return tensors


def write_safetensors(path, tensors, metadata=None):
    """Write `{name: array}` as a safetensors file, atomically (a temporary file, then `os.replace`).

    The format, without the `safetensors` package: an 8-byte little-endian header length, a JSON
    header (tensors sorted by name with dtype, shape and `data_offsets`, and `__metadata__`,
    `{"format": "pt"}` plus `metadata`), padded with spaces to a multiple of 8, then the raw
    little-endian data in the same order.

    Args:
        path: the file to write.
        tensors: dict of str -> np.ndarray (float64/32/16, int64/32/16/8, uint8, bool).
        metadata: optional dict of str -> str, added to `__metadata__`.
    """
    codes = {np.dtype(v).newbyteorder("<") if np.dtype(v).itemsize > 1 else np.dtype(v): k
             for k, v in _DTYPES.items() if k != "BF16"}
    metadata = {"format": "pt", **{str(k): str(v) for k, v in (metadata or {}).items()}}
    header, arrays, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        array = np.asarray(tensors[name])
        dtype = array.dtype.newbyteorder("<") if array.dtype.itemsize > 1 else array.dtype
        if dtype not in codes:
            raise ValueError(f"Tensor {name!r} has dtype {array.dtype}, which safetensors files here do not hold.")
        array = np.ascontiguousarray(array, dtype=dtype)
        header[name] = {"dtype": codes[dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        arrays.append(array)
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    path = pathlib.Path(path)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "wb") as file:
            file.write(len(text).to_bytes(8, "little"))
            file.write(text)
            for array in arrays:
                file.write(array.tobytes())
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return path


def write_json(value):
    """`value` as the UTF-8 bytes of indented, key-sorted JSON (as transformers writes config.json)."""
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def write_folder(folder, files, overwrite=False):
    """Write a checkpoint folder atomically: every file into a temporary sibling folder, then a rename.

    Args:
        folder: the folder to write (its parent is created).
        files: dict of file name -> bytes, or -> dict of arrays (written with `write_safetensors`).
        overwrite: bool. Replace a non-empty existing `folder`. Defaults to `False` (a ValueError).

    Returns:
        `pathlib.Path(folder)`.
    """
    import shutil
    import tempfile
    import uuid

    folder = pathlib.Path(folder)
    if folder.is_symlink():  # replace what the link points to; the link itself stays
        folder = folder.resolve()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"`folder`={str(folder)!r} is a file, not a folder; nothing was written.")
    if folder.is_dir() and any(folder.iterdir()) and not overwrite:
        raise ValueError(f"`folder`={str(folder)!r} exists and is not empty; pass overwrite=True to replace it. "
                         "Nothing was written.")
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = pathlib.Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        os.chmod(temporary, 0o755)
        for name, content in files.items():
            if isinstance(content, dict):
                write_safetensors(temporary / name, content)
            else:
                (temporary / name).write_bytes(content)
        if folder.exists():  # an empty folder, or overwrite=True: swap, then remove the old one
            old = folder.with_name(f".{folder.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(folder, old)
            os.replace(temporary, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temporary, folder)
    finally:
        if temporary.exists():
            shutil.rmtree(temporary, ignore_errors=True)
    return folder


def refuse(task, attribute, value, reason):
    """The ValueError for a kformer model the Hugging Face family cannot represent exactly."""
    return ValueError(f"{type(task).__name__} with `{attribute}`={value!r} cannot be saved in the Hugging Face "
                      f"layout: {reason}. Nothing was written.")
