"""GPT-Neo: the `gpt_neo_125m` preset has the published size, a Hugging Face GPT-Neo checkpoint loads
with transformers' logits, and greedy generation (global and local layers, a window shorter than the
text) equals transformers' with and without the cache."""

import json

import keras
import numpy as np
import pytest

from kformer import models
from kformer.models.gpt import CausalLM
from kformer.models.pretrained import from_pretrained

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB, WINDOW, POSITIONS = 97, 4, 32


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(folder, reference GPTNeoForCausalLM in eval mode): 4 layers, global and local alternating."""
    folder = tmp_path_factory.mktemp("gpt_neo")
    torch.manual_seed(0)
    config = transformers.GPTNeoConfig(vocab_size=VOCAB, max_position_embeddings=POSITIONS, hidden_size=64,
                                       num_layers=4, num_heads=4, attention_types=[[["global", "local"], 2]],
                                       window_size=WINDOW, bos_token_id=None, eos_token_id=None)
    reference = transformers.GPTNeoForCausalLM(config).eval()
    reference.save_pretrained(folder, safe_serialization=True)
    return folder, reference


@pytest.fixture(scope="module")
def lm(checkpoint):
    return from_pretrained(checkpoint[0])


def _reference_logits(reference, ids):
    with torch.no_grad():
        return reference(torch.tensor(np.asarray(ids), dtype=torch.long)).logits.numpy()


def test_config_and_logits_match(checkpoint, lm):
    _, reference = checkpoint
    windows = [block.self_attention.attention_window for block in lm.decoder_blocks]
    assert windows == [None, WINDOW, None, WINDOW]
    assert all(block.self_attention.score_scale == 1.0 for block in lm.decoder_blocks)
    ids = np.random.default_rng(0).integers(0, VOCAB, (3, 24)).astype("int32")  # 24 tokens, window 4
    got = np.asarray(keras.ops.convert_to_numpy(lm.predict_on_batch(ids)))
    difference = np.abs(got - _reference_logits(reference, ids)).max()
    print(f"max |logit difference| on {keras.backend.backend()}: {difference:.3g}")
    assert difference < 1e-4


def test_greedy_generate_matches_reference(checkpoint, lm):
    """Ragged right-padded prompts (lengths 2 and 5) in one batch, 14 and 11 new tokens: the local layers'
    window (4) slides well past each prompt. The reference continues each prompt alone."""
    _, reference = checkpoint
    rng = np.random.default_rng(1)
    lengths, max_length = (2, 5), 16
    prompts = np.zeros((len(lengths), max(lengths)), "int32")
    expected = []
    for row, length in enumerate(lengths):
        prompts[row, :length] = rng.integers(1, VOCAB, length)
        with torch.no_grad():
            expected.append(reference.generate(torch.tensor(prompts[row:row + 1, :length], dtype=torch.long),
                                               max_new_tokens=max_length - length, do_sample=False,
                                               attention_mask=torch.ones((1, length), dtype=torch.long),
                                               pad_token_id=0, eos_token_id=None).numpy()[0])
    expected = np.stack(expected)
    assert 0 not in expected, "the reference chose id 0, which kformer never generates"
    # Without the cache, each step reruns the plain forward pass (the logits test); its compiled loop
    # costs seconds on TensorFlow and JAX, so it runs where it is cheap (eager torch).
    for use_cache in (True, False) if keras.backend.backend() == "torch" else (True,):
        got = np.asarray(lm.generate(prompts, max_length=max_length, use_cache=use_cache))
        np.testing.assert_array_equal(got, expected, err_msg=f"use_cache={use_cache}")


@pytest.mark.only_backend("torch")  # file layout and config checks: no backend code of their own
def test_save_pretrained_opens_in_transformers(checkpoint, lm, tmp_path):
    folder = lm.save_pretrained(tmp_path / "saved")
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["window_size"]) == ("gpt_neo", WINDOW)
    reloaded = transformers.GPTNeoForCausalLM.from_pretrained(folder).eval()
    ids = np.random.default_rng(2).integers(1, VOCAB, (2, 12)).astype("int32")
    np.testing.assert_allclose(_reference_logits(reloaded, ids), _reference_logits(checkpoint[1], ids), atol=1e-5)
    assert [block.self_attention.attention_window for block in from_pretrained(folder).decoder_blocks] == \
        [None, WINDOW, None, WINDOW]
    local_gpt2 = CausalLM(vocabulary_size=20, sequence_length=8, hidden_dim=8, num_layers=2, num_heads=2,
                          intermediate_dim=16, attention_window=2, attention_types=["global", "local"])
    with pytest.raises(ValueError, match="attention_window"):
        local_gpt2.save_pretrained(tmp_path / "gpt2")


@pytest.mark.only_backend("torch")
@pytest.mark.parametrize("change, message", [
    ({"attention_types": [[["global", "local"], 1]]}, "`attention_types`"),
    ({"attention_types": [[["global", "sparse"], 2]]}, "`attention_types`"),
    ({"activation_function": "relu"}, "`activation_function`='relu'"),
    ({"tie_word_embeddings": False}, "`tie_word_embeddings`=False"),
    ({"window_size": 0}, "`window_size`=0"),
])
def test_bad_config_is_named(checkpoint, tmp_path, change, message):
    folder = tmp_path / "bad"
    folder.mkdir()
    data = json.loads((checkpoint[0] / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**data, **change}))
    (folder / "model.safetensors").write_bytes((checkpoint[0] / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        from_pretrained(folder)


@pytest.mark.only_backend("torch")  # presets and shapes: the registry test builds it on every backend
def test_preset_has_the_published_layout():
    preset = models.get_preset("gpt_neo_125m")
    assert (preset["vocabulary_size"], preset["sequence_length"], preset["hidden_dim"], preset["num_layers"],
            preset["num_heads"], preset["attention_window"], preset["activation"]) == \
        (50257, 2048, 768, 12, 12, 256, "gelu_approximate")
    small = models.build("gpt_neo_125m", vocabulary_size=40, sequence_length=16, hidden_dim=16, num_heads=2,
                         intermediate_dim=32, num_layers=4)
    assert [block.self_attention.attention_window for block in small.decoder_blocks] == [None, 256, None, 256]
    assert not any("query/bias" in w.path or "key/bias" in w.path for w in small.weights)


@pytest.mark.only_backend("torch")  # a parameter count does not depend on the backend
def test_preset_parameter_count_equals_transformers():
    """kformer's `gpt_neo_125m` and transformers' GPT-Neo 125M (config as published on the Hub), both
    built without drawing weights, have exactly the same number of parameters."""
    config = transformers.GPTNeoConfig(vocab_size=50257, max_position_embeddings=2048, hidden_size=768,
                                       num_layers=12, num_heads=12, attention_types=[[["global", "local"], 6]],
                                       window_size=256, activation_function="gelu_new", intermediate_size=None)
    with torch.device("meta"):
        reference = sum(p.numel() for p in transformers.GPTNeoForCausalLM(config).parameters())  # tied: once
    with keras.StatelessScope(initialize_variables=False):
        count = models.build("gpt_neo_125m").count_params()
    keras.utils.clear_session()
    assert count == reference == 125_198_592


@pytest.mark.parametrize("kwargs, match", [
    ({"attention_types": ["global", "local"]}, "attention_window=None"),
    ({"attention_types": ["global", "local", "local"], "attention_window": 2}, "attention_types"),
    ({"attention_types": ["global", "sparse"], "attention_window": 2}, "attention_types"),
    ({"attention_window": 0}, "attention_window=0"),
])
@pytest.mark.only_backend("torch")  # argument checks: no backend code of their own
def test_bad_attention_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CausalLM(vocabulary_size=20, sequence_length=8, hidden_dim=8, num_layers=4, num_heads=2,
                 intermediate_dim=16, **kwargs)
