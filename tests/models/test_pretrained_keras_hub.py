"""keras-hub presets (`save_to_preset` folders) load as kformer tasks equal to the keras-hub models.

Tiny random-weight keras-hub models are saved as presets in the active backend, loaded with
`from_pretrained` and compared: GPT-2 logits and greedy tokens, ViT logits, BERT hidden states
(through a test hook: kformer's BertBackbone computes the exact GELU, keras-hub's BERT the tanh
form, so the loader refuses keras-hub BERT by name), tokenizer ids, and refusals by file and field.
"""

import json
import shutil

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

from kformer.models.pretrained import common, from_pretrained  # noqa: E402
from kformer.models.pretrained import keras_hub as loader  # noqa: E402

TEXTS = ["the movie was great", "a bad film", "the film was bad, the movie great", "movies!"]
BERT_VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "was", "great", "bad", "a",
                   "film", "##s", ",", "!", "good"]


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _gpt2_vocabulary():
    """A byte-level BPE over the letters of TEXTS: every byte the texts use, a few merges."""
    letters = sorted(set("".join(TEXTS).replace(" ", "")))
    vocabulary = {"!": 0}
    for token in letters + ["Ġ", "th", "the", "Ġm", "Ġthe", "Ġg", "Ġb", "Ġf", "<|endoftext|>"]:
        vocabulary.setdefault(token, len(vocabulary))
    merges = ["t h", "th e", "Ġ m", "Ġ the", "Ġ g", "Ġ b", "Ġ f"]
    return vocabulary, merges


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    keras.utils.set_random_seed(0)
    vocabulary, merges = _gpt2_vocabulary()
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocabulary, merges=merges)
    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=len(vocabulary), num_layers=2, num_heads=2,
                                             hidden_dim=32, intermediate_dim=64, max_sequence_length=16)
    for variable in backbone.weights:  # larger weights than the initializer's: differences would show
        variable.assign(np.random.default_rng(len(variable.path)).normal(0, 0.3, variable.shape))
    folder = tmp_path_factory.mktemp("keras_hub") / "gpt2"
    backbone.save_to_preset(str(folder))
    tokenizer.save_to_preset(str(folder))
    return folder, backbone, tokenizer, from_pretrained(folder)


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    keras.utils.set_random_seed(1)
    backbone = keras_hub.models.ViTBackbone(image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=2,
                                            hidden_dim=32, mlp_dim=64)
    converter = keras_hub.layers.ViTImageConverter(image_size=(16, 16), scale=1 / 127.5, offset=-1.0)
    classifier = keras_hub.models.ViTImageClassifier(
        backbone, num_classes=3, preprocessor=keras_hub.models.ViTImageClassifierPreprocessor(converter))
    for variable in classifier.weights:
        variable.assign(np.random.default_rng(len(variable.path)).normal(0, 0.3, variable.shape))
    root = tmp_path_factory.mktemp("keras_hub")
    classifier.save_to_preset(str(root / "vit"))
    backbone.save_to_preset(str(root / "vit_backbone"))
    return root, classifier


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    keras.utils.set_random_seed(2)
    backbone = keras_hub.models.BertBackbone(vocabulary_size=len(BERT_VOCABULARY), num_layers=2, num_heads=2,
                                             hidden_dim=32, intermediate_dim=64, max_sequence_length=12)
    for variable in backbone.weights:
        variable.assign(np.random.default_rng(len(variable.path)).normal(0, 0.3, variable.shape))
    folder = tmp_path_factory.mktemp("keras_hub") / "bert"
    backbone.save_to_preset(str(folder))
    keras_hub.models.BertTokenizer(vocabulary=BERT_VOCABULARY, lowercase=False).save_to_preset(str(folder))
    return folder, backbone


