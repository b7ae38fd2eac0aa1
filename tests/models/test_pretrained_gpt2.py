"""GPT-2 checkpoints in the Hugging Face layout: logits and greedy generation equal transformers',
the byte-level BPE preprocessor gives transformers' ids, bad checkpoints are refused by name."""

import json
import pathlib

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from kformer.data import imdb  # noqa: E402
from kformer.models.gpt import CausalLM  # noqa: E402
from kformer.models.pretrained import from_pretrained  # noqa: E402

VOCAB = 300
EDGE = ["café naïve résumé", "emoji 😀👍🏽 ok", "multiple   spaces  here ", "new\nlines\n\nand\ttabs", "  leading",
        "trailing  ", "ÅÉÎõü ß 中文 日本語", "it's we'll I'm they've", "a 'thing' here", "rock 'n' roll",
        "He said 'the end'", "x 'tis 's", "don't DON'T", "numbers 1234567 3.14", "tab\t\tx", "\u00a0nbsp\u3000wide",
        "a  \n  b", "end.  ", "hello<|endoftext|>world"]


def _train_tokenizer(folder, texts, size):
    """A byte-level BPE like GPT-2's (bytes first, "!" = id 0, `<|endoftext|>` last), saved as
    vocab.json + merges.txt."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=size - 1, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.model.save(str(folder))  # merges.txt (and a vocab.json rewritten below with the end token)
    tok.add_special_tokens(["<|endoftext|>"])
    (folder / "vocab.json").write_text(json.dumps(tok.get_vocab()), encoding="utf-8")
    return tok.get_vocab_size()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(folder, reference GPT2LMHeadModel in eval mode, transformers tokenizer)."""
    folder = tmp_path_factory.mktemp("gpt2")
    vocab = _train_tokenizer(folder, imdb.load_split("train", max_examples=50)[0], VOCAB)
    end = vocab - 1
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                     bos_token_id=end, eos_token_id=end)
    reference = transformers.GPT2LMHeadModel(config).eval()
    reference.save_pretrained(folder, safe_serialization=True)
    return folder, reference, transformers.GPT2TokenizerFast.from_pretrained(folder)


@pytest.fixture(scope="module")
def lm(checkpoint):
    return from_pretrained(checkpoint[0])


def _reference_logits(reference, ids):
    with torch.no_grad():
        return reference(torch.tensor(np.asarray(ids), dtype=torch.long)).logits.numpy()


def test_config_and_logits_match(checkpoint, lm):
    folder, reference, _ = checkpoint
    assert (lm.vocabulary_size, lm.sequence_length, lm.hidden_dim, lm.num_layers, lm.num_heads,
            lm.intermediate_dim, lm.activation) == (VOCAB, 32, 32, 2, 2, 128, "gelu_approximate")
    ids = np.random.default_rng(0).integers(0, VOCAB, (3, 32)).astype("int32")  # id 0 ("!") included
    got = np.asarray(keras.ops.convert_to_numpy(lm.predict_on_batch(ids)))
    difference = np.abs(got - _reference_logits(reference, ids)).max()
    print(f"max |logit difference| on {keras.backend.backend()}: {difference:.3g}")
    assert difference < 1e-4


def test_greedy_generate_matches_reference(checkpoint, lm):
    """Ragged right-padded prompts (lengths 2 and 5) in one batch, cached and recomputed; the reference
    continues each prompt alone, 10 new tokens for the longest."""
    _, reference, _ = checkpoint
    rng = np.random.default_rng(1)
    lengths, max_length = (2, 5), 15
    prompts = np.zeros((len(lengths), max(lengths)), "int32")
    expected = []
    for row, length in enumerate(lengths):
        prompts[row, :length] = rng.integers(1, VOCAB, length)
        with torch.no_grad():
            expected.append(reference.generate(torch.tensor(prompts[row:row + 1, :length], dtype=torch.long),
                                               max_new_tokens=max_length - length, do_sample=False,
                                               attention_mask=torch.ones((1, length), dtype=torch.long),
                                               pad_token_id=VOCAB - 1).numpy()[0])
    expected = np.stack(expected)
    assert expected.shape == (len(lengths), max_length), "the reference stopped early (end token)"
    assert 0 not in expected, "the reference chose id 0, which kformer never generates"
    # The recomputing loop runs the plain forward pass (the logits test); compiled loops cost ~5 s each
    # on TensorFlow and JAX, so it is checked where it is cheap (eager torch).
    for use_cache in (True, False) if keras.backend.backend() == "torch" else (True,):
        got = np.asarray(lm.generate(prompts, max_length=max_length, use_cache=use_cache))
        np.testing.assert_array_equal(got, expected, err_msg=f"use_cache={use_cache}")


