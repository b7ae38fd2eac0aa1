"""Names renamed in 0.2: the old ones still work for one release and warn, naming the new one."""

import warnings

import keras
import pytest

from kformer import models
from kformer.models import registry, task

SIZES = {"vocabulary_size": 40, "sequence_length": 8}
BUILDERS = {  # old name -> (new name, call arguments)
    "imdb_classifier": ("text_classifier", lambda fn: fn(preset="imdb_tiny", **SIZES)),
    "mini_bert": ("bert", lambda fn: fn(preset="bert_tiny", **SIZES)),
    "mini_bert_pretraining": ("bert_pretrainer", lambda fn: fn(models.bert(preset="bert_tiny", **SIZES))),
    "mini_bert_classifier": ("bert_text_classifier", lambda fn: fn(models.bert(preset="bert_tiny", **SIZES), 2)),
}


@pytest.mark.parametrize("old", sorted(BUILDERS))
def test_an_old_builder_name_still_builds_the_same_task_and_warns(old):
    new, call = BUILDERS[old]
    assert registry.RENAMED[old] == new
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = call(getattr(models, old))
    assert len(caught) == 1 and issubclass(caught[0].category, DeprecationWarning)
    assert f"`kformer.models.{old}` is renamed `kformer.models.{new}`" in str(caught[0].message)
    assert type(built) is type(call(getattr(models, new)))


@pytest.mark.once("the preset registry's names")
@pytest.mark.parametrize("old", sorted(BUILDERS))
def test_new_names_are_public_and_old_ones_resolve_in_the_registry(old):
    new = BUILDERS[old][0]
    assert new in models.__all__ and old not in models.__all__
    assert registry.presets_of(old) == registry.presets_of(new) == registry.presets_of(getattr(models, new))
    assert all(models.get_preset(name)["builder"] == new for name in registry.presets_of(old))


@pytest.mark.once("module attributes and their warnings, nothing built")
def test_backbone_is_a_deprecated_alias_of_kformer_model():
    assert "KformerModel" in models.__all__ and "Backbone" not in models.__all__
    for module in (models, task):
        with pytest.warns(DeprecationWarning, match="`kformer.models.Backbone` is renamed `kformer.models.Kformer"):
            assert module.Backbone is models.KformerModel
    with pytest.warns(DeprecationWarning):
        from kformer.models import Backbone  # noqa: F401
    assert issubclass(models.Task, models.KformerModel) and issubclass(models.BertBackbone, models.KformerModel)
    with pytest.raises(AttributeError):
        models.NoSuchThing  # noqa: B018


def test_saved_files_store_the_task_classes_not_the_base(tmp_path):
    """A `.keras` file names the registered task class (`kformer>TextClassifier`), never the base: the rename
    leaves saved files loading."""
    model = models.text_classifier(preset="imdb_tiny", **SIZES)
    model.save(tmp_path / "model.keras")
    assert keras.saving.get_registered_name(type(model)) == "kformer>TextClassifier"
    assert type(models.load(tmp_path / "model.keras")) is models.TextClassifier
