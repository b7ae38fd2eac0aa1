"""Run as `python serving_client.py REQUESTS.pkl RESULTS.pkl`: a serving client with TensorFlow only.

Loads each export with `tf.saved_model.load` and, as TF Serving does when it
loads a version, replays its warmup records. Then calls every signature on the
given inputs and pickles the outputs (or the error message). It imports no
keras and no kformer, and, like the stock TF Serving binary, runs with XLA
compilation turned off, except for the requests marked to need it (TF Serving's
`--xla_cpu_compilation_enabled`).
"""

import ctypes
import os
import pickle
import sys

import tensorflow as tf

# The switch TF Serving flips at start-up (`tensorflow::DisableXlaCompilation`, which its
# `--xla_cpu_compilation_enabled` flag skips): a function or op that needs XLA then fails
# with "XLA compilation disabled". TensorFlow exports the switch from this library but not
# to Python; an AttributeError here means a TensorFlow that renamed it.
_TF = ctypes.CDLL(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_cc.so.2"))


def xla_compilation(enabled):
    (_TF._ZN10tensorflow20EnableXlaCompilationEv if enabled else _TF._ZN10tensorflow21DisableXlaCompilationEv)()


def call(fn, inputs):
    """`fn`'s outputs as numpy, or {"error": the op error's class and message}."""
    try:
        return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in inputs.items()}).items()}
    except tf.errors.OpError as err:
        return {"error": f"{type(err).__name__}: {err.message}"}


def replay_warmup(export_dir, loaded):
    """Each warmup record through its signature, as TF Serving's load does (a failure there fails
    the load): `[(signature, error message or None)]`."""
    from tensorflow_serving.apis import prediction_log_pb2

    replies = []
    for record in tf.data.TFRecordDataset(os.path.join(export_dir, "assets.extra", "tf_serving_warmup_requests")):
        request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        name = request.model_spec.signature_name
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        replies.append((name, call(loaded.signatures[name], inputs).get("error")))
    return replies


def main(requests_path, results_path):
    with open(requests_path, "rb") as f:
        requests = pickle.load(f)  # [(export_dir, signature, {name: numpy}, needs XLA)]
    loaded, warmup = {}, {}
    xla_compilation(False)
    for export_dir, _, _, _ in requests:
        if export_dir not in loaded:
            loaded[export_dir] = tf.saved_model.load(export_dir)
            warmup[export_dir] = replay_warmup(export_dir, loaded[export_dir])
    results = []
    for export_dir, signature, inputs, xla in requests:
        xla_compilation(xla)
        results.append(call(loaded[export_dir].signatures[signature], inputs))
    modules = sorted(m.split(".")[0] for m in sys.modules)
    with open(results_path, "wb") as f:
        pickle.dump({"results": results, "warmup": warmup, "kformer_imported": "kformer" in modules}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
