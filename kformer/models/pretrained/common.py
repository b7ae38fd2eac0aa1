"""What every checkpoint family shares: finding the folder, reading `config.json` and safetensors
weights, and assigning them to kformer variables with every mismatch named.

Nothing here is approximate: a checkpoint kformer cannot represent exactly is refused with the
file, the field and the value, before any weight is assigned.
"""

import json
import os
import pathlib

import numpy as np

CACHE_ENV = "KFORMER_CACHE"  # where `hf://` handles are downloaded (default ~/.cache/kformer)

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}


def cache_dir():
    """The folder `hf://` checkpoints are downloaded into: `$KFORMER_CACHE` or `~/.cache/kformer`."""
    return pathlib.Path(os.environ.get(CACHE_ENV, pathlib.Path.home() / ".cache" / "kformer"))


def resolve(source):
    """A local folder, or an `hf://org/name` handle downloaded once into `cache_dir()`.

    Offline, a handle that is not cached is a ValueError naming the handle and the cache folder.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"`source` must be a folder or an `hf://org/name` handle. Received: source={source!r}")
    text = os.fspath(source)
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
                    "preprocessor_config.json"]
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
        raise ValueError(f"`source` must be a local folder or an `hf://org/name` handle. Received: source={text!r}")
    folder = pathlib.Path(text)
    if not folder.is_dir():
        raise ValueError(f"`source` must be a checkpoint folder (config.json and weights). Received: "
                         f"source={text!r} ({'a file' if folder.exists() else 'does not exist'})")
    return folder


def read_config(folder):
    """`folder/config.json` as a dict; a ValueError naming the file when it is missing or not JSON."""
    path = pathlib.Path(folder) / "config.json"
    if not path.is_file():
        raise ValueError(f"{folder} holds no config.json: expected a Hugging Face checkpoint folder "
                         "(config.json, model.safetensors and the tokenizer files).")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object. Received: {type(config).__name__}")
    return config


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
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{index} is not a safetensors index (a `weight_map` of tensor -> file): "
                             f"{type(err).__name__}: {err}") from None
        weights = {}
        for shard in shards:
            weights.update(read_safetensors(folder / shard))
        return weights
    found = sorted(p.name for p in folder.iterdir())[:10]
    raise ValueError(f"{folder} holds no model.safetensors (nor model.safetensors.index.json); it holds "
                     f"{found}. Only safetensors weights are read (never pickled .bin files).")


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
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (start, end) = _DTYPES[info["dtype"]], tuple(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: tensor {name!r} has an unsupported or malformed entry {info!r}.") from None
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= start <= end <= len(body) or end - start != count * np.dtype(dtype).itemsize:
            raise ValueError(f"{path}: tensor {name!r} ({info['dtype']} {list(shape)}) needs bytes {start}-{end} "
                             f"of {len(body)}: the file is truncated or damaged.")
        array = np.frombuffer(body[start:end], dtype).reshape(shape)
        if info["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in ("F16", "F64"):
            array = array.astype(np.float32)
        tensors[name] = array
    return tensors


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


def assign_all(pairs):
    """Assign `[(variable, array), ...]` after checking every shape first (nothing assigned on a mismatch)."""
    for variable, array in pairs:
        if tuple(variable.shape) != tuple(array.shape):
            raise ValueError(f"The checkpoint tensor for {variable.path} has shape {tuple(array.shape)}, but the "
                             f"kformer variable has {tuple(variable.shape)}.")
    for variable, array in pairs:
        variable.assign(np.asarray(array, dtype=variable.dtype))