def _copy(folder, tmp_path, name="copy"):
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_gpt2_logits_and_token_ids_equal_keras_hub(gpt2):
    folder, backbone, tokenizer, lm = gpt2
    assert (lm.vocabulary_size, lm.sequence_length, lm.hidden_dim, lm.num_layers, lm.num_heads, lm.intermediate_dim,
            lm.activation, lm.tie_output_embedding) == (backbone.vocabulary_size, 16, 32, 2, 2, 64,
                                                        "gelu_approximate", True)
    ids = np.random.default_rng(0).integers(0, backbone.vocabulary_size, (2, 16)).astype("int32")
    hidden = backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})
    reference = _numpy(backbone.token_embedding(hidden, reverse=True))
    difference = np.abs(_numpy(lm.predict_on_batch(ids)) - reference).max()
    print(f"GPT-2 max |logit difference| on {keras.backend.backend()}: {difference:.3g}")
    assert difference < 1e-4
    expected = [[int(i) for i in _numpy(tokenizer.tokenize(text))] for text in TEXTS]
    assert lm.preprocessor.tokenize(TEXTS).to_list() == expected


def test_gpt2_greedy_generate_equals_keras_hub_greedy_steps(gpt2):
    _, backbone, _, lm = gpt2
    prompts = np.array([[3, 5, 0, 0], [7, 2, 9, 4]], "int32")  # right-padded, lengths 2 and 4
    max_length = 8
    expected = []
    for row, length in zip(prompts, (2, 4)):
        ids = list(row[:length])
        while len(ids) < max_length:
            tokens = np.array([ids], "int32")
            hidden = backbone({"token_ids": tokens, "padding_mask": np.ones_like(tokens)})
            logits = _numpy(backbone.token_embedding(hidden[:, -1], reverse=True))[0]
            logits[0] = -np.inf  # kformer never generates id 0 (its padding)
            ids.append(int(np.argmax(logits)))
        expected.append(ids)
    np.testing.assert_array_equal(np.asarray(lm.generate(prompts, max_length=max_length)), np.array(expected))


def test_vit_classifier_logits_equal_keras_hub(vit):
    root, classifier = vit
    model = from_pretrained(root / "vit")
    assert (model.image_size, model.patch_size, model.channels, model.num_classes, model.layer_norm_epsilon) == (
        16, 4, 3, 3, 1e-6)
    pixels = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3)).astype("float32")  # 8-bit values
    reference = _numpy(classifier(pixels / 127.5 - 1.0))  # the converter's scale and offset
    difference = np.abs(_numpy(model(pixels)) - reference).max()  # the model on the same pixels
    print(f"ViT max |logit difference| on {keras.backend.backend()}: {difference:.3g}")
    assert difference < 1e-4


def test_vit_backbone_preset_needs_num_classes_for_a_new_head(vit):
    root, classifier = vit
    with pytest.raises(ValueError, match="ViTBackbone without a classification head.*num_classes"):
        from_pretrained(root / "vit_backbone")
    model = from_pretrained(root / "vit_backbone", num_classes=5)
    assert model.num_classes == 5
    np.testing.assert_array_equal(_numpy(model.final_norm.gamma), _numpy(classifier.backbone.weights[-2]))


def test_bert_backbone_hidden_states_equal_keras_hub(bert):
    folder, backbone = bert
    model = from_pretrained(folder)
    assert type(model).__name__ == "BertBackbone" and model.activation == "gelu_approximate"
    ids = np.array([[2, 5, 6, 7, 8, 3, 0, 0], [2, 10, 11, 12, 3, 9, 14, 3]], "int32")
    inputs = {"token_ids": ids, "segment_ids": (np.arange(8) > 4).astype("int32") * (ids > 0),
              "padding_mask": (ids > 0).astype("int32")}
    got, reference = model(inputs), backbone(inputs)
    mask = inputs["padding_mask"][..., None] > 0
    difference = max(np.abs(np.where(mask, _numpy(got["sequence_output"]) - _numpy(reference["sequence_output"]),
                                     0)).max(),
                     np.abs(_numpy(got["pooled_output"]) - _numpy(reference["pooled_output"])).max())
    print(f"BERT max |hidden state difference| on {keras.backend.backend()}: {difference:.3g}")
    assert difference < 1e-4
    classifier = from_pretrained(folder, task="text_classification", num_classes=3)
    assert classifier.num_classes == 3 and classifier.backbone.activation == "gelu_approximate"
    with pytest.raises(ValueError, match="BertMaskedLM head normalizes"):
        from_pretrained(folder, task="fill_mask")