def test_preprocessor_gives_transformers_ids(checkpoint, lm):
    _, _, hf = checkpoint
    texts = imdb.load_split("train", max_examples=50)[0] + EDGE
    got = lm.preprocessor.tokenizer.tokenize(np.array(texts, dtype=object)).to_list()
    expected = [hf(t)["input_ids"] for t in texts]
    agree = [g == e for g, e in zip(got, expected)]
    print(f"tokenizer agreement: {sum(agree[:50])}/50 IMDB, {sum(agree[50:])}/{len(EDGE)} edge cases")
    assert all(agree), [t[:60] for t, a in zip(texts, agree) if not a]
    decoded = lm.preprocessor.detokenize(_right_pad(expected[50:]))  # drops 0 (padding) and the end token
    assert decoded == [hf.decode(e, skip_special_tokens=True) for e in expected[50:]]


def _right_pad(rows):
    width = max(map(len, rows))
    return np.array([r + [0] * (width - len(r)) for r in rows], "int32")


def test_preprocessor_training_data_and_string_generate(checkpoint, lm):
    _, reference, hf = checkpoint
    preprocessor = lm.preprocessor
    assert preprocessor.tokenizer.vocabulary_size == VOCAB and preprocessor.end_token_id == VOCAB - 1
    assert preprocessor.sequence_length == 32
    ids, labels, weights = (np.asarray(t) for t in preprocessor(["The movie was fine"]))
    tokens = hf("The movie was fine")["input_ids"] + [VOCAB - 1]
    n = len(tokens)
    assert ids[0, :n].tolist() == tokens and labels[0, :n - 1].tolist() == tokens[1:]
    assert weights[0].tolist() == [1.0] * (n - 1) + [0.0] * (32 - n + 1)
    windows = list(preprocessor.dataset(imdb.load_split("train", max_examples=8)[0], batch_size=4))
    assert windows and tuple(windows[0][0].shape) == (4, 32)
    np.testing.assert_array_equal(preprocessor.encode(["The movie was fine"]), ids)
    prompts = ["The film", "It was a good"]  # batch 2, max_length 15: the loop compiled by the test above
    expected = []
    for prompt in prompts:
        prompt_ids = hf(prompt)["input_ids"]
        assert 0 not in prompt_ids
        with torch.no_grad():
            row = reference.generate(torch.tensor([prompt_ids]), max_new_tokens=15 - len(prompt_ids),
                                     do_sample=False, attention_mask=torch.ones((1, len(prompt_ids)), dtype=torch.long),
                                     pad_token_id=VOCAB - 1, eos_token_id=None)[0].tolist()
        assert 0 not in row
        expected.append(hf.decode([t for t in row if t != VOCAB - 1]))
    assert lm.generate(prompts, max_length=15, end_token_id=None) == expected
    long = len(hf(prompts[1])["input_ids"])  # a prompt that leaves no room to generate is named, not cut to nothing
    with pytest.raises(ValueError, match=rf"`prompts`\[1\] is {long} or more tokens long .* `max_length`={long} leaves "
                                         rf"room for {long - 1}"):
        lm.generate(prompts, max_length=long)
    with pytest.raises(ValueError, match="token id 0"):
        preprocessor.prompt_ids(["Wow!"])


def test_keras_file_round_trip(checkpoint, lm, tmp_path):
    path = tmp_path / "gpt2.keras"
    lm.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.activation == "gelu_approximate"
    ids = np.arange(1, 17, dtype="int32")[None]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(ids)), keras.ops.convert_to_numpy(lm(ids)), atol=1e-6)
    for attribute in ("vocabulary", "merges"):  # the tokenizer's assets came back (encoding them traces for seconds)
        assert getattr(loaded.preprocessor.byte_pair_tokenizer, attribute) == getattr(
            lm.preprocessor.byte_pair_tokenizer, attribute)
    assert loaded.preprocessor.tokenizer.vocabulary_size == VOCAB and loaded.preprocessor.sequence_length == 32


