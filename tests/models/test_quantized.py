"""A quantized task saves to `.keras` and loads back with the same outputs, on every backend."""

import json
import warnings

import keras
import numpy as np
import pytest

from kformer import models
from tests.models.cases import random_inputs, small_model


def bert_classifier():
    return models.bert_text_classifier(small_model("bert_tiny"), num_classes=3)


TASKS = {
    "transformer_tiny": lambda: small_model("transformer_tiny"),
    "imdb_tiny": lambda: small_model("imdb_tiny"),
    "gpt_tiny": lambda: small_model("gpt_tiny"),
    "vit_tiny": lambda: small_model("vit_tiny"),
    "conformer_speech_tiny": lambda: small_model("conformer_speech_tiny"),
    "bert_classifier": bert_classifier,  # a nested backbone: quantized by its own config and the task's
}
CASES = [(name, "int8") for name in TASKS] + [("gpt_tiny", "int4"), ("transformer_tiny", "float8")]


def outputs(model, data):
    return keras.tree.map_structure(np.asarray, model.predict_on_batch(data))


@pytest.mark.parametrize("name, mode", CASES)
def test_a_quantized_task_saves_and_loads_back_with_the_same_outputs(name, mode, tmp_path):
    keras.utils.set_random_seed(0)
    task = TASKS[name]()
    data = random_inputs(task)
    float_out = outputs(task, data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task.quantize(mode)
    assert not [w for w in caught if "does not have a `quantize` method" in str(w.message)]  # norms stay float
    quantized = [layer for layer in task._flatten_layers() if layer.quantization_mode == mode]
    assert quantized, f"no layer of {name} was quantized as {mode}"
    out = outputs(task, data)
    task.save(tmp_path / "model.keras")
    loaded = models.load(tmp_path / "model.keras")
    assert type(loaded) is type(task)
    assert sorted(layer.path for layer in loaded._flatten_layers() if layer.quantization_mode == mode) == \
        sorted(layer.path for layer in quantized)
    keras.tree.map_structure(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5),
                             outputs(loaded, data), out)
    if mode != "float8":  # float8 keeps float weights (and scales for training in float8): outputs unchanged
        assert any(not np.allclose(a, b, atol=1e-6) for a, b in
                   zip(keras.tree.flatten(out), keras.tree.flatten(float_out)) if a.dtype.kind == "f")


def test_a_quantized_model_loads_into_its_quantized_layers_even_when_names_were_taken(tmp_path):
    """Layers are matched by path: a second task built in the same process (auto-numbered layer names
    moved on) still loads the first one's quantized weights."""
    task = small_model("gpt_tiny")
    task.quantize("int8")
    task.save(tmp_path / "model.keras")
    small_model("gpt_tiny")  # takes names again
    loaded = models.load(tmp_path / "model.keras")
    saved = json.loads(json.dumps(task.get_config()["quantized_layers"]))  # as the file holds it (lists)
    assert json.loads(json.dumps(loaded.get_config()["quantized_layers"])) == saved
    assert len(saved) == sum(layer.quantization_mode == "int8" for layer in loaded._flatten_layers())


@pytest.mark.once("argument checks before any weight is read")
def test_save_pretrained_of_a_quantized_task_refuses_naming_the_layer_and_writes_nothing(tmp_path):
    task = bert_classifier()
    task.quantize("int8")
    with pytest.raises(ValueError, match=r"quantized .*'int8'.* nothing was written"):
        task.save_pretrained(tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
