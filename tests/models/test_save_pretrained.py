"""`save_pretrained`: kformer tasks written in the Hugging Face layout open in `transformers` with the
same logits (1e-4, float32) and the same token ids; what a family cannot represent is refused by
name before anything is written. Run it under each KERAS_BACKEND."""

import json

import keras
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

from kformer.data.bpe import GPT2CausalLMPreprocessor  # noqa: E402
from kformer.data.preprocessors import BertPreprocessor  # noqa: E402
from kformer.data.wordpiece import BERT_SPECIAL_TOKENS, SPECIAL_TOKENS, WordPieceTokenizer  # noqa: E402
from kformer.models.bert import BertBackbone, BertPretrainer, BertTextClassifier  # noqa: E402
from kformer.models.gpt import CausalLM  # noqa: E402
from kformer.models.pretrained import common, from_pretrained  # noqa: E402
from kformer.models.task import KformerModel  # noqa: E402
from kformer.models.vit import ViTImageClassifier  # noqa: E402

TOLERANCE = 1e-4
WORDS = ["the", "movie", "film", "was", "is", "great", "bad", "good", "very", "not", "and", "i", "it", "a", "love",
         "hate", "plot", "actor", "##s", "##ing", "##ed", ".", ",", "!", "?", "'", ":", "cafe", "##fe"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
VOCAB = list(dict.fromkeys(list(BERT_SPECIAL_TOKENS) + WORDS + LETTERS + ["##" + c for c in LETTERS]))
TEXTS = ["The movie was great!", "I hate the plot, not the actors.", "Café: a very good [MASK].",
         "zzz 😀 qqq € xylophone"]
LENGTH = 16
GPT_TEXTS = ["The movie was great, I loved it!", "A bad plot and worse actors.", "it's not a film I'd see twice",
             "Café naïve résumé 😀", "numbers 1234 and  spaces\nnew lines"]
LABELS = ["neg", "neutral", "pos"]


def _perturb(model, seed):
    """Weights of order 1 (LayerNorm scales around 1), not the 0.02 initialization: a wrong mapping shows."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        base = 1.0 if variable.name == "gamma" else 0.0
        variable.assign((base + rng.normal(0.0, 0.2, tuple(variable.shape))).astype("float32"))


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _close(ours, reference, what):
    ours, reference = _numpy(ours), np.asarray(reference)
    assert ours.shape == reference.shape
    difference = float(np.max(np.abs(ours - reference)))
    print(f"\n{keras.backend.backend()} {what}: max |logit difference| {difference:.2e} "
          f"(logits up to {float(np.max(np.abs(reference))):.2f})")
    assert difference < TOLERANCE


def _torch_inputs(batch):
    return {"input_ids": torch.tensor(batch["token_ids"], dtype=torch.long),
            "token_type_ids": torch.tensor(batch["segment_ids"], dtype=torch.long),
            "attention_mask": torch.tensor(np.asarray(batch["padding_mask"]).astype("int64"))}


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """Backbone, pretrainer and classifier sharing one perturbed backbone (the tanh GELU, written as
    `gelu_new`; the exact one is what tests/models/test_pretrained_bert.py loads), each saved."""
    keras.utils.set_random_seed(0)
    tokenizer = WordPieceTokenizer(VOCAB, special_tokens=BERT_SPECIAL_TOKENS, normalizer="bert_uncased")
    backbone = BertBackbone(vocabulary_size=len(VOCAB), sequence_length=32, num_layers=2, hidden_dim=32, num_heads=2,
                            intermediate_dim=64, layer_norm_epsilon=1e-7, activation="gelu_approximate")
    pretrainer = BertPretrainer(backbone, preprocessor=BertPreprocessor(tokenizer, LENGTH, mask_positions=True))
    classifier = BertTextClassifier(backbone, num_classes=3, class_names=LABELS,
                                    preprocessor=BertPreprocessor(tokenizer, LENGTH))
    _perturb(pretrainer, 0)
    _perturb(classifier.head, 1)
    root = tmp_path_factory.mktemp("save_bert")
    folders = {name: model.save_pretrained(root / name) for name, model in
               (("backbone", backbone), ("pretrainer", pretrainer), ("classifier", classifier))}
    return {"backbone": backbone, "pretrainer": pretrainer, "classifier": classifier, "folders": folders,
            "batch": classifier.preprocessor.encode(TEXTS)}


def test_bert_tokenizer_files_give_kformer_ids(bert):
    folder = bert["folders"]["classifier"]
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    assert settings["do_lower_case"] is True
    assert (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1] == VOCAB
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    encoded = reference(TEXTS, padding="max_length", max_length=LENGTH, truncation=True, return_tensors="np")
    ours = bert["batch"]
    np.testing.assert_array_equal(ours["token_ids"], encoded["input_ids"])
    np.testing.assert_array_equal(ours["segment_ids"], encoded["token_type_ids"])
    np.testing.assert_array_equal(ours["padding_mask"], encoded["attention_mask"].astype(bool))
    assert (ours["token_ids"] == VOCAB.index("[MASK]")).any() and (ours["token_ids"] == VOCAB.index("[UNK]")).any()


def test_bert_classifier_logits_equal_transformers(bert):
    folder, batch = bert["folders"]["classifier"], bert["batch"]
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"] and config["label2id"]["pos"] == 2
    reference = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    assert reference.config.id2label == dict(enumerate(LABELS))
    with torch.no_grad():
        want = reference(**_torch_inputs(batch)).logits.numpy()
    _close(bert["classifier"](batch, training=False), want, "BertForSequenceClassification")


def test_bert_pretrainer_logits_equal_transformers_masked_lm(bert):
    folder, batch = bert["folders"]["pretrainer"], bert["batch"]
    reference = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    positions = np.broadcast_to(np.arange(LENGTH, dtype="int32"), batch["token_ids"].shape)
    with torch.no_grad():
        want = reference(**_torch_inputs(batch)).logits.numpy()
    _close(bert["pretrainer"]({**batch, "mask_positions": positions}, training=False)["mlm_logits"], want,
           "BertForMaskedLM")


def test_bert_backbone_equals_transformers_and_reloads(bert):
    folder, batch = bert["folders"]["backbone"], bert["batch"]
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((folder / "config.json").read_text())["hidden_act"] == "gelu_new"  # the tanh GELU
    reference = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        want = reference(**_torch_inputs(batch))
    ours = bert["backbone"](batch, training=False)
    _close(ours["sequence_output"], want.last_hidden_state.numpy(), "BertModel hidden states")
    _close(ours["pooled_output"], want.pooler_output.numpy(), "BertModel pooled")
    again = from_pretrained(bert["folders"]["pretrainer"])  # kformer reads back what it wrote, exactly
    for a, b in zip(again.weights, bert["pretrainer"].weights):
        np.testing.assert_array_equal(_numpy(a), _numpy(b))


def _train_bpe(folder, texts, size=300):
    """A byte-level BPE like GPT-2's (all bytes, `<|endoftext|>` last), saved as vocab.json + merges.txt."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=size - 1, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.model.save(str(folder))
    tok.add_special_tokens(["<|endoftext|>"])
    (folder / "vocab.json").write_text(json.dumps(tok.get_vocab()), encoding="utf-8")
    return tok.get_vocab_size()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    source = tmp_path_factory.mktemp("bpe")
    vocab = _train_bpe(source, GPT_TEXTS * 3)
    keras.utils.set_random_seed(0)
    lm = CausalLM(vocabulary_size=vocab, sequence_length=32, hidden_dim=32, num_layers=2, num_heads=2,
                  intermediate_dim=64, activation="gelu",
                  preprocessor=GPT2CausalLMPreprocessor.from_folder(source, sequence_length=32))
    _perturb(lm, 2)
    folder = lm.save_pretrained(tmp_path_factory.mktemp("save_gpt2") / "lm")
    return lm, folder, vocab


def test_gpt2_logits_equal_transformers(gpt2):
    lm, folder, vocab = gpt2
    config = json.loads((folder / "config.json").read_text())
    assert (config["activation_function"], config["eos_token_id"], config["attn_pdrop"]) == ("gelu", vocab - 1, 0.0)
    reference = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    ids = np.random.default_rng(0).integers(0, vocab, (3, 32)).astype("int32")
    with torch.no_grad():
        want = reference(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    _close(lm(ids, training=False), want, "GPT2LMHeadModel")


def test_gpt2_tokenizer_files_give_kformer_ids(gpt2):
    lm, folder, _ = gpt2
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    texts = GPT_TEXTS + ["unseen words: xylophone quux", " leading space", "tab\there"]
    ours = lm.preprocessor.tokenize(texts).to_list()
    assert ours == [reference(text)["input_ids"] for text in texts]
    assert reference.eos_token == "<|endoftext|>"


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = ViTImageClassifier(image_size=32, patch_size=8, num_classes=3, hidden_dim=32, num_layers=2, num_heads=2,
                               intermediate_dim=64, class_names=LABELS, pixel_mean=[0.485, 0.456, 0.406],
                               pixel_std=[0.229, 0.224, 0.225])
    _perturb(model, 3)
    return model, model.save_pretrained(tmp_path_factory.mktemp("save_vit") / "vit")


def test_vit_logits_equal_transformers(vit):
    model, folder = vit
    images = np.random.default_rng(0).integers(0, 256, size=(4, 32, 32, 3)).astype("uint8")
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    pixel_values = processor(list(images), return_tensors="np")["pixel_values"]  # 32x32: not resized
    reference = transformers.ViTForImageClassification.from_pretrained(folder).eval()
    assert reference.config.id2label == dict(enumerate(LABELS))
    with torch.no_grad():
        want = reference(pixel_values=torch.from_numpy(pixel_values)).logits.numpy()
    _close(model(images.astype("float32"), training=False), want, "ViTForImageClassification")


def _refused(model, folder, attribute):
    with pytest.raises(ValueError, match=attribute):
        model.save_pretrained(folder)
    assert not folder.exists()


def test_unrepresentable_models_are_refused_by_attribute(tmp_path):
    small = dict(vocabulary_size=40, sequence_length=8, hidden_dim=8, num_layers=1, num_heads=2, intermediate_dim=16)
    _refused(CausalLM(**small, position="rotary"), tmp_path / "rotary", "`position`")
    _refused(CausalLM(**small, tie_output_embedding=False), tmp_path / "untied", "`tie_output_embedding`")
    vit_small = dict(image_size=8, patch_size=4, num_classes=2, hidden_dim=8, num_layers=1, num_heads=2,
                     intermediate_dim=16)
    _refused(ViTImageClassifier(**vit_small, stem_channels=(4,)), tmp_path / "stem", "`stem_channels`")
    _refused(ViTImageClassifier(**vit_small, num_experts=2, moe_every=1), tmp_path / "moe", "`num_experts`")
    tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + WORDS)  # kformer's own normalizer
    classifier = BertTextClassifier(BertBackbone(vocabulary_size=len(SPECIAL_TOKENS) + len(WORDS), **{
        k: small[k] for k in ("sequence_length", "hidden_dim", "num_layers", "num_heads", "intermediate_dim")}),
        preprocessor=BertPreprocessor(tokenizer, 8))
    _refused(classifier, tmp_path / "bert", "normalizer")

    class Doubler(KformerModel):
        def __init__(self, **kwargs):
            x = keras.Input((2,))
            super().__init__(inputs=x, outputs=keras.layers.Dense(4)(x), **kwargs)

    _refused(Doubler(), tmp_path / "doubler", "Doubler")


def test_non_empty_folder_is_refused_unless_overwrite(tmp_path, vit):
    model, _ = vit
    folder = tmp_path / "target"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        model.save_pretrained(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["keep.txt"]
    model.save_pretrained(folder, overwrite=True)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors",
                                                         "preprocessor_config.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]  # no temporary folder left


def test_write_safetensors_reads_back_with_the_safetensors_package(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    tensors = {"b": np.arange(6, dtype="float32").reshape(2, 3), "a": np.array([1, -2], "int64"),
               "c": np.ones((0, 4), "float32")}
    path = common.write_safetensors(tmp_path / "x.safetensors", tensors, metadata={"source": "kformer"})
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    assert size % 8 == 0 and json.loads(data[8:8 + size])["__metadata__"] == {"format": "pt", "source": "kformer"}
    for read in (safetensors_numpy.load_file(str(path)), common.read_safetensors(path)):
        assert sorted(read) == ["a", "b", "c"]
        for name, array in tensors.items():
            np.testing.assert_array_equal(read[name], array)
