"""Run as `python serving_client.py REQUESTS.pkl RESULTS.pkl`: a serving client with TensorFlow only.

Loads each export with `tf.saved_model.load`, calls every signature on the
given inputs and pickles the outputs (or the error message). It imports no
keras and no kformer, like TF Serving.
"""

import pickle
import sys

import tensorflow as tf


def main(requests_path, results_path):
    with open(requests_path, "rb") as f:
        requests = pickle.load(f)  # [(export_dir, signature, {name: numpy})]
    results, loaded = [], {}
    for export_dir, signature, inputs in requests:
        if export_dir not in loaded:
            loaded[export_dir] = tf.saved_model.load(export_dir)
        fn = loaded[export_dir].signatures[signature]
        try:
            out = fn(**{k: tf.constant(v) for k, v in inputs.items()})
            results.append({k: v.numpy() for k, v in out.items()})
        except tf.errors.InvalidArgumentError as err:
            results.append({"error": err.message})
    modules = sorted(m.split(".")[0] for m in sys.modules)
    with open(results_path, "wb") as f:
        pickle.dump({"results": results, "kformer_imported": "kformer" in modules}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