def test_default_activation_unchanged():
    model = CausalLM(vocabulary_size=20, sequence_length=8, hidden_dim=8, num_layers=1, num_heads=2,
                     intermediate_dim=16)
    assert model.activation == "gelu" and model.get_config()["activation"] == "gelu"
    assert model.decoder_blocks[0].activation is keras.activations.gelu
    with pytest.raises(ValueError, match="activation"):
        CausalLM(vocabulary_size=20, sequence_length=8, hidden_dim=8, num_layers=1, num_heads=2,
                 intermediate_dim=16, activation="relu")


def _copy(folder, to, config=None, drop=None):
    """The checkpoint folder's config and weights copied to `to`, the config updated, tensors dropped."""
    from safetensors.numpy import load_file, save_file

    to.mkdir()
    data = json.loads((folder / "config.json").read_text())
    (to / "config.json").write_text(json.dumps({**data, **(config or {})}))
    weights = {k: v for k, v in load_file(folder / "model.safetensors").items() if k != drop}
    save_file(weights, to / "model.safetensors", metadata={"format": "pt"})
    return to


@pytest.mark.parametrize("change, message", [
    ({"activation_function": "relu"}, "config.json: `activation_function`='relu'"),
    ({"scale_attn_by_inverse_layer_idx": True}, "`scale_attn_by_inverse_layer_idx`=True"),
    ({"reorder_and_upcast_attn": True}, "`reorder_and_upcast_attn`=True"),
    ({"scale_attn_weights": False}, "`scale_attn_weights`=False"),
    ({"tie_word_embeddings": False}, "`tie_word_embeddings`=False"),
    ({"n_embd": 64}, "`n_embd`=64, but model.safetensors holds tensor 'transformer.wte.weight' of shape (300, 32)"),
    ({"n_layer": 3}, "`n_layer`=3, but model.safetensors holds 2 layers"),
    # sizes that would take minutes and gigabytes to build are compared with the tensors first
    ({"n_layer": 100_000}, "`n_layer`=100000, but model.safetensors holds 2 layers; the checkpoint was not loaded "
                           "(nothing was built)"),
    ({"n_embd": 2 ** 20}, "`n_embd`=1048576, but model.safetensors holds tensor 'transformer.wte.weight'"),
    ({"n_inner": 2 ** 24}, "`n_inner`=16777216, but model.safetensors holds tensor 'transformer.h.0.mlp.c_fc.bias'"),
    ({"n_positions": 10 ** 7}, "`n_positions`=10000000, but model.safetensors holds tensor 'transformer.wpe.weight'"),
])
def test_bad_config_is_named(checkpoint, tmp_path, change, message):
    folder = _copy(checkpoint[0], tmp_path / "bad", config=change)
    with pytest.raises(ValueError, match=_escape(message)):
        from_pretrained(folder)


ONCE_FILES = ("the checkpoint's files are read and checked with NumPy before any backend code runs; the model "
              "is then built as on every backend")


def _sharded(folder, to, shards):
    """The checkpoint as an index and shard files: `shards` maps a tensor name to the shard file the index
    names for it (a name, a path, or a value of another type); every other tensor goes to `part-1.safetensors`."""
    from safetensors.numpy import load_file, save_file

    to.mkdir()
    (to / "config.json").write_text((folder / "config.json").read_text())
    weights = load_file(folder / "model.safetensors")
    save_file(weights, to / "part-1.safetensors", metadata={"format": "pt"})
    weight_map = {name: shards.get(name, "part-1.safetensors") for name in weights}
    (to / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return to, weights


@pytest.mark.once(ONCE_FILES)
def test_a_sharded_checkpoint_loads_the_same_logits(checkpoint, lm, tmp_path):
    folder, weights = _sharded(checkpoint[0], tmp_path / "sharded", {})
    from safetensors.numpy import save_file

    second = {k: v for k, v in weights.items() if ".h.1." in k}  # layer 1 in its own shard
    save_file(second, folder / "part-2.safetensors", metadata={"format": "pt"})
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"].update({k: "part-2.safetensors" for k in second})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    ids = np.arange(1, 17, dtype="int32")[None]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(from_pretrained(folder, preprocessor=False)(ids)),
                               keras.ops.convert_to_numpy(lm(ids)), atol=1e-6)


