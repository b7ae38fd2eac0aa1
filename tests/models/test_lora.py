"""LoRA on every task: outputs unchanged until training, only the adapters and the new head train,
the adapters save apart and load onto a fresh model, `.keras` files hold the merged weights, and
LoRA over int8 weights (QLoRA) trains. Run it under each KERAS_BACKEND."""

import os

import keras
import numpy as np
import pytest

from kformer import models
from kformer.models import lora
from tests.models.cases import random_inputs, small_model
from tests.models.test_quantized import TASKS


def outputs(model, data):
    return keras.tree.map_structure(np.asarray, model.predict_on_batch(data))


def assert_outputs_close(a, b, tolerance=1e-5):
    keras.tree.map_structure(lambda x, y: np.testing.assert_allclose(x, y, rtol=tolerance, atol=tolerance), a, b)


def perturb(task, seed=1):
    """Non-zero adapters (and head), as after training: every trainable weight moved."""
    rng = np.random.default_rng(seed)
    for variable in task.trainable_weights:
        variable.assign(np.asarray(variable) + rng.normal(0, 0.2, variable.shape).astype("float32"))


@pytest.mark.parametrize("name", sorted(TASKS))
def test_lora_on_a_task_trains_only_adapters_saves_apart_and_merges(name, tmp_path):
    keras.utils.set_random_seed(0)
    task = TASKS[name]()
    data = random_inputs(task)
    base_weights = [np.asarray(w) for w in task.weights]
    before = outputs(task, data)

    adapted = task.enable_lora(4, target_names=("query", "value", "mlp_out"), alpha=8)
    assert adapted and {layer.name for layer in adapted} <= {"query", "value", "mlp_out"}
    assert_outputs_close(outputs(task, data), before, 0)  # B starts at zero: exactly unchanged
    trainable = {w.path.rsplit("/", 1)[-1] + ("@head" if "/logits/" in f"/{w.path}" else "")
                 for w in task.trainable_weights}
    assert trainable <= {"lora_kernel_a", "lora_kernel_b", "kernel@head", "bias@head"}
    assert len(task.trainable_weights) >= 2 * len(adapted)

    perturb(task)
    adapted_out = outputs(task, data)
    assert any(not np.allclose(a, b, atol=1e-4) for a, b in zip(keras.tree.flatten(adapted_out),
                                                                  keras.tree.flatten(before)) if a.dtype.kind == "f")
    task.save_lora_weights(tmp_path / "adapter.lora.safetensors")
    task.save(tmp_path / "merged.keras")
    assert os.path.getsize(tmp_path / "adapter.lora.safetensors") < os.path.getsize(tmp_path / "merged.keras") / 4

    merged = models.load(tmp_path / "merged.keras")  # merged kernels, no adapters
    assert not lora.adapted_layers(merged)
    assert_outputs_close(outputs(merged, data), adapted_out, 1e-4)

    fresh = TASKS[name]()
    fresh.set_weights(base_weights)
    fresh.load_lora_weights(tmp_path / "adapter.lora.safetensors")
    assert_outputs_close(outputs(fresh, data), adapted_out, 1e-5)
    assert lora.lora_config(fresh) == lora.lora_config(task)


def test_fit_moves_the_adapters_and_the_head_only():
    keras.utils.set_random_seed(0)
    task = small_model("imdb_tiny")
    ids = np.random.default_rng(0).integers(1, task.vocabulary_size, (8, task.sequence_length)).astype("int32")
    labels = np.arange(8) % task.num_classes
    task.enable_lora(2)
    frozen = {w.path: np.asarray(w) for w in task.weights if not w.trainable}
    trained = {w.path: np.asarray(w) for w in task.trainable_weights}
    task.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    task.fit(ids, labels, epochs=2, batch_size=4, verbose=0)
    for w in task.weights:
        if w.path in frozen:
            np.testing.assert_array_equal(np.asarray(w), frozen[w.path], err_msg=w.path)
    moved = [path for path, value in trained.items()
             if not np.array_equal(np.asarray(next(w for w in task.weights if w.path == path)), value)]
    assert any("lora_kernel_b" in path for path in moved) and any("logits" in path for path in moved)


