"""Run as `python serving_client.py REQUESTS.pkl RESULTS.pkl`: a serving client with TensorFlow only.

Loads each export with `tf.saved_model.load` and, as TF Serving does when it
loads a version, replays its warmup records. Then calls every signature on the
given inputs and pickles the outputs (or the error message). It imports no
keras and no kformer, and, like the stock TF Serving binary, runs with XLA
compilation turned off, except for the requests marked to need it (TF Serving's
`--xla_cpu_compilation_enabled`).
"""

import importlib.util
import pathlib
import pickle
import sys

import tensorflow as tf

# TF Serving's XLA switch and warmup replay, from kformer's file without importing kformer.
_SPEC = importlib.util.spec_from_file_location(
    "preflight", pathlib.Path(__file__).parents[2] / "kformer" / "export" / "preflight.py")
preflight = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(preflight)


def main(requests_path, results_path):
    with open(requests_path, "rb") as f:
        requests = pickle.load(f)  # [(export_dir, signature, {name: numpy}, needs XLA)]
    loaded, warmup = {}, {}
    preflight.set_xla_compilation(False)  # as the stock TF Serving binary
    for export_dir, _, _, _ in requests:
        if export_dir not in loaded:
            loaded[export_dir] = tf.saved_model.load(export_dir)
            warmup[export_dir] = preflight.replay_warmup(export_dir, loaded[export_dir])
    results = []
    for export_dir, signature, inputs, xla in requests:
        preflight.set_xla_compilation(xla)
        results.append(preflight.call(loaded[export_dir].signatures[signature], inputs))
    modules = sorted(m.split(".")[0] for m in sys.modules)
    with open(results_path, "wb") as f:
        pickle.dump({"results": results, "warmup": warmup, "kformer_imported": "kformer" in modules}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