@pytest.mark.once(ONCE_FILES)
@pytest.mark.parametrize("shard, message", [
    ("../outside.safetensors", "names the shard '../outside.safetensors'; expected a file name inside"),
    ("OUTSIDE", "; expected a file name inside"),  # the absolute path of the same file
    ("link.safetensors", "names the shard 'link.safetensors', which leads to"),  # a symbolic link out of the folder
    (7, "names the shard 7; expected a file name inside"),
], ids=["dot-dot", "absolute", "symlink", "not a name"])
def test_an_index_cannot_lead_outside_the_checkpoint_folder(checkpoint, tmp_path, shard, message):
    """A stranger's `model.safetensors.index.json` naming a file outside its folder is refused by name
    before any shard is opened (the file outside is a valid shard: it used to load)."""
    from safetensors.numpy import save_file

    outside = tmp_path / "outside.safetensors"
    if shard == "OUTSIDE":
        shard = str(outside)
    folder, weights = _sharded(checkpoint[0], tmp_path / "sharded", {"transformer.ln_f.bias": shard})
    save_file({"transformer.ln_f.bias": weights["transformer.ln_f.bias"]}, outside, metadata={"format": "pt"})
    (folder / "link.safetensors").symlink_to(outside)
    with pytest.raises(ValueError, match=_escape(message)):
        from_pretrained(folder)


