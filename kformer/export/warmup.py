"""TF Serving warmup file: `assets.extra/tf_serving_warmup_requests` (PredictionLog records)."""

import pathlib

import tensorflow as tf

from kformer.export.signatures import signatures_of


def requests(task_type, options=None):
    """`[(signature_name, {input_name: numpy array})]`: small real requests, one per exported signature
    (an XLA signature: one per batch size it should compile at load)."""
    pairs = []
    for signature in signatures_of(task_type, options):
        inputs = signature.warmup()
        pairs += [(signature.name, one) for one in (inputs if isinstance(inputs, list) else [inputs])]
    return pairs


def write(directory, task_type, model_name, options=None):
    """Write the warmup records of `task_type`'s signatures (those `options` turn on) into the SavedModel `directory`."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    path = pathlib.Path(directory) / "assets.extra" / "tf_serving_warmup_requests"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for signature, inputs in requests(task_type, options):
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature))
            for name, value in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return path
