"""Every Keras layer, model, loss and schedule class kformer defines is registered for `.keras` files."""

import importlib
import inspect
import pkgutil

import keras
import pytest

import kformer

KERAS_BASES = (keras.layers.Layer, keras.losses.Loss, keras.optimizers.schedules.LearningRateSchedule)
SKIP = ("kformer.export", "kformer.viz", "kformer.cli")  # graph-building and plotting code, no saved objects
# Base classes: never saved themselves, only their registered subclasses.
BASES = {"TransformerBlock", "Preprocessor", "KformerModel", "Task", "ClassifierTask", "GenerativeTask"}
pytestmark = pytest.mark.once("keras.saving's registry, filled when the modules import; nothing built")


def test_every_kformer_keras_class_is_registered():
    unregistered = []
    for info in pkgutil.walk_packages(kformer.__path__, "kformer."):
        if info.name.startswith(SKIP) or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and obj.__module__ == module.__name__ and issubclass(obj, KERAS_BASES)
                    and not name.startswith("_") and name not in BASES
                    and keras.saving.get_registered_object(f"kformer>{name}") is not obj):
                unregistered.append(f"{module.__name__}.{name}")
    assert not unregistered, f"add @keras.saving.register_keras_serializable(package='kformer'): {unregistered}"
