"""A failed call leaves the model as it was, and a save never replaces a good file with a bad one.

Keras's JAX trainer takes every variable's value out of the model while
`fit`, `evaluate` or `predict` runs (the step functions are stateless) and
puts it back when the loop ends. Whatever raises in between (an empty
input, a bad `batch_size`, a shape error in the first trace) leaves the
variables empty: every later `predict`, `get_weights` and `save` fails, and a
save writes a file without weights. `restored_on_error` puts the values back.
TensorFlow and torch keep their variables in place, so it does nothing there.

For the same reason two threads must not run one model's JAX loops at once: the
second finds the values gone (or takes them out under the first, which then
writes back deleted buffers) and the model is emptied for good. `model_lock`
gives each model one lock, which `restored_on_error` and `generate` hold on JAX;
a web service calling `predict` from a thread pool gets its answers one loop
at a time.
"""

import contextlib
import json
import os
import pathlib
import secrets
import threading
import weakref
import zipfile

import keras


def _trainer_variables(model):
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        variables += list(optimizer.variables)
    variables += list(getattr(model, "metrics_variables", []))
    return list({id(v): v for v in variables}.values())


def _usable(value):
    return value is not None and not (hasattr(value, "is_deleted") and value.is_deleted())


_LOCKS = weakref.WeakKeyDictionary()  # model -> its lock (JAX), dropped with the model
_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def model_lock(model):
    """On JAX, one thread at a time in `model`'s loops (`fit`, `predict`, `generate`, ...); a thread that
    is already inside may enter again (`fit` runs `evaluate`). Does nothing on TensorFlow and torch,
    whose variables stay in place while a loop runs."""
    if keras.backend.backend() != "jax":
        yield
        return
    with _LOCKS_GUARD:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.RLock()
    with lock:
        yield


@contextlib.contextmanager
def restored_on_error(model):
    """Run the body holding `model_lock`; if it raises on JAX, give every variable back its value before
    re-raising.

    The trainer's newest state is kept where it has one (a `fit` that fails
    in its third step keeps the two finished steps, as on TensorFlow and
    torch); any variable still left empty gets the value it had before the call.
    """
    if keras.backend.backend() != "jax":
        yield
        return
    with model_lock(model):
        before = [(v, v._value) for v in _trainer_variables(model)]
        try:
            yield
        except BaseException:
            _restore(model, before)
            raise


def _restore(model, before):
    state = getattr(model, "_jax_state", None)
    if state and not getattr(model, "_jax_state_synced", True):
        try:
            model.jax_state_sync()
        except Exception:  # noqa: BLE001 (a half-written state: the values from before are used)
            pass
    for variable, value in before:
        if not _usable(variable._value) and _usable(value):
            variable._value = value
    model._jax_state = None
    model._jax_state_synced = True


def check_variables_hold_values(model):
    """Raise a RuntimeError naming the variables that hold no value (what a save would lose)."""
    if keras.backend.backend() != "jax":
        return
    empty = [v.path for v in _trainer_variables(model) if not _usable(v._value)]
    if empty:
        raise RuntimeError(f"{len(empty)} variables of {model.name} hold no value (first: {empty[0]}), so a "
                           "save would write no weights; nothing was written.")


MAX_JSON_BYTES = 64 * 2 ** 20  # a .keras file's config.json / metadata.json, inflated (real ones: kilobytes)


class _Refused(Exception):
    pass


def check_keras_file(path):
    """Raise a ValueError unless `path` is a whole `.keras` archive: a zip with its config and weights."""
    path = pathlib.Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            for member in archive.infolist():  # sizes from the zip's directory: nothing inflated yet
                if member.filename.endswith(".json") and member.file_size > MAX_JSON_BYTES:
                    raise _Refused(f"its member {member.filename!r} inflates to {member.file_size:,} bytes, over the "
                                   f"{MAX_JSON_BYTES:,} a Keras config may take (safe_state.MAX_JSON_BYTES); not "
                                   "read")
            damaged = archive.testzip()
            config = json.loads(archive.read("config.json")) if "config.json" in names else None
    except RecursionError:
        raise ValueError(f"{path} is not a .keras file kformer loads: its config.json is nested too deeply to "
                         "read.") from None
    except _Refused as err:
        raise ValueError(f"{path} is not a .keras file kformer loads: {err}.") from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
        raise ValueError(f"{path} is not a whole .keras file: not a readable zip archive ({type(err).__name__}: "
                         f"{err}). It may be truncated or not a Keras model.") from None
    if damaged is not None:
        raise ValueError(f"{path} is not a whole .keras file: its member {damaged!r} is damaged (CRC mismatch).")
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a whole .keras file: it holds no config.json (members: "
                         f"{sorted(names)[:5]}).")
    if not names & {"model.weights.h5", "model.weights.npz"}:
        raise ValueError(f"{path} is not a whole .keras file: it holds no model.weights.h5.")


def save_atomically(model, filepath, save, **kwargs):
    """`save(filepath, **kwargs)` through a temporary file that is checked, then renamed over `filepath`.

    A failed or incomplete save leaves the existing file as it was. File-like
    targets and non-`.keras` paths go straight to `save`.
    """
    path = pathlib.Path(filepath) if isinstance(filepath, (str, os.PathLike)) else None
    if (path is None or path.suffix != ".keras" or kwargs.get("zipped") is False
            or (kwargs.get("overwrite") is False and path.exists())):
        return save(filepath, **kwargs)
    check_variables_hold_values(model)
    # Each writer its own temporary file (a process's threads share its pid): the last rename wins, none fails.
    tmp = path.with_name(f".tmp-{os.getpid()}-{secrets.token_hex(4)}-{path.name}")
    try:
        save(str(tmp), **kwargs)
        check_keras_file(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
