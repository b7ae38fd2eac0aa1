"""Run as `python serving_client.py REQUESTS.pkl RESULTS.pkl`: a serving client with TensorFlow only.

Loads each export with `tf.saved_model.load`, calls every signature on the
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


def main(requests_path, results_path):
    with open(requests_path, "rb") as f:
        requests = pickle.load(f)  # [(export_dir, signature, {name: numpy}, needs XLA)]
    results, loaded = [], {}
    for export_dir, signature, inputs, xla in requests:
        if export_dir not in loaded:
            loaded[export_dir] = tf.saved_model.load(export_dir)
        fn = loaded[export_dir].signatures[signature]
        xla_compilation(xla)
        try:
            out = fn(**{k: tf.constant(v) for k, v in inputs.items()})
            results.append({k: v.numpy() for k, v in out.items()})
        except tf.errors.OpError as err:
            results.append({"error": f"{type(err).__name__}: {err.message}"})
    modules = sorted(m.split(".")[0] for m in sys.modules)
    with open(results_path, "wb") as f:
        pickle.dump({"results": results, "kformer_imported": "kformer" in modules}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
