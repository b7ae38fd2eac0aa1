"""peft LoRA adapters in and out (`from_pretrained(source, adapter=...)`, `save_pretrained(..., adapter_only=True)`):
tiny random BERT, GPT-2 (fused `c_attn`, `fan_in_fan_out`), GPT-Neo and ViT checkpoints with peft adapters whose
factors (and classifier heads) are non-zero give the peft model's logits within 1e-4; adapters trained in kformer
(query, key and value apart) open in `peft.PeftModel.from_pretrained` with kformer's logits. Marian's case is in
test_pretrained_marian.py (its checkpoint fixture). Run it under each KERAS_BACKEND."""

import json

import keras
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from kformer.models import lora  # noqa: E402
from kformer.models.pretrained import from_pretrained  # noqa: E402

TOLERANCE = 1e-4
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(45)]
IDS = np.random.default_rng(0).integers(5, 50, (2, 7))
IMAGES = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3)).astype("uint8")


def _bert(folder):
    model = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=20, num_labels=3))
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return model


def _gpt2(folder):
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=2,
                                                                 n_positions=20, bos_token_id=0, eos_token_id=0))
    model.save_pretrained(folder)
    return model


def _gpt_neo(folder):
    model = transformers.GPTNeoForCausalLM(transformers.GPTNeoConfig(
        vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, max_position_embeddings=20, window_size=4,
        attention_types=[[["global", "local"], 1]], bos_token_id=0, eos_token_id=0))
    model.save_pretrained(folder)
    return model


def _vit(folder):
    model = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, num_labels=3))
    model.save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(folder)
    return model


# family: (builder, peft LoraConfig arguments, kformer target names for adapters trained in kformer)
FAMILIES = {
    "bert": (_bert, dict(target_modules=["query", "value", "dense"], task_type="SEQ_CLS"),
             ("query", "key", "value", "attention_output", "mlp_in", "mlp_out")),
    "gpt2": (_gpt2, dict(target_modules=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True, task_type="CAUSAL_LM"),
             ("query", "key", "value", "mlp_out")),
    "gpt_neo": (_gpt_neo, dict(target_modules=["q_proj", "v_proj", "out_proj", "c_fc"], task_type="CAUSAL_LM"),
                ("query", "value", "mlp_in")),
    "vit": (_vit, dict(target_modules=["q_proj", "v_proj", "fc1"], modules_to_save=["classifier"]),
            ("query", "key", "value", "mlp_out")),
}


def torch_logits(model, family):
    with torch.no_grad():
        if family == "vit":
            pixels = (IMAGES.astype(np.float32) / 255 - 0.5) / 0.5  # ViTImageProcessor's defaults
            return model(pixel_values=torch.from_numpy(pixels.transpose(0, 3, 1, 2))).logits.numpy()
        ids = torch.tensor(IDS)
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.numpy()


