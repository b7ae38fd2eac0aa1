"""One test per registered preset (as in timm): new presets are covered automatically."""

import keras
import numpy as np
import pytest

from kformer import models
from tests.helpers import to_numpy
from tests.models.cases import PAPER_PARAMS, SMALL, random_inputs, small_model



def _distinct_small_presets():
    """One preset per distinct small model: presets that differ only in sizes SMALL overrides
    (bert_tiny / bert_mini / bert_small, conformer_s / m / l, ...) build the same model, and so do
    presets that differ only in their number of blocks (imdb_tiny / imdb_small: 1 or 2 of the same
    block, as SMALL's 2 for the other builders)."""
    seen = {}
    for name in models.list_models():
        if name in PAPER_PARAMS:
            continue
        preset = models.get_preset(name)
        builder = preset.pop("builder")
        preset.pop("num_layers", None)
        seen.setdefault((builder, tuple(sorted({**preset, **SMALL[builder]}.items()))), name)
    return sorted(seen.values())


RUNNABLE = _distinct_small_presets()


@pytest.mark.parametrize("name", RUNNABLE)
def test_preset_forward_save_reload_and_fit(name, tmp_path):
    model = small_model(name)
    data = random_inputs(model)
    outputs = model.predict(data, verbose=0)
    for out in keras.tree.flatten(outputs):
        assert np.all(np.isfinite(out))
    path = tmp_path / f"{name}.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    for a, b in zip(keras.tree.flatten(reloaded.predict(data, verbose=0)), keras.tree.flatten(outputs)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    if keras.backend.backend() != "torch" or models.get_preset(name)["builder"] == "conformer_encoder":
        # each model family's fit runs on every backend in test_tasks.py / test_conformer.py; here each
        # preset's one-step fit runs on torch, where a new model compiles nothing; the conformer has one
        # small model here, the one test_conformer.py trains and reloads
        return
    model.compile(keras.optimizers.Adam(1e-3), loss="mse")
    targets = keras.tree.map_structure(np.zeros_like, outputs)
    history = model.fit(data, targets, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


# A parameter count does not depend on the backend. Building the six paper-size models is slow everywhere, least on
# torch.
@pytest.mark.only_backend("torch")
@pytest.mark.parametrize("name", sorted(PAPER_PARAMS))
def test_paper_presets_have_the_published_size(name):
    # Built in a stateless scope, each weight has its shape but is never drawn (up to 300M numbers
    # a model); clear_session then drops Keras's list of those unfilled weights.
    with keras.StatelessScope(initialize_variables=False):
        count = models.build(name).count_params()
    keras.utils.clear_session()
    if isinstance(PAPER_PARAMS[name], int):
        assert count == PAPER_PARAMS[name]
    assert abs(count - PAPER_PARAMS[name]) / PAPER_PARAMS[name] < 0.04, count


@pytest.mark.only_backend("torch")  # argument checks and config merging: no backend code of its own
def test_builders_take_a_preset_and_overrides():
    model = models.translator(preset="transformer_tiny", vocabulary_size=30)
    assert model.name == "transformer_tiny"
    assert model.encoder_embedding is model.decoder_embedding
    assert model.encoder_embedding.vocabulary_size == 30
    assert models.get_preset("transformer_base")["hidden_dim"] == 512
    with pytest.raises(ValueError, match="belongs to `vit`"):
        models.translator(preset="vit_tiny")
    with pytest.raises(ValueError, match=r"name='transformer_huge'.*transformer_base"):
        models.build("transformer_huge")


@pytest.mark.only_backend("torch")  # argument checks and config merging: no backend code of its own
def test_translator_vocabularies_and_tying():
    separate = models.translator(preset="transformer_tiny", vocabulary_size=None,
                                 encoder_vocabulary_size=30, decoder_vocabulary_size=20)
    assert separate.output.shape[-1] == 20
    assert separate.encoder_embedding is not separate.decoder_embedding
    assert separate.output_projection is None
    untied = models.translator(preset="transformer_tiny", vocabulary_size=30,
                               tie_output_embedding=False)
    assert untied.output_projection is not None
    with pytest.raises(ValueError, match="decoder_vocabulary_size=20"):
        models.translator(preset="transformer_tiny", vocabulary_size=30, decoder_vocabulary_size=20)
    with pytest.raises(ValueError, match="vocabulary_size=None"):
        models.translator(preset="transformer_tiny", vocabulary_size=None)


def test_translator_masks_source_padding():
    model = small_model("transformer_tiny")
    data = random_inputs(model)
    data["encoder_token_ids"][0, 5:] = 0
    out = model.predict(data, verbose=0)
    data["encoder_token_ids"][0, 5:] = 0
    data["encoder_token_ids"] = np.concatenate([data["encoder_token_ids"], np.zeros((2, 3), "int32")], 1)
    longer = model.predict(data, verbose=0)
    np.testing.assert_allclose(longer[0], out[0], atol=1e-5)


def test_bert_pretraining_and_classifier_share_the_backbone(tmp_path):
    backbone = small_model("bert_tiny")
    pretraining = models.bert_pretrainer(backbone)
    data = random_inputs(backbone)
    data["mask_positions"] = np.array([[1, 3], [0, 2]], "int32")
    out = pretraining.predict(data, verbose=0)
    assert out["mlm_logits"].shape == (2, 2, 40) and out["nsp_logits"].shape == (2, 2)
    # The MLM decoder is the transposed token embedding (tied) plus a bias.
    table = to_numpy(backbone.token_embedding.token_embedding.embeddings)
    assert not any(tuple(w.shape) == (16, 40) for w in pretraining.trainable_weights)
    assert table.shape == (40, 16)
    classifier = models.bert_text_classifier(backbone, num_classes=3)
    logits = classifier.predict({k: data[k] for k in backbone.input}, verbose=0)
    assert logits.shape == (2, 3)
    pretraining.save(tmp_path / "p.keras")
    reloaded = keras.saving.load_model(tmp_path / "p.keras")
    np.testing.assert_allclose(reloaded.predict(data, verbose=0)["mlm_logits"], out["mlm_logits"],
                               atol=1e-5)
    with pytest.raises(ValueError, match="num_classes=1"):
        models.bert_text_classifier(backbone, num_classes=1)


def test_vit_with_experts_adds_balancing_losses():
    model = small_model("vit_tiny", image_size=16, channels=3, num_experts=4, moe_every=2)
    moe_blocks = [b for b in model.encoder_blocks if b.num_experts]
    assert [b.name for b in moe_blocks] == ["encoder_1"]
    model(random_inputs(model))
    assert len(model.losses) == 1
