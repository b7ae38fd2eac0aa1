"""TF Serving warmup file: `assets.extra/tf_serving_warmup_requests` (PredictionLog records)."""

import pathlib

import numpy as np
import tensorflow as tf

WARMUP_TEXTS = ["A warmup request.", "Ein [MASK] Satz."]


def requests(spec):
    """`[(signature_name, {input_name: numpy array})]`: one small real request per signature."""
    texts = np.array([t.encode() for t in WARMUP_TEXTS], dtype=object)
    task = spec["task"]
    if task == "image_classification":
        image = np.zeros((1, 32, 32, 3), np.uint8)
        png = tf.io.encode_png(image[0]).numpy()
        return [("serving_default", {"image_bytes": np.array([png], dtype=object)}),
                ("classify_images", {"images": image})]
    if task == "translation":
        return [("serving_default", {"text": texts}), ("translate_beam", {"text": texts})]
    if task == "fill_mask":
        return [("serving_default", {"text": texts}), ("fill_mask", {"text": texts})]
    return [("serving_default", {"text": texts})]


def write(directory, spec):
    """Write the warmup records for `spec`'s signatures into the SavedModel `directory`."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    path = pathlib.Path(directory) / "assets.extra" / "tf_serving_warmup_requests"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for signature, inputs in requests(spec):
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=spec["model_name"], signature_name=signature))
            for name, value in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return path