def kformer_logits(task, family):
    if family == "vit":
        x = IMAGES.astype("float32")
    elif family == "bert":
        x = {"token_ids": IDS.astype("int32"), "segment_ids": np.zeros_like(IDS, "int32"),
             "padding_mask": np.ones_like(IDS, bool)}
    else:
        x = {"token_ids": IDS.astype("int32"), "padding_mask": np.ones_like(IDS, bool)}
    out = keras.ops.convert_to_numpy(task(x, training=False))
    return np.asarray(out)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{family: (base folder, adapter folder, the peft model's logits, the base model's logits)}."""
    made = {}
    for seed, (family, (build, options, _)) in enumerate(FAMILIES.items()):
        root = tmp_path_factory.mktemp(family)
        torch.manual_seed(seed)
        base = build(root / "base").eval()
        base_logits = torch_logits(base, family)
        model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=6, **options)).eval()
        with torch.no_grad():  # trained-looking adapters and head: B and the head non-zero
            for name, parameter in model.named_parameters():
                if "lora_" in name or "modules_to_save" in name:
                    parameter.normal_(0.0, 0.3)
        model.save_pretrained(root / "adapter")
        made[family] = (root / "base", root / "adapter", torch_logits(model, family), base_logits)
    return made


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_peft_adapter_loads_with_the_peft_models_logits(checkpoints, family):
    base, adapter, expected, base_logits = checkpoints[family]
    task = from_pretrained(base, adapter=adapter)
    got = kformer_logits(task, family)
    difference = float(np.abs(got - expected).max())
    print(f"\n{keras.backend.backend()} {family}: max |logit difference| with the adapter {difference:.3g} "
          f"(the adapter moves them by {float(np.abs(expected - base_logits).max()):.3g})")
    assert difference < TOLERANCE
    assert float(np.abs(expected - base_logits).max()) > 100 * TOLERANCE  # the adapter matters
    assert {w.path.rsplit("/", 1)[-1] for w in task.trainable_weights if "/logits/" not in f"/{w.path}"} == \
        {"lora_kernel_a", "lora_kernel_b"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_adapters_trained_in_kformer_open_in_peft_with_the_same_logits(checkpoints, family, tmp_path):
    base, _, _, base_logits = checkpoints[family]
    task = from_pretrained(base)
    task.enable_lora(3, target_names=FAMILIES[family][2], alpha=5)
    rng = np.random.default_rng(1)
    for variable in task.trainable_weights:  # as after training: every adapter (and head) moved
        variable.assign(np.asarray(variable) + rng.normal(0, 0.3, variable.shape).astype("float32"))
    got = kformer_logits(task, family)
    folder = task.save_pretrained(tmp_path / "adapter", adapter_only=True)
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["fan_in_fan_out"] == (family == "gpt2")
    reference = FAMILIES[family][0].__name__  # reload the base the way a peft user does
    model_class = {"_bert": transformers.BertForSequenceClassification, "_gpt2": transformers.GPT2LMHeadModel,
                   "_gpt_neo": transformers.GPTNeoForCausalLM, "_vit": transformers.ViTForImageClassification}[reference]
    peft_model = peft.PeftModel.from_pretrained(model_class.from_pretrained(base).eval(), folder).eval()
    difference = float(np.abs(torch_logits(peft_model, family) - got).max())
    print(f"\n{keras.backend.backend()} {family}: max |logit difference| in peft {difference:.3g}")
    assert difference < TOLERANCE
    assert float(np.abs(got - base_logits).max()) > 100 * TOLERANCE
    # and back: the written adapter loads into kformer with the same logits
    again = from_pretrained(base, adapter=folder)
    np.testing.assert_allclose(kformer_logits(again, family), got, atol=TOLERANCE)
    assert lora.lora_config(again)["target_names"] == lora.lora_config(task)["target_names"]


def test_a_vit_adapter_with_the_older_module_names_loads_the_same(checkpoints, tmp_path):
    """transformers 5 renamed ViT's modules (`attention.q_proj`); adapters trained before name them as the
    checkpoint's tensors (`attention.attention.query`), and load the same."""
    from kformer.models.pretrained.common import read_safetensors, write_safetensors
    from kformer.models.pretrained.vit import MODULES

    base, adapter, expected, _ = checkpoints["vit"]
    older = tmp_path / "older"
    older.mkdir()
    tensors = {}
    for name, array in read_safetensors(adapter / "adapter_model.safetensors").items():
        for old, new in MODULES.items():
            name = name.replace(".layers.", ".encoder.layer.").replace(f".{new}.", f".{old}.")
        tensors[name] = array
    assert any(".attention.attention.query.lora_A" in name for name in tensors)
    write_safetensors(older / "adapter_model.safetensors", tensors)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (older / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["query", "value", "dense"]}))
    task = from_pretrained(base, adapter=older)
    np.testing.assert_allclose(kformer_logits(task, "vit"), expected, atol=TOLERANCE)
