"""Print the fit losses of one model trained on one device, then data parallel on 4 simulated devices.

Run in a fresh process: JAX needs XLA_FLAGS=--xla_force_host_platform_device_count=4
before it starts; TensorFlow gets 4 logical CPUs here. Uses `recipes.common.setup`,
the code path behind every recipe's `--distribute`.
"""

import argparse
import json
import os

import keras
import numpy as np

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)

from kformer import models  # noqa: E402
from recipes import common  # noqa: E402

rng = np.random.default_rng(0)
x = rng.integers(1, 100, (64, 16)).astype("int32")
y = rng.integers(0, 2, (64,)).astype("int32")


def train(distribute, weights):
    args = argparse.Namespace(seed=0, mixed_precision=False, distribute=distribute, model_parallel=1, preset=None)
    with common.setup(args):
        model = models.text_classifier(preset="imdb_tiny", vocabulary_size=100, sequence_length=16,
                                       dropout=0.0)
        if weights is not None:
            model.set_weights(weights)
        initial = model.get_weights()
        if keras.backend.backend() == "tensorflow":
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
        else:
            current = keras.distribution.distribution()
            replicas = current.device_mesh.devices.size if current else 1
        model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
    return history.history["loss"], initial, replicas


single, initial, one = train(False, None)
parallel, _, replicas = train(True, initial)
print(json.dumps({"single": single, "parallel": parallel, "devices": [one, replicas],
                  "xla_flags": os.environ.get("XLA_FLAGS", "")}))