@pytest.mark.once(ONCE_FILES)
def test_tensor_entries_are_checked_not_taken_at_face_value(checkpoint, tmp_path):
    """An integer tensor for a float weight is refused (it was cast silently), overlapping byte ranges
    (which the format forbids) are refused, and non-finite weights load with a warning naming them."""
    from safetensors.numpy import load_file, save_file

    from kformer.models.pretrained import common

    weights = load_file(checkpoint[0] / "model.safetensors")
    folder = _copy(checkpoint[0], tmp_path / "int")
    save_file({**weights, "transformer.ln_f.bias": weights["transformer.ln_f.bias"].astype("int32")},
              folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=_escape("tensor 'transformer.ln_f.bias' is stored as int32 (integer or "
                                                 "boolean), but final_norm")):
        from_pretrained(folder)

    save_file({**weights, "transformer.ln_f.weight": np.full(32, np.nan, "float32")}, folder / "model.safetensors",
              metadata={"format": "pt"})
    with pytest.warns(UserWarning, match=_escape("tensor 'transformer.ln_f.weight' holds 32 NaN or infinite values "
                                                 "of 32")):
        from_pretrained(folder, preprocessor=False)

    header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()
    (tmp_path / "overlap.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(12))
    with pytest.raises(ValueError, match=_escape("tensors 'a' and 'b' share bytes 4-8 (overlapping `data_offsets`")):
        common.read_safetensors(tmp_path / "overlap.safetensors")


@pytest.mark.once(ONCE_FILES)
def test_save_pretrained_through_a_symbolic_link_replaces_its_target(lm, tmp_path):
    """`save_pretrained(link, overwrite=True)` rewrites the folder the link points to and keeps the link;
    nothing (`.link.old-*`) is left beside it."""
    target = tmp_path / "store" / "gpt2"
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("from an older save")
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    lm.save_pretrained(link, overwrite=True)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert (target / "config.json").is_file() and not (target / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "store"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["gpt2"]


def _forged_shape(folder):
    data = (folder / "model.safetensors").read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    header["transformer.ln_f.bias"]["shape"] = [-1]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (folder / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data[8 + size:])


def _first_merges_only(folder):
    vocabulary = json.loads((folder / "vocab.json").read_text())
    (folder / "vocab.json").write_text(json.dumps(dict(list(vocabulary.items())[:100])))


@pytest.mark.once(ONCE_FILES)
@pytest.mark.parametrize("edit, message", [
    (lambda f: (f / "vocab.json").write_text("{not json"), "vocab.json is not valid JSON: Expecting property name"),
    (lambda f: (f / "vocab.json").write_text('{"a": "1"}'), "vocab.json must map each token to an int id"),
    (lambda f: (f / "merges.txt").write_bytes(b"#version: 0.2\n\xff\xfe a\n"), "merges.txt is not UTF-8 text"),
    (_first_merges_only, "vocab.json and .*merges.txt do not make a GPT-2 tokenizer: Merge rule"),
    (_forged_shape, "tensor 'transformer.ln_f.bias' has the shape \\[-1\\]; dimensions must be ints >= 0"),
    (lambda f: (f / "config.json").write_text(json.dumps({**json.loads((f / "config.json").read_text()),
                                                           "eos_token_id": 10 ** 6})),
     r"config.json: `eos_token_id`=1000000 is not a token id in \[0, 300\)"),
], ids=["vocab not JSON", "vocab ids not ints", "merges not UTF-8", "merges outside the vocabulary", "negative shape",
        "end token outside the vocabulary"])
def test_every_file_error_names_the_file(checkpoint, tmp_path, edit, message):
    """Raw JSON, codec, keras-hub and NumPy errors naming no file, and an `eos_token_id` that loaded and
    made every `generate` fail, are ValueErrors naming the file (and field)."""
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(checkpoint[0], folder)
    edit(folder)
    with pytest.raises(ValueError, match=message):
        from_pretrained(folder)


@pytest.mark.once(ONCE_FILES)
def test_save_pretrained_names_a_folder_it_cannot_write(lm, tmp_path):
    with pytest.raises(ValueError, match="`folder` must be a str or path of the folder to write. Received: folder=None"):
        lm.save_pretrained(None)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match=r"lies below '.*a_file', which is a file, not a folder; nothing was written"):
        lm.save_pretrained(tmp_path / "a_file" / "gpt2")


def _hostile_strategies():
    from hypothesis import strategies as st

    sizes = st.one_of(st.sampled_from([0, -1, 1, 2, 3, 16, 32, 300, 10 ** 5, 2 ** 20, 2 ** 40]), st.none(),
                      st.text(max_size=3), st.booleans(), st.floats(allow_nan=True))
    config = st.dictionaries(st.sampled_from(["n_layer", "n_embd", "n_head", "n_positions", "vocab_size", "n_inner",
                                              "eos_token_id"]), sizes, max_size=3)
    shard = st.one_of(st.sampled_from(["part-1.safetensors", "../outside.safetensors", "/etc/hostname", "", ".",
                                       "link.safetensors", "missing.safetensors"]), st.integers(), st.none())
    header = st.fixed_dictionaries({}, optional={
        "dtype": st.sampled_from(["F32", "I32", "BOOL", "F16", "X9", 5]),
        "shape": st.lists(st.integers(-2, 2 ** 33), max_size=3),
        "data_offsets": st.lists(st.integers(-8, 2 ** 40), min_size=0, max_size=3)})
    return config, shard, header


CONFIG_CHANGES, SHARDS, HEADER_CHANGES = _hostile_strategies()


@pytest.mark.once(ONCE_FILES)
def test_a_hostile_checkpoint_loads_or_is_refused_naming_its_file_quickly_and_in_bounded_memory(checkpoint, tmp_path):
    """Issue 75: a checkpoint folder whose config, shard index and safetensors header are drawn from strategies
    gives a working model or a ValueError naming the file, within seconds and without growing this process by
    gigabytes (a config asking for 100,000 layers built for minutes, an index led outside the folder)."""
    import resource
    import shutil
    import time

    from hypothesis import given, settings
    from safetensors.numpy import load_file

    weights = load_file(checkpoint[0] / "model.safetensors")
    target = "transformer.ln_f.bias"
    counter = iter(range(10 ** 6))

    @settings(max_examples=30)
    @given(config=CONFIG_CHANGES, shard=SHARDS, header=HEADER_CHANGES)
    def check(config, shard, header):
        folder = tmp_path / f"case-{next(counter)}"
        shutil.copytree(checkpoint[0], folder)
        (folder / "config.json").write_text(json.dumps({**json.loads((folder / "config.json").read_text()),
                                                        **config}))
        data = (folder / "model.safetensors").read_bytes()
        size = int.from_bytes(data[:8], "little")
        entries = json.loads(data[8:8 + size])
        entries[target] = {**entries[target], **header}
        text = json.dumps(entries).encode()
        text += b" " * (-len(text) % 8)
        (folder / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data[8 + size:])
        if shard != "part-1.safetensors":  # sharded: the index names `shard` for one tensor
            (folder / "model.safetensors").rename(folder / "part-1.safetensors")
            weight_map = {name: "part-1.safetensors" for name in weights}
            weight_map[target] = shard
            (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
            (folder / "link.safetensors").symlink_to(checkpoint[0] / "model.safetensors")
        peak, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic()
        try:
            model = from_pretrained(folder, preprocessor=False)
        except ValueError as error:
            assert any(name in str(error) for name in ("config.json", "model.safetensors", "part-1.safetensors",
                                                       "index.json")), error
        else:
            ids = np.arange(1, 9, dtype="int32")[None]
            assert np.isfinite(keras.ops.convert_to_numpy(model(ids))).all() or not np.isfinite(
                load_file(folder / ("model.safetensors" if (folder / "model.safetensors").exists() else
                                    "part-1.safetensors"))[target]).all()
        assert time.monotonic() - start < 30, (config, shard, header)
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 2 * 2 ** 20, (config, shard, header)  # KiB
        shutil.rmtree(folder)

    check()


def test_missing_tensor_and_bad_task_are_named(checkpoint, tmp_path):
    folder = _copy(checkpoint[0], tmp_path / "missing", drop="transformer.h.1.mlp.c_fc.bias")
    with pytest.raises(ValueError, match=_escape("model.safetensors has no tensor 'transformer.h.1.mlp.c_fc.bias'")):
        from_pretrained(folder)
    with pytest.raises(ValueError, match="task='fill_mask'"):
        from_pretrained(checkpoint[0], task="fill_mask")


def _escape(text):
    import re

    return re.escape(text)


def test_exact_gelu_checkpoint(checkpoint, tmp_path):
    """`activation_function: "gelu"` (erf) loads as kformer's exact `"gelu"`, logits equal."""
    folder = _copy(checkpoint[0], tmp_path / "erf", config={"activation_function": "gelu"})
    reference = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    lm = from_pretrained(folder)
    assert lm.activation == "gelu" and lm.preprocessor is None  # no vocab.json / merges.txt copied
    ids = np.random.default_rng(2).integers(0, VOCAB, (2, 16)).astype("int32")
    got = np.asarray(keras.ops.convert_to_numpy(lm(ids)))
    assert np.abs(got - _reference_logits(reference, ids)).max() < 1e-4


@pytest.mark.only_backend("tensorflow")  # the SavedModel is written by TensorFlow on every backend
def test_exported_model_serves_token_ids_and_passes_check_serving(checkpoint, lm, tmp_path):
    """keras-hub's BPE needs tensorflow-text's regex split, which a stock TF Serving lacks: the SavedModel
    takes `prompt_ids` (the client tokenizes) and detokenizes in core ops. Greedy completions equal
    in-process `generate`; bad ids are INVALID_ARGUMENT naming the row; `check-serving` passes."""
    import subprocess
    import sys

    import tensorflow as tf

    from kformer import export

    path = export.export_for_serving(lm, tmp_path / "gpt2", max_length=15)
    loaded = tf.saved_model.load(str(path))
    assert sorted(loaded.signatures) == ["generate_sample", "serving_default"]
    prompts = ["The film", "It was a good"]
    ids = lm.preprocessor.prompt_ids(prompts)
    served = {k: v.numpy() for k, v in loaded.signatures["serving_default"](prompt_ids=tf.constant(ids)).items()}
    tokens = np.asarray(lm.generate(ids, max_length=15))
    np.testing.assert_array_equal(served["token_ids"][:, :tokens.shape[1]], tokens)
    assert [t.decode("utf-8", "replace") for t in served["text"]] == lm.generate(prompts, max_length=15)
    assert [t.decode("utf-8", "replace") for t in served["completion"]] == lm.preprocessor.detokenize(served["completion_ids"])
    sampled = loaded.signatures["generate_sample"](prompt_ids=tf.constant(ids), seed=tf.constant(3, tf.int64))
    assert sampled["token_ids"].shape[0] == 2
    for bad in ([[5, 0, 7]], [[0, 0]], [[VOCAB]]):  # a token after padding, empty, outside the vocabulary
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"`prompt_ids`\[0\] = .* is not a prompt"):
            loaded.signatures["serving_default"](prompt_ids=tf.constant(bad, tf.int32))
    # In its own process: check-serving turns XLA compilation off for the rest of the process it runs in.
    check = subprocess.run([sys.executable, "-m", "kformer.cli", "check-serving", str(path)],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "serving_default: ok" in check.stdout, check.stdout + check.stderr[-2000:]


def test_a_nul_character_is_refused_not_dropped(lm):
    """keras-hub's BPE drops a NUL and everything after it: refused, in process and in graphs."""
    import tensorflow as tf

    with pytest.raises(ValueError, match=r"`texts`\[1\] holds a NUL character"):
        lm.preprocessor.tokenize(["fine", "before\x00after"])
    with pytest.raises(ValueError, match="NUL character"):
        lm.preprocessor.prompt_ids(["a\x00b"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="NUL character"):
        lm.preprocessor._tokenizer_function()(tf.constant(["x\x00y"]))
    assert lm.preprocessor.tokenize(["fine"]).to_list() == lm.preprocessor._tokenizer_function()(
        tf.constant(["fine"])).to_list()