def test_bert_tokenizer_ids_equal_keras_hub(bert):
    folder, _ = bert
    tokenizer = loader.bert_tokenizer(folder, len(BERT_VOCABULARY))
    reference = keras_hub.models.BertTokenizer(vocabulary=BERT_VOCABULARY, lowercase=False)
    texts = TEXTS + ["The Movie was GOOD!", "films, films"]
    assert tokenizer.tokenize(texts).to_list() == [[int(i) for i in _numpy(reference.tokenize(text))]
                                                   for text in texts]


def test_bert_lowercase_without_accent_stripping_is_refused(bert, tmp_path):
    folder = _copy(bert[0], tmp_path)
    _edit(folder / "tokenizer.json", lambda d: d["config"].update(lowercase=True, strip_accents=False))
    with pytest.raises(ValueError, match=r"tokenizer.json config: `strip_accents`=False"):
        from_pretrained(folder, task="text_classification", num_classes=2)
    assert type(from_pretrained(folder)).__name__ == "BertBackbone"  # the backbone needs no tokenizer


def test_bad_presets_are_refused_by_file_and_field(gpt2, vit, tmp_path):
    folder = _copy(gpt2[0], tmp_path, "no_weights")
    (folder / "model.weights.h5").unlink()
    with pytest.raises(ValueError, match="holds no model.weights.h5"):
        from_pretrained(folder)
    folder = _copy(gpt2[0], tmp_path, "unknown_class")
    _edit(folder / "config.json", lambda d: d.update(class_name="LlamaBackbone"))
    with pytest.raises(ValueError, match=r"config.json: `class_name`='LlamaBackbone' is not a keras-hub backbone"):
        from_pretrained(folder)
    folder = _copy(vit[0] / "vit", tmp_path, "no_class_token")
    _edit(folder / "config.json", lambda d: d["config"].update(use_class_token=False))
    with pytest.raises(ValueError, match=r"config.json config: `use_class_token`=False cannot be represented"):
        from_pretrained(folder)
    folder = _copy(vit[0] / "vit", tmp_path, "gap")
    _edit(folder / "task.json", lambda d: d["config"].update(pooling="gap"))
    with pytest.raises(ValueError, match=r"task.json config: `pooling`='gap'"):
        from_pretrained(folder)
    folder = _copy(gpt2[0], tmp_path, "new_option")
    _edit(folder / "config.json", lambda d: d["config"].update(rope_theta=10000))
    with pytest.raises(ValueError, match=r"config.json: `config.rope_theta`=10000 is an option"):
        from_pretrained(folder)
    folder = _copy(gpt2[0], tmp_path, "bad_int")
    _edit(folder / "config.json", lambda d: d["config"].update(num_heads=0))
    with pytest.raises(ValueError, match=r"config.json: `config.num_heads`=0 must be a positive int"):
        from_pretrained(folder)


def test_kaggle_handles_resolve_into_the_cache_or_are_named(monkeypatch, tmp_path):
    kagglehub = pytest.importorskip("kagglehub")
    monkeypatch.setenv(common.CACHE_ENV, str(tmp_path))
    seen = {}

    def offline(handle, *args, **kwargs):
        import os

        seen["handle"], seen["cache"] = handle, os.environ.get("KAGGLEHUB_CACHE")
        raise ConnectionError("no network")

    monkeypatch.setattr(kagglehub, "model_download", offline)
    with pytest.raises(ValueError, match=r"`source`='kaggle://keras/gpt2/keras/gpt2_base_en/3' is not in the cache "
                                         r"folder .*kaggle"):
        from_pretrained("kaggle://keras/gpt2/keras/gpt2_base_en/3")
    assert seen == {"handle": "keras/gpt2/keras/gpt2_base_en/3", "cache": str(tmp_path / "kaggle")}
    with pytest.raises(ValueError, match=r"must be `kaggle://owner/model/framework/variation\[/version\]`"):
        from_pretrained("kaggle://keras/gpt2")
    monkeypatch.setattr(kagglehub, "model_download", lambda handle, *a, **k: str(tmp_path))
    assert common.resolve("kaggle://keras/gpt2/keras/gpt2_base_en") == tmp_path
