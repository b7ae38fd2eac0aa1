"""Will a stock TF Serving load this version? Its warmup requests, replayed as the server's load does.

TF Serving is not on PyPI. At start-up the stock binary turns XLA compilation
off (`tensorflow::DisableXlaCompilation()`, unless started with
`--xla_cpu_compilation_enabled`), and when it loads a version it replays the
version's `assets.extra/tf_serving_warmup_requests`: if one fails, the
version is not loaded. `check` does both in this process with TensorFlow
alone. This module imports only TensorFlow and `tensorflow_serving.apis`,
so a client without kformer can load it by its file path.

    kformer check-serving saved_models/transformer_small_spa-eng/1
"""

import ctypes
import os

import tensorflow as tf

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def set_xla_compilation(enabled):
    """Turn XLA compilation on or off for this whole process, TF Serving's switch.

    TensorFlow exports the switch from its C++ library but not to Python: a
    TensorFlow that renames it raises a RuntimeError here.
    """
    library = ctypes.CDLL(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_cc.so.2"))
    symbol = "_ZN10tensorflow20EnableXlaCompilationEv" if enabled else "_ZN10tensorflow21DisableXlaCompilationEv"
    try:
        getattr(library, symbol)()
    except AttributeError:
        switch = "EnableXlaCompilation" if enabled else "DisableXlaCompilation"
        raise RuntimeError(f"TensorFlow {tf.__version__} does not export tensorflow::{switch}: "
                           "cannot switch XLA compilation") from None


def call(signature, inputs):
    """`signature(**inputs)` as `{name: numpy}`, or `{"error": "<op error class>: <message>"}`."""
    try:
        return {k: v.numpy() for k, v in signature(**{k: tf.constant(v) for k, v in inputs.items()}).items()}
    except tf.errors.OpError as err:
        return {"error": f"{type(err).__name__}: {err.message}"}


def replay_warmup(version_dir, loaded=None):
    """Each warmup record of `version_dir` through its signature: `[(signature, error message or None)]`.

    Args:
        version_dir: a SavedModel folder written by `kformer.export` (`<base>/<version>`).
        loaded: the SavedModel already loaded with `tf.saved_model.load`, or None (load it).
    """
    from tensorflow_serving.apis import prediction_log_pb2

    path = os.path.join(version_dir, WARMUP_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"`version_dir` {str(version_dir)!r} has no warmup requests ({WARMUP_FILE}): "
                                "expected a SavedModel version folder written with warmup_requests=True")
    loaded = tf.saved_model.load(str(version_dir)) if loaded is None else loaded
    replies = []
    for record in tf.data.TFRecordDataset(path):
        request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        name = request.model_spec.signature_name
        if name not in loaded.signatures:
            replies.append((name, f"no signature {name!r}; the SavedModel has {sorted(loaded.signatures)}"))
            continue
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        replies.append((name, call(loaded.signatures[name], inputs).get("error")))
    return replies


def check(version_dir, xla=False):
    """`replay_warmup` with XLA compilation off (the stock server) or on (`xla=True`, a server started
    with `--xla_cpu_compilation_enabled`). Turns this process's XLA compilation off or on for good:
    run it in a process of its own (`kformer check-serving`)."""
    if not os.path.isdir(version_dir):
        raise FileNotFoundError(f"`version_dir` {str(version_dir)!r} is not a folder: expected a SavedModel "
                                "version folder such as saved_models/imdb_bigram/1")
    if not os.path.isfile(os.path.join(version_dir, "saved_model.pb")):
        from kformer.export.versioning import newest_version  # only here: a client loads this file without kformer

        newest = newest_version(version_dir)
        hint = f" (a model's base folder? its newest version is {os.path.join(version_dir, str(newest))})" \
            if newest else ""
        raise FileNotFoundError(f"`version_dir` {str(version_dir)!r} holds no saved_model.pb{hint}: expected a "
                                "SavedModel version folder such as saved_models/imdb_bigram/1")
    set_xla_compilation(xla)
    return replay_warmup(version_dir)


def summary(error):
    """One line of `call`'s error: its class and message, without the preamble and stack of a graph error.

    >>> summary("InternalError: Graph execution error:\\n\\nDetected at node X defined at (most recent call "
    ...         "last):\\n<stack traces unavailable>\\nXLA compilation disabled\\n\\t [[{{node X}}]]")
    'InternalError: XLA compilation disabled [[{{node X}}]]'
    """
    kind, _, message = error.partition(": ")
    skip = ("Graph execution error", "Detected at node", "<stack traces", "  ")
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line.startswith(skip)]
    return f"{kind}: {' '.join(lines)}"
