"""Marian (OPUS-MT) checkpoints in the Hugging Face layout: logits and greedy translations equal
transformers', the SentencePiece preprocessor gives `MarianTokenizer`'s ids and texts, the export serves
source ids, `save_pretrained` writes the layout back, bad checkpoints are refused by name. The checkpoint
is tests/marian_checkpoint.py's tiny random `MarianMTModel`."""

import json
import pathlib
import shutil

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")

from kformer import models  # noqa: E402
from kformer.models.pretrained import from_pretrained  # noqa: E402
from tests.marian_checkpoint import make_marian_checkpoint  # noqa: E402

EDGE = ["", "café naïve résumé àéîõü", "The 3 dogs ate 1,234.5 kg at 12:30.", "emoji 😀👍🏽 ok", "中文 日本語 한국어",
        "x" * 500, "  leading and trailing  ", "multiple   spaces", "new\nline\ttab", "ÅNGSTRÖM ß",
        "a </s> inside", "<unk> and <pad>", "¿Qué? ¡Sí!", "don't DON'T it's", ">>spa<< How are you?", ">>x<<"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(folder, reference MarianMTModel in eval mode, transformers' MarianTokenizer, 2,000 (source, target) pairs
    the SentencePiece models were not trained on)."""
    folder = tmp_path_factory.mktemp("marian")
    return (folder, *make_marian_checkpoint(folder))


@pytest.fixture(scope="module")
def translator(checkpoint):
    return from_pretrained(checkpoint[0])


def _reference_logits(reference, source, target, pad):
    with torch.no_grad():
        return reference(input_ids=torch.tensor(source, dtype=torch.long),
                         attention_mask=torch.tensor(source != pad, dtype=torch.long),
                         decoder_input_ids=torch.tensor(target, dtype=torch.long)).logits.numpy()


def test_config_and_teacher_forced_logits_match(checkpoint, translator):
    folder, reference, _, _ = checkpoint
    pad = reference.config.pad_token_id
    assert (translator.hidden_dim, translator.num_heads, translator.intermediate_dim, translator.num_encoder_layers,
            translator.activation, translator.padding_id, translator.sinusoid_layout) == (
        64, 4, 128, 2, "silu", pad, "halves")
    rng = np.random.default_rng(0)
    source = rng.integers(0, pad, (3, 12)).astype("int32")  # id 0 (`</s>`) inside too
    source[0, 7:], source[1, 10:] = pad, pad  # ragged sources, padded with <pad>
    target = rng.integers(0, pad, (3, 9)).astype("int32")
    target[:, 0] = pad  # the decoder starts from the padding id
    got = np.asarray(keras.ops.convert_to_numpy(translator.predict_on_batch(
        {"encoder_token_ids": source, "decoder_token_ids": target})))
    difference = np.abs(got - _reference_logits(reference, source, target, pad)).max()
    print(f"max |logit difference| on {keras.backend.backend()}: {difference:.3g}")
    assert difference < 1e-4


def test_greedy_translations_equal_generate(checkpoint, translator):
    """30 bundled test sentences, one batch: ids and texts equal transformers' greedy `generate`."""
    _, reference, tokenizer, (test_sources, _) = checkpoint
    sources = test_sources[:30]
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = reference.generate(**batch, num_beams=1, do_sample=False, max_length=21).numpy()
    pad = reference.config.pad_token_id
    got = translator.generate(translator.preprocessor.encode(sources)["encoder_token_ids"], max_length=20,
                              start_token_id=pad, end_token_id=0, end_at_max_length=True,
                              sampler=models.GreedySampler())  # the task's default is the checkpoint's beam
    _assert_same_ids(expected, got)
    assert translator.translate(sources, strategy="greedy", max_length=20) == \
        tokenizer.batch_decode(expected, skip_special_tokens=True)


def _assert_same_ids(expected, got):
    """transformers' `generate` rows (start id first, padded after `</s>`) == kformer's (0 after `</s>` = 0)."""
    for row, (want, mine) in enumerate(zip(expected[:, 1:], got)):  # the reference's first id is the start
        want = list(want[:list(want).index(0) + 1] if 0 in want else want)
        assert list(mine[:len(want)]) == want and not mine[len(want):].any(), row


def test_beam_translations_equal_generate(checkpoint, translator):
    """30 bundled test sentences, one batch: 4-beam ids and texts equal transformers' `generate` with the
    checkpoint's generation config (4 beams, length penalty 1.0, `</s>` forced at `max_length`, `<pad>`
    banned), and with other beam settings."""
    _, reference, tokenizer, (test_sources, _) = checkpoint
    sources = test_sources[:30]
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    source = translator.preprocessor.encode(sources)["encoder_token_ids"]
    pad = reference.config.pad_token_id
    with torch.no_grad():
        expected = reference.generate(**batch).numpy()  # the generation config's settings
        other = reference.generate(**batch, num_beams=5, length_penalty=0.5, no_repeat_ngram_size=2,
                                   max_length=11).numpy()
    assert translator.translate(sources) == tokenizer.batch_decode(expected, skip_special_tokens=True)
    _assert_same_ids(expected, translator.generate(source, strategy="beam", num_beams=4, length_penalty=1.0,
                                                   max_length=15, start_token_id=pad, end_token_id=0,
                                                   end_at_max_length=True))
    _assert_same_ids(other, translator.generate(source, strategy="beam", num_beams=5, length_penalty=0.5,
                                                no_repeat_ngram_size=2, max_length=10, start_token_id=pad,
                                                end_token_id=0, end_at_max_length=True))


@pytest.mark.once("SentencePiece and vocab.json lookups in Python, no Keras")
def test_preprocessor_gives_marian_tokenizer_ids_and_texts(checkpoint, translator):
    _, _, tokenizer, (test_sources, _) = checkpoint
    texts = list(test_sources) + EDGE
    mine = translator.preprocessor.tokenizer
    agree = sum(mine.encode(text) == tokenizer(text)["input_ids"] for text in texts)
    assert agree == len(texts), [t for t in texts if mine.encode(t) != tokenizer(t)["input_ids"]][:5]
    ids = [tokenizer(text)["input_ids"] for text in texts]
    assert [mine.decode(row) for row in ids] == tokenizer.batch_decode(ids, skip_special_tokens=True)
    print(f"MarianTokenizer agreement: {agree} of {len(texts)} texts ({len(texts) - 2000} edge cases)")


@pytest.mark.once("the defaults read from generation_config.json; decoding is checked on every backend above")
def test_translate_uses_the_checkpoints_generation_defaults(checkpoint, translator):
    preprocessor = translator.preprocessor
    assert preprocessor.decoding_defaults == {"sampler": {"name": "beam", "num_beams": 4, "length_penalty": 1.0},
                                              "max_length": 15, "end_at_max_length": True,
                                              "max_word_pieces": None, "no_repeat_ngram_size": 0}
    config = translator.generation_config
    assert (config.sampler, config.max_length, config.start_token_id, config.stop_token_ids) == (
        models.BeamSampler(num_beams=4, length_penalty=1.0), 15, translator.padding_id, (0,))
    assert isinstance(translator.translate("How are you?", max_length=4), str)


def test_keras_file_round_trip(checkpoint, translator, tmp_path):
    path = tmp_path / "marian.keras"
    translator.save(path)
    loaded = models.load(path)
    sources = checkpoint[3][0][:4]
    assert loaded.translate(sources, strategy="greedy", max_length=8) == \
        translator.translate(sources, strategy="greedy", max_length=8)
    assert loaded.preprocessor.decoding_defaults == translator.preprocessor.decoding_defaults


def test_save_pretrained_opens_in_transformers_with_the_same_logits(checkpoint, translator, tmp_path):
    folder, reference, tokenizer, (sources, _) = checkpoint
    saved = translator.save_pretrained(tmp_path / "saved")
    reopened = transformers.MarianMTModel.from_pretrained(saved).eval()
    pad = reference.config.pad_token_id
    source = np.asarray(tokenizer(list(sources[:3]), padding=True)["input_ids"], "int32")
    target = np.array([[pad, 5, 9, 0], [pad, 7, 0, 3], [pad, 2, 4, 6]], "int32")
    np.testing.assert_allclose(_reference_logits(reopened, source, target, pad),
                               _reference_logits(reference, source, target, pad), atol=1e-5)
    again = transformers.MarianTokenizer.from_pretrained(saved)
    assert again(list(sources[:50]))["input_ids"] == tokenizer(list(sources[:50]))["input_ids"]
    assert from_pretrained(saved).preprocessor.decoding_defaults == translator.preprocessor.decoding_defaults


@pytest.mark.once("refused before any weight is read")
def test_save_pretrained_refuses_a_translator_marian_cannot_represent(tmp_path):
    model = models.translator(preset="transformer_tiny", vocabulary_size=50)
    with pytest.raises(ValueError, match="`sinusoid_layout`='interleaved' cannot be saved"):
        model.save_pretrained(tmp_path / "out")
    model = models.translator(preset="transformer_tiny", vocabulary_size=50, sinusoid_layout="halves")
    with pytest.raises(ValueError, match="`padding_id`=0 cannot be saved .* starts its decoder from its padding id"):
        model.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _copy(folder, to, config=None, drop=None, vocabulary=None, generation=None):
    shutil.copytree(folder, to)
    for name, change in (("config.json", config), ("generation_config.json", generation)):
        if change:
            settings = json.loads((to / name).read_text())
            settings.update(change)
            (to / name).write_text(json.dumps(settings))
    if drop:
        (to / drop).unlink()
    if vocabulary:
        (to / "vocab.json").write_text(json.dumps(vocabulary(json.loads((to / "vocab.json").read_text()))))
    return to


@pytest.mark.once("the weights file's reading; the same arrays reach every backend")
def test_a_pytorch_model_bin_loads_the_same_weights_and_a_pickle_is_not_run(checkpoint, translator, tmp_path):
    """Many OPUS-MT checkpoints ship `pytorch_model.bin` alone: read with `torch.load(weights_only=True)`,
    so a file that would run code when unpickled is refused, naming it, and runs nothing."""
    import pickle

    folder, reference = checkpoint[0], checkpoint[1]
    binary = _copy(folder, tmp_path / "bin", drop="model.safetensors")
    torch.save(reference.state_dict(), binary / "pytorch_model.bin")
    loaded = from_pretrained(binary)
    for mine, theirs in zip(loaded.weights, translator.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(mine), keras.ops.convert_to_numpy(theirs))

    class Payload:
        def __reduce__(self):
            return (pathlib.Path.touch, (tmp_path / "ran",))

    (binary / "pytorch_model.bin").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ValueError, match=r"pytorch_model.bin could not be read as tensors \(weights_only=True\)"):
        from_pretrained(binary)
    assert not (tmp_path / "ran").exists()