def test_qlora_trains_adapters_over_int8_weights_and_saves_them(tmp_path):
    keras.utils.set_random_seed(0)
    task = small_model("gpt_tiny")
    data = random_inputs(task)
    base = task.get_weights()
    task.quantize("int8")
    quantized = outputs(task, data)
    task.enable_lora(4, target_names=("query", "value", "mlp_in"))
    assert_outputs_close(outputs(task, data), quantized, 1e-6)
    ids = data["token_ids"] if isinstance(data, dict) else data
    task.compile(optimizer=keras.optimizers.Adam(1e-2),
                 loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    first = task.train_on_batch(data, ids)
    for _ in range(5):
        last = task.train_on_batch(data, ids)
    assert last < first
    adapted = outputs(task, data)
    task.save_lora_weights(tmp_path / "qlora.safetensors")
    fresh = small_model("gpt_tiny")
    fresh.set_weights(base)
    fresh.quantize("int8")  # the same int8 weights: quantizing is deterministic
    fresh.load_lora_weights(tmp_path / "qlora.safetensors")
    assert_outputs_close(outputs(fresh, data), adapted, 1e-5)
    with pytest.raises(ValueError, match="LoRA adapters over int8 weights"):
        task.save(tmp_path / "qlora.keras")
    assert not (tmp_path / "qlora.keras").exists()


@pytest.mark.once("argument checks before any weight changes")
def test_bad_lora_arguments_are_named_and_change_nothing(tmp_path):
    task = small_model("imdb_tiny")
    trainable = len(task.trainable_weights)
    for kwargs, message in [({"rank": 0}, "`rank` must be a positive int"),
                            ({"rank": 2.0}, "`rank` must be a positive int"),
                            ({"rank": 2, "target_names": "query"}, "`target_names` must be a non-empty list"),
                            ({"rank": 2, "target_names": ("query", "qeury")}, r"\['qeury'\], which name no "),
                            ({"rank": 2, "alpha": -1}, "`alpha` must be a positive number")]:
        with pytest.raises(ValueError, match=message):
            task.enable_lora(**kwargs)
        assert not lora.adapted_layers(task) and len(task.trainable_weights) == trainable
    with pytest.raises(ValueError, match="has no LoRA adapters"):
        task.save_lora_weights(tmp_path / "a.safetensors")
    task.enable_lora(2)
    with pytest.raises(ValueError, match="already enabled"):
        task.enable_lora(2)
    with pytest.raises(ValueError, match="quantize before `enable_lora`"):
        task.quantize("int8")
    task.save_lora_weights(tmp_path / "a.safetensors")
    other = small_model("imdb_tiny")
    other.enable_lora(3)
    with pytest.raises(ValueError, match="differ from this TextClassifier"):
        other.load_lora_weights(tmp_path / "a.safetensors")
    gpt = small_model("gpt_tiny")
    with pytest.raises(ValueError, match="does not fit this CausalLM"):
        gpt.load_lora_weights(tmp_path / "a.safetensors")
    assert not lora.adapted_layers(gpt)  # checked before anything was enabled
    with pytest.raises(ValueError, match="is not a file written by `save_lora_weights`"):
        gpt.load_lora_weights(tmp_path / "missing.safetensors")


def test_generate_after_enable_lora_decodes_with_the_adapters(tmp_path):
    """The compiled decoding loop of the float model is not reused once adapters are added."""
    keras.utils.set_random_seed(0)
    task = small_model("gpt_tiny")
    prompts = np.random.default_rng(0).integers(1, task.vocabulary_size, (2, 4)).astype("int32")
    before = np.asarray(task.generate(prompts, max_new_tokens=6))
    task.enable_lora(4, target_names=("query", "value", "mlp_in", "mlp_out"))
    perturb(task, seed=3)
    adapted = np.asarray(task.generate(prompts, max_new_tokens=6))
    task.save(tmp_path / "merged.keras")
    merged = np.asarray(models.load(tmp_path / "merged.keras").generate(prompts, max_new_tokens=6))
    np.testing.assert_array_equal(adapted, merged)
    assert not np.array_equal(adapted, before)
