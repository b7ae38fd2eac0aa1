"""`kformer.models.pretrained.from_pretrained` on BERT checkpoints written by Hugging Face
`transformers`: the same hidden states and logits (1e-4, float32) on the same ids, the same ids
from the tokenizer, and bad checkpoints refused by name. Run it under each KERAS_BACKEND."""

import json
import shutil

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from keras import ops  # noqa: E402

from kformer.models.pretrained import from_pretrained  # noqa: E402

WORDS = ["the", "movie", "film", "was", "is", "great", "bad", "good", "very", "not", "and", "i", "it", "a",
         "love", "hate", "plot", "actor", "##s", "##ing", "##ed", ".", ",", "!", "?", "'", "<", ">", "/", "br",
         "cafe", "##fe"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
VOCAB = list(dict.fromkeys(["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                           + WORDS + LETTERS + ["##" + c for c in LETTERS]))
TEXTS = ["The movie was great!", "I hate the plot, not the actors.", "Café: a very good film.<br />It is.",
         "zzz qqq xylophone"]
LENGTH = 16
TOLERANCE = 1e-4


def _config(**overrides):
    args = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64)
    return transformers.BertConfig(**{**args, **overrides})


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{kind: (folder, reference torch model)}, each saved with its tokenizer."""
    root = tmp_path_factory.mktemp("bert_checkpoints")
    (root / "vocab").mkdir()
    (root / "vocab" / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizer.from_pretrained(root / "vocab")
    made = {}
    for seed, (kind, cls, extra) in enumerate([
            ("masked_lm", transformers.BertForMaskedLM, {}),
            ("pretraining", transformers.BertForPreTraining, {}),
            ("classifier", transformers.BertForSequenceClassification,
             {"num_labels": 3, "id2label": {0: "neg", 1: "neutral", 2: "pos"},
              "label2id": {"neg": 0, "neutral": 1, "pos": 2}}),
            ("bare", transformers.BertModel, {"layer_norm_eps": 1e-7})]):
        torch.manual_seed(seed)
        model = cls(_config(**extra)).eval()
        folder = root / kind
        model.save_pretrained(folder, safe_serialization=True)
        if kind == "bare":  # the older layout: vocab.txt + tokenizer_config.json, no tokenizer.json
            shutil.copy(root / "vocab" / "vocab.txt", folder / "vocab.txt")
            (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
        else:
            tokenizer.save_pretrained(folder)
        made[kind] = (folder, model)
    return {"root": root, "tokenizer": tokenizer, **made}


@pytest.fixture(scope="module")
def batch(checkpoints):
    encoded = checkpoints["tokenizer"](TEXTS, padding="max_length", max_length=LENGTH, truncation=True,
                                       return_tensors="np")
    return {"token_ids": encoded["input_ids"].astype("int32"),
            "segment_ids": encoded["token_type_ids"].astype("int32"),
            "padding_mask": encoded["attention_mask"].astype(bool)}


def _reference(model, batch, **extra):
    with torch.no_grad():
        return model(input_ids=torch.tensor(batch["token_ids"], dtype=torch.long),
                     token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
                     attention_mask=torch.tensor(batch["padding_mask"].astype("int64")), **extra)


def _numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def _close(ours, reference):
    """Max |difference| over every position (padded ones too), checked below the tolerance."""
    ours, reference = _numpy(ours), _numpy(reference)
    assert ours.shape == reference.shape
    difference = float(np.max(np.abs(ours - reference)))
    print(f"max abs difference {difference:.2e}")
    assert difference < TOLERANCE
    return difference


def test_preprocessor_ids_equal_the_reference_tokenizer(checkpoints, batch):
    model = from_pretrained(checkpoints["classifier"][0], sequence_length=LENGTH)
    ours = model.preprocessor.encode(TEXTS)
    for name in ("token_ids", "segment_ids", "padding_mask"):
        np.testing.assert_array_equal(ours[name], batch[name])
    assert from_pretrained(checkpoints["classifier"][0]).preprocessor.sequence_length == 64


def test_bare_model_checkpoint_is_the_backbone(checkpoints, batch):
    folder, reference = checkpoints["bare"]
    backbone = from_pretrained(folder)
    assert type(backbone).__name__ == "BertBackbone" and backbone.layer_norm_epsilon == 1e-7
    out = backbone(batch, training=False)
    expected = _reference(reference, batch)
    _close(out["sequence_output"], expected.last_hidden_state.numpy())
    _close(out["pooled_output"], expected.pooler_output.numpy())


def test_pretraining_checkpoint_gives_mlm_and_nsp_logits(checkpoints, batch):
    folder, reference = checkpoints["pretraining"]
    model = from_pretrained(folder)
    assert type(model).__name__ == "BertPretrainer"
    positions = np.broadcast_to(np.arange(LENGTH, dtype="int32"), batch["token_ids"].shape)
    out = model({**batch, "mask_positions": positions}, training=False)
    expected = _reference(reference, batch)
    _close(out["mlm_logits"], expected.prediction_logits.numpy())
    _close(out["nsp_logits"], expected.seq_relationship_logits.numpy())
    backbone_out = model.backbone(batch, training=False)  # the same backbone, "bert."-prefixed tensors
    _close(backbone_out["sequence_output"], _reference(reference.bert, batch).last_hidden_state.numpy())


def test_masked_lm_checkpoint_fills_masks_as_the_reference(checkpoints, batch):
    folder, reference = checkpoints["masked_lm"]
    model = from_pretrained(folder, sequence_length=LENGTH)
    assert model.preprocessor.sequence_length == LENGTH
    positions = np.broadcast_to(np.arange(LENGTH, dtype="int32"), batch["token_ids"].shape)
    logits = model({**batch, "mask_positions": positions}, training=False)["mlm_logits"]
    _close(logits, _reference(reference, batch).logits.numpy())

    text = "The movie was [MASK], not the plot."
    ids = checkpoints["tokenizer"](text, return_tensors="pt")
    with torch.no_grad():
        expected = reference(**ids).logits[0]
    where = int((ids["input_ids"][0] == 103).nonzero()[0, 0])
    top = model.fill_mask(text, top_k=1)
    assert top[0][0]["token"] == VOCAB[int(expected[where].argmax())]


def test_classifier_checkpoint_gives_its_logits_and_class_names(checkpoints, batch):
    folder, reference = checkpoints["classifier"]
    model = from_pretrained(folder)
    assert type(model).__name__ == "BertTextClassifier"
    assert model.num_classes == 3 and model.class_names == ["neg", "neutral", "pos"]
    _close(model(batch, training=False), _reference(reference, batch).logits.numpy())
    with pytest.raises(ValueError, match="num_classes"):
        from_pretrained(folder, num_classes=2)


def test_text_classification_from_a_masked_lm_checkpoint_needs_num_classes(checkpoints):
    folder = checkpoints["masked_lm"][0]
    with pytest.raises(ValueError, match="num_classes"):
        from_pretrained(folder, task="text_classification")
    model = from_pretrained(folder, task="text_classification", num_classes=4, sequence_length=LENGTH)
    assert model.num_classes == 4 and tuple(model.output.shape) == (None, 4)
    with pytest.raises(ValueError, match="masked-LM head"):
        from_pretrained(checkpoints["classifier"][0], task="fill_mask")


def test_tokenizer_matches_the_reference_on_imdb_reviews(tmp_path):
    from kformer.data import imdb
    from kformer.data.wordpiece import BERT_SPECIAL_TOKENS, WordPieceTokenizer

    texts, _ = imdb.load_split("train", max_examples=50)
    learned = [t for t in WordPieceTokenizer.learn(texts, 800).vocabulary if not t.startswith("[")]
    chars = sorted({c for text in texts for c in text.lower() if not c.isspace()})
    vocabulary = VOCAB[:104] + [t for t in dict.fromkeys(chars + ["##" + c for c in chars] + learned)]
    (tmp_path / "vocab.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    extra = ["Café déjà vu, naïve façade!<br /><br />Ünïcödé", "[MASK] is here, a[MASK]b [mask] [CLS]",
             "İstanbul ΣΑΣ straße ﬁne", "中文字 and 日本語", "tab\tnew\nline\u00a0nbsp\u200bzw\u0000nul\ufffd",
             "Hangul 한국어", "x" * 101 + " ok", "e\u0301 combining \ue000private", "a\U0002B830b c\U0002B920d",
             "soft\u00adhyphen ΟΔΟΣ", "[SEP][PAD][UNK]", "„quote“ «q» — – … · • ‘s’ $5.00 -- 50% & #1 @home"]
    agree = {}
    for lowercase in (True, False):
        reference = transformers.BertTokenizer.from_pretrained(tmp_path, do_lower_case=lowercase)
        ours = WordPieceTokenizer(vocabulary, special_tokens=BERT_SPECIAL_TOKENS,
                                  normalizer="bert_uncased" if lowercase else "bert_cased")
        got = ours.tokenize(texts + extra).to_list()
        want = [reference(t, add_special_tokens=False)["input_ids"] for t in texts + extra]
        agree[lowercase] = (sum(a == b for a, b in zip(got[:50], want[:50])), sum(
            a == b for a, b in zip(got[50:], want[50:])))
    print(f"agreement (IMDB of 50, extra of {len(extra)}): uncased {agree[True]}, cased {agree[False]}")
    assert agree == {True: (50, len(extra)), False: (50, len(extra))}


def _copy(checkpoints, kind, tmp_path):
    folder = tmp_path / kind
    shutil.copytree(checkpoints[kind][0], folder)
    return folder


def test_bad_checkpoints_are_refused_by_name(checkpoints, tmp_path):
    folder = _copy(checkpoints, "masked_lm", tmp_path)
    config = json.loads((folder / "config.json").read_text())

    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    with pytest.raises(ValueError, match=r"config.json: `hidden_act`='relu'"):
        from_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({**config, "position_embedding_type": "relative_key"}))
    with pytest.raises(ValueError, match="position_embedding_type"):
        from_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 48}))
    with pytest.raises(ValueError, match=r"config.json: `intermediate_size`=48, but model.safetensors holds tensor "
                                         r"'bert.encoder.layer.0.intermediate.dense.bias'"):
        from_pretrained(folder)
    # sizes that would take minutes and gigabytes to build are compared with the tensors first
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 100_000}))
    with pytest.raises(ValueError, match=r"`num_hidden_layers`=100000, but model.safetensors holds 2 layers"):
        from_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 10 ** 7}))
    with pytest.raises(ValueError, match=r"`max_position_embeddings`=10000000, but model.safetensors holds tensor "
                                         r"'bert.embeddings.position_embeddings.weight'"):
        from_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": len(VOCAB) + 1}))
    with pytest.raises(ValueError, match=r"tokenizer.json holds \d+ tokens, but config.json's `vocab_size`"):
        from_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(config))

    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"model.safetensors.*truncated"):
        from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="holds no model.safetensors"):
        from_pretrained(folder)

    bare = _copy(checkpoints, "bare", tmp_path)
    (bare / "vocab.txt").write_text("\n".join(VOCAB[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab.txt holds \d+ tokens, but config.json's `vocab_size`"):
        from_pretrained(bare, task="backbone")
    with pytest.raises(ValueError, match="task"):
        from_pretrained(bare, task="translation")


def test_loaded_classifier_survives_a_keras_round_trip(checkpoints, tmp_path, batch):
    import keras

    model = from_pretrained(checkpoints["classifier"][0], sequence_length=LENGTH)
    path = tmp_path / "classifier.keras"
    model.save(path)
    again = keras.saving.load_model(path)
    tokenizer = again.preprocessor.tokenizer
    assert tokenizer.normalizer == "bert_uncased" and tokenizer.token_to_id("[MASK]") == 103
    np.testing.assert_array_equal(again.preprocessor.encode(TEXTS)["token_ids"], batch["token_ids"])
    _close(again(batch, training=False), model(batch, training=False))