@pytest.mark.once("config and file checks before any model is built")
@pytest.mark.parametrize("change, message", [
    (dict(config={"activation_function": "tanh"}), "`activation_function`='tanh' cannot be represented"),
    (dict(config={"share_encoder_decoder_embeddings": False}), "`share_encoder_decoder_embeddings`=False"),
    (dict(config={"decoder_start_token_id": 0}), "`decoder_start_token_id`=0 differs from `pad_token_id`"),
    (dict(config={"encoder_ffn_dim": 96}), "`encoder_ffn_dim`=96 differs from `decoder_ffn_dim`=128"),
    (dict(config={"encoder_layers": 3}), "`encoder_layers`=3, but model.safetensors holds 2 layers"),
    (dict(drop="target.spm"), "lacks ['target.spm']"),
    (dict(vocabulary=lambda v: {k: i for k, i in v.items() if k != "<pad>"}), "lacks the special tokens ['<pad>']"),
    (dict(vocabulary=lambda v: {**v, "extra": len(v)}), "holds ids up to"),
    (dict(options={"target_language": ">>spa<<"}), "`target_language` must be one of the checkpoint's codes []"),
    (dict(generation={"early_stopping": True}), "generation_config.json: `early_stopping`=True cannot be represented"),
    (dict(generation={"forced_eos_token_id": 5}), "`forced_eos_token_id`=5 differs from `eos_token_id`=0"),
    (dict(generation={"length_penalty": "long"}), "`length_penalty`='long' must be a finite number"),
])
def test_bad_checkpoints_are_named(checkpoint, tmp_path, change, message):
    options = change.pop("options", {})
    folder = _copy(checkpoint[0], tmp_path / "bad", **change)
    with pytest.raises(ValueError) as err:
        from_pretrained(folder, **options)
    assert message in str(err.value)


