"""benchmarks/vit_gpu.py: the ViT recipe and the keras-io example, trained with keras alone."""

import csv
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from benchmarks import vit_gpu
from benchmarks.anchors import vit

# `train` as on a machine without TensorFlow: every `import tensorflow...` fails.
WITHOUT_TF = """
import runpy, sys
class NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text", "tensorflow_datasets"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTensorFlow())
sys.argv = ["vit_gpu"] + sys.argv[1:]
runpy.run_module("benchmarks.vit_gpu", run_name="__main__")
"""


def run(*argv):
    env = {**os.environ, "KERAS_BACKEND": keras.backend.backend()}
    return subprocess.run([sys.executable, "-c", WITHOUT_TF, *map(str, argv)], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.only_backend("jax")
def test_train_runs_the_recipe_side_without_tensorflow_and_never_overwrites(tmp_path):
    out = tmp_path / "cifar10"
    recipe = ["--", "--dataset=cifar10", "--epochs=2", "--max-examples=40", "--batch-size=16", "--verbose=0"]
    done = run("train", out, "--only", "kformer", *recipe)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["train_examples"], metrics["validation_examples"], metrics["test_examples"]) == (36, 4, 40)
    result = metrics["kformer"]
    assert result["preset"] == "vit_hybrid_cifar" and 0.0 <= result["test_top1"] <= result["test_top5"] <= 1.0
    with open(out / "kformer_log.csv", newline="") as f:
        assert [float(row["val_accuracy"]) for row in csv.DictReader(f)] == result["val_accuracy"]
    assert "anchor" not in metrics

    again = run("train", out, "--only", "kformer", *recipe)
    assert again.returncode == 2 and "already holds a run's metrics.json" in again.stderr

    done = run("plot", out, "--out", tmp_path / "curves.png")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_compile_augmentation_lets_the_random_image_layers_compile_on_jax_only():
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.RandomTranslation(0.25, 0.25, seed=0)(inputs)
    x = keras.layers.RandomRotation(0.1, seed=0)(keras.layers.RandomZoom(0.2, seed=0)(x))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(x)))
    if keras.backend.backend() != "jax":
        with pytest.raises(ValueError, match=f"for the JAX backend.*backend='{keras.backend.backend()}'"):
            vit.compile_augmentation(model)
        return
    model.compile("adam", "mse", jit_compile=True)
    assert model.jit_compile is False  # Keras refuses: its random image layers are marked not compilable
    vit.compile_augmentation(model)
    model.compile("adam", "mse", jit_compile=True)
    assert model.jit_compile is True
    images = np.random.default_rng(0).uniform(0, 1, (4, 8, 8, 1)).astype("float32")
    history = model.fit(images, np.zeros((4, 2), "float32"), epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


def test_bad_flags_are_named(tmp_path, capsys):
    for argv, message in [(["--anchor-epochs", "0"], "--anchor-epochs must be >= 1. Received: 0"),
                          (["--", "--dataset", "cifar100"], "invalid choice: 'cifar100'"),
                          (["--", "--mixed-precision", "--tfds"], "unrecognized arguments: --mixed-precision --tfds")]:
        with pytest.raises(SystemExit) as stop:
            vit_gpu.train([str(tmp_path / "out"), *argv])
        assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [[], ["--dataset=cifar10", "--epochs=2", "--jit-compile=false", "--verbose=1"]])
def test_recipe_flags_keep_the_recipes_defaults(argv):
    """The benchmark parses the recipe's flags itself (it imports no recipe): the same values as the recipe."""
    from recipes import train_vit

    ours, recipe = vit_gpu.recipe_flags(argv), train_vit.parse_args([*argv, "--no-keep-freed-memory"])
    for name in ("dataset", "data_dir", "preset", "epochs", "batch_size", "learning_rate", "weight_decay",
                 "patience", "seed", "max_examples", "jit_compile"):
        assert getattr(ours, name) == getattr(recipe, name), name
    assert ours.verbose == (2 if recipe.verbose == "auto" else recipe.verbose)
    assert vit_gpu.DEFAULT_PRESETS == train_vit.DEFAULT_PRESETS


def test_the_benchmarks_import_no_recipe():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "benchmarks"
    for name in ("vit_gpu.py", "mini_bert_gpu.py", "recipe_steps.py"):
        source = (root / name).read_text()
        assert "from recipes" not in source and "import recipes" not in source, name
