"""Run on JAX with 8 simulated CPU devices: one training step, sharded and not, agrees.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 KERAS_BACKEND=jax \
        python -m tests.models.model_parallel_check

For each preset, built under `ModelParallel` (mesh batch 2 x model 4,
`layout_map`): the attention, feed-forward and embedding weights must be
split over the model axis. For the presets in TRAINED (encoder-decoder with
cross-attention; decoder-only with a tied output embedding), the model is also
built without a distribution and both train one step from the same weights:
the losses and updated weights must agree. Prints `OK <preset>` per model.
"""

import sys

import jax
import keras
import numpy as np

from kformer import models
from tests.models.cases import SMALL, random_inputs

PRESETS = {  # sizes that split over 4 devices: 4 heads, hidden 16, intermediate 32
    "transformer_tiny": "translator", "bert_tiny": "bert", "vit_tiny": "vit", "gpt_tiny": "causal_lm"}
TRAINED = ("transformer_tiny", "gpt_tiny")  # each costs a sharded compile: about 20 s of CPU
SPLIT = {  # a weight of each kind -> the spec it must have
    "self_attention/query/kernel": (None, "model", None),
    "self_attention/attention_output/kernel": ("model", None, None),
    "feed_forward/mlp_in/kernel": (None, "model"),
    "feed_forward/mlp_out/kernel": ("model", None),
}


def sizes(preset):  # no dropout: the two runs draw different dropout masks
    return {**SMALL[PRESETS[preset]], "num_heads": 4, "dropout": 0.0}


def build(preset):
    kwargs = sizes(preset)
    model = models.build(preset, **kwargs)
    if preset == "bert_tiny":  # the backbone has no loss: train its pretraining task
        model = models.bert_pretrainer(model)
    return model


def one_step(model, weights, data, targets):
    model.set_weights(weights)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.tree.map_structure(lambda _: "mse", targets))
    loss = model.train_on_batch(data, targets)
    return float(np.asarray(loss).reshape(-1)[0]), [np.asarray(w) for w in model.get_weights()]


def check(preset, mesh):
    keras.distribution.set_distribution(None)
    keras.utils.set_random_seed(0)
    plain = build(preset)
    data = random_inputs(plain, batch=4, length=8)
    if "mask_positions" in data:
        data["mask_positions"] = np.tile(np.array([[1, 3]], "int32"), (4, 1))
    outputs = plain.predict(data, verbose=0)
    targets = keras.tree.map_structure(lambda x: np.random.default_rng(1).normal(size=x.shape).astype("float32"),
                                       outputs)
    weights = plain.get_weights()
    if preset in TRAINED:
        plain_loss, plain_after = one_step(plain, weights, data, targets)

    layout = models.layout_map(preset, mesh, **sizes(preset))
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layout, batch_dim_name="batch"))
    sharded = build(preset)
    checked = 0
    for variable in sharded.weights:
        for suffix, spec in SPLIT.items():
            if variable.path.endswith(suffix):
                got = tuple(variable.value.sharding.spec)
                assert got[:len(spec)] == spec[:len(got)] and "model" in got, (variable.path, got)
                checked += 1
        if variable.path.endswith("token_embedding/embeddings"):
            assert tuple(variable.value.sharding.spec) == (None, "model"), variable.path
            checked += 1
    assert checked >= 5, f"{preset}: only {checked} sharded weights found"
    if preset not in TRAINED:
        print(f"OK {preset} sharded weights={checked}", flush=True)
        return
    sharded_loss, sharded_after = one_step(sharded, weights, data, targets)
    np.testing.assert_allclose(sharded_loss, plain_loss, rtol=1e-4, err_msg=preset)
    for a, b in zip(sharded_after, plain_after):
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg=preset)
    print(f"OK {preset} loss={plain_loss:.5f} sharded weights={checked}", flush=True)


def main():
    devices = jax.devices()
    assert len(devices) == 8, f"expected 8 simulated devices, got {len(devices)}"
    mesh = keras.distribution.DeviceMesh((2, 4), ["batch", "model"], keras.distribution.list_devices())
    for preset in sys.argv[1:] or PRESETS:
        check(preset, mesh)


if __name__ == "__main__":
    main()