@pytest.mark.only_backend("tensorflow")  # the SavedModel is written by TensorFlow on every backend
def test_readme_lines_export_a_translator_that_serves_source_ids_and_passes_check_serving(checkpoint, tmp_path,
                                                                                          monkeypatch):
    """The README's "Pretrained translator" lines, as written, on the tiny checkpoint. SentencePiece runs in
    Python, so the SavedModel takes `source_ids` (the client tokenizes, as `MarianTokenizer(texts,
    padding=True)` does) and detokenizes in core ops. Greedy and beam answers equal in-process `translate`
    (the checkpoint's defaults); bad ids are INVALID_ARGUMENT naming the row; `check-serving` passes."""
    import re
    import subprocess
    import sys

    import tensorflow as tf

    from kformer import export

    folder, _, tokenizer, (test_sources, _) = checkpoint
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", readme[readme.index("### Pretrained translator"):], re.S).group(1)
    assert len(code.strip().splitlines()) == 5 and "hf://Helsinki-NLP/opus-mt-en-es" in code
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(code.replace("hf://Helsinki-NLP/opus-mt-en-es", str(folder)), namespace)  # noqa: S102
    translator = namespace["translator"]
    assert transformers.MarianMTModel.from_pretrained(tmp_path / "opus-mt-en-es-copy").config.vocab_size == \
        translator.decoder_embedding.vocabulary_size
    path = tmp_path / "serving" / "opus_mt_en_es" / "1"
    loaded = tf.saved_model.load(str(path))
    assert sorted(loaded.signatures) == ["serving_default", "translate_beam"]
    sources = list(test_sources[:6])
    ids = tf.constant(tokenizer(sources, padding=True)["input_ids"], tf.int32)
    for name, options in (("serving_default", dict(strategy="greedy")), ("translate_beam", {})):
        served = loaded.signatures[name](source_ids=ids)
        assert [t.decode("utf-8") for t in served["translation"].numpy()] == \
            translator.translate(sources, **options), name
        assert [t.decode("utf-8") for t in served["translation"].numpy()] == \
            translator.preprocessor.detokenize(served["translation_ids"].numpy())
    pad = translator.padding_id
    for bad in ([[5, pad, 7]], [[pad, pad]], [[pad + 1]]):  # a token after padding, empty, outside the vocabulary
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"`source_ids`\[0\] = .* is not a token sequence"):
            loaded.signatures["serving_default"](source_ids=tf.constant(bad, tf.int32))
    with pytest.raises(ValueError, match="`xla=True`"):
        export.export_for_serving(translator, tmp_path / "xla", xla=True)
    check = subprocess.run([sys.executable, "-m", "kformer.cli", "check-serving", str(path)],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "serving_default: ok" in check.stdout, check.stdout + check.stderr[-2000:]


@pytest.mark.once("TensorFlow string ops against SentencePiece in Python")
def test_detokenizing_in_the_graph_equals_sentencepiece(checkpoint, translator):
    """The served graph's detokenization against `MarianTokenizer.decode`, on 2,000 Spanish sentences
    tokenized as targets and on random ids (any piece in any order, specials included)."""
    _, _, tokenizer, (_, targets) = checkpoint
    rows = [tokenizer(text_target=text)["input_ids"] for text in targets]
    rows += np.random.default_rng(0).integers(0, translator.padding_id + 1, (200, 12)).tolist()
    width = max(map(len, rows))
    ids = np.array([row + [translator.padding_id] * (width - len(row)) for row in rows], "int32")
    graph = [t.decode("utf-8") for t in translator.preprocessor.detokenize_tensor(ids).numpy()]
    expected = [tokenizer.decode(row[:row.index(0)] if 0 in row else row, skip_special_tokens=True) for row in rows]
    agree = sum(a == b for a, b in zip(graph, expected))
    print(f"in-graph detokenization agrees with MarianTokenizer on {agree} of {len(rows)} rows")
    assert agree == len(rows), [(a, b) for a, b in zip(graph, expected) if a != b][:3]


def test_peft_adapters_load_with_the_peft_models_logits_and_kformer_adapters_open_in_peft(checkpoint, tmp_path):
    """A peft LoRA adapter on the encoder's and decoder's projections (non-zero factors) gives the peft model's
    logits; adapters trained in kformer, written with `adapter_only=True`, give kformer's logits in peft."""
    peft = pytest.importorskip("peft")
    folder, reference, _, _ = checkpoint
    pad = reference.config.pad_token_id
    rng = np.random.default_rng(0)
    source, target = rng.integers(1, pad, (2, 10)).astype("int32"), rng.integers(1, pad, (2, 6)).astype("int32")
    source[1, 7:], target[:, 0] = pad, pad
    inputs = {"encoder_token_ids": source, "decoder_token_ids": target}
    torch.manual_seed(0)
    adapted = peft.get_peft_model(transformers.MarianMTModel.from_pretrained(folder).eval(), peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "out_proj", "fc1"])).eval()
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_" in name:
                parameter.normal_(0.0, 0.1)
    adapted.save_pretrained(tmp_path / "adapter")
    expected = _reference_logits(adapted, source, target, pad)
    assert np.abs(expected - _reference_logits(reference, source, target, pad)).max() > 1e-2
    task = from_pretrained(folder, adapter=tmp_path / "adapter")
    got = np.asarray(keras.ops.convert_to_numpy(task.predict_on_batch(inputs)))
    print(f"\n{keras.backend.backend()}: max |logit difference| with a peft adapter {np.abs(got - expected).max():.3g}")
    np.testing.assert_allclose(got, expected, atol=1e-4)

    own = from_pretrained(folder)
    own.enable_lora(3, target_names=("query", "key", "value", "mlp_out"))
    for variable in own.trainable_weights:
        variable.assign(rng.normal(0, 0.1, variable.shape).astype("float32"))
    got = np.asarray(keras.ops.convert_to_numpy(own.predict_on_batch(inputs)))
    written = own.save_pretrained(tmp_path / "kformer_adapter", adapter_only=True)
    in_peft = peft.PeftModel.from_pretrained(transformers.MarianMTModel.from_pretrained(folder).eval(), written)
    np.testing.assert_allclose(_reference_logits(in_peft.eval(), source, target, pad), got, atol=1e-4)
