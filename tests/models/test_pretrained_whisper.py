"""Whisper checkpoints in the Hugging Face layout: the log-mel features, encoder states and teacher-forced
logits equal transformers', greedy decoding with the forced prompt and suppressed tokens gives
`WhisperForConditionalGeneration.generate`'s tokens, `transcribe` gives the processor's text, and bad
inputs and checkpoints are refused by name. The checkpoint is tests/whisper_checkpoint.py's tiny random
one; the audio, 20 bundled FSDD recordings (8 kHz, resampled to 16 kHz by the preprocessor), a tone and
silence."""

import json
import pathlib
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kformer import models  # noqa: E402
from kformer.models.pretrained import from_pretrained  # noqa: E402
from tests.whisper_checkpoint import make_whisper_checkpoint  # noqa: E402

RECORDINGS = sorted((pathlib.Path(__file__).parents[2] / "data" / "fsdd" / "recordings").glob("*.wav"))[::3][:20]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(folder, reference model in eval mode, transformers' WhisperProcessor)."""
    folder = tmp_path_factory.mktemp("whisper")
    return (folder, *make_whisper_checkpoint(folder))


@pytest.fixture(scope="module")
def model(checkpoint):
    return from_pretrained(checkpoint[0])


@pytest.fixture(scope="module")
def audio(model):
    """The preprocessor's 16 kHz waveforms, padded to 30 s: 20 recordings, a 440 Hz tone, silence."""
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)).astype("float32")
    return model.preprocessor.encode([str(path) for path in RECORDINGS] + [tone, np.zeros(8000, "float32")])["audio"]


def _reference(checkpoint, audio):
    """transformers' features `(batch, frames, mels)` of the same waveforms (its own padding), as torch."""
    features = checkpoint[2].feature_extractor(list(audio), sampling_rate=16000, return_tensors="pt").input_features
    return features


def test_features_encoder_states_and_logits_match(checkpoint, model, audio):
    assert len(RECORDINGS) == 20
    reference = checkpoint[1]
    rows = audio[[0, 7, 20, 21]]  # two recordings, the tone, silence
    features = _reference(checkpoint, rows)
    got = keras.ops.convert_to_numpy(model.features(rows))
    assert np.abs(got - features.numpy().transpose(0, 2, 1)).max() < TOLERANCE
    decoder = np.array([[401, 402, 406, 410, 30, 31, 250, 399]] * len(rows), "int32")
    with torch.no_grad():
        out = reference(input_features=features, decoder_input_ids=torch.tensor(decoder, dtype=torch.long))
    states = keras.ops.convert_to_numpy(model.encode(rows)[0])
    assert np.abs(states - out.encoder_last_hidden_state.numpy()).max() < TOLERANCE
    logits = keras.ops.convert_to_numpy(model.predict_on_batch({"audio": rows, "decoder_token_ids": decoder}))
    assert np.abs(logits - out.logits.numpy()).max() < TOLERANCE


def test_greedy_tokens_and_text_equal_generate(checkpoint, model, audio):
    folder, reference, processor = checkpoint
    config = model.generation_config
    assert (config.start_token_id, config.forced_prompt_ids, config.stop_token_ids) == (401, (402, 406, 410), (400,))
    assert config.suppress_token_ids and config.begin_suppress_token_ids == (220, 400)
    with torch.no_grad():
        expected = reference.generate(_reference(checkpoint, audio), language="en", task="transcribe").numpy()
    got = model.generate(audio)
    prompt = len(config.forced_prompt_ids)
    assert np.array_equal(got[:, :prompt], np.repeat([config.forced_prompt_ids], len(audio), axis=0))
    generated = got[:, prompt:prompt + expected.shape[1]]
    matches = [np.array_equal(a, b[:len(a)]) for a, b in zip(generated, expected)]
    assert sum(matches) == len(audio), matches
    assert len({tuple(row) for row in expected}) > len(audio) // 2  # the tokens depend on the audio
    assert model.preprocessor.detokenize(got) == processor.batch_decode(expected, skip_special_tokens=True)


def test_fine_tuning_on_transcripts_lowers_the_loss(checkpoint, tmp_path):
    from kformer.training.losses import SparseCrossEntropy

    model = from_pretrained(checkpoint[0])  # its own copy: this test trains it
    words = "zero one two three four five six seven eight nine".split()
    transcripts = [words[int(path.name[0])] for path in RECORDINGS[:6]]
    model.compile(keras.optimizers.AdamW(1e-3), SparseCrossEntropy(reduction="mean_with_sample_weight"))
    history = model.fit([str(path) for path in RECORDINGS[:6]], transcripts, batch_size=3, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.8 * losses[0], losses


@pytest.mark.once("the tokenizer and the loss's reduction are TensorFlow and numpy; the logits it reads are "
                  "held to transformers' on every backend above")
def test_transcripts_tokenize_as_transformers_and_the_loss_is_its_loss(checkpoint, model):
    from kformer.training.losses import SparseCrossEntropy

    _, reference, processor = checkpoint
    texts = ["one two three", " seven eight", "Hello world, this is speech!", "naïve café 😀", "", "a\tb\nc"]
    assert model.preprocessor.tokenize(texts).to_list() == [
        processor.tokenizer(text, add_special_tokens=False).input_ids for text in texts]
    transcripts = ["one", "two three four", "Hello world, this is speech!"]
    (inputs, labels, weights), = list(model.preprocessor.dataset(
        [str(path) for path in RECORDINGS[:3]], transcripts, batch_size=3, language="en").take(1))
    prefix = [401, 402, 406, 410]  # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
    assert inputs["decoder_token_ids"].numpy()[0].tolist()[:5] == prefix + processor.tokenizer(
        "one", add_special_tokens=False).input_ids
    loss = SparseCrossEntropy(reduction="mean_with_sample_weight")(labels, model(inputs), weights)
    hf_labels = np.where(weights.numpy() > 0, labels.numpy(), -100)
    with torch.no_grad():
        expected = reference(input_features=_reference(checkpoint, inputs["audio"].numpy()),
                             decoder_input_ids=torch.tensor(inputs["decoder_token_ids"].numpy(), dtype=torch.long),
                             labels=torch.tensor(hf_labels, dtype=torch.long)).loss
    assert abs(float(keras.ops.convert_to_numpy(loss)) - float(expected)) < TOLERANCE
    with pytest.raises(ValueError, match="one per recording"):
        model.preprocessor.dataset([str(RECORDINGS[0])], ["one", "two"])
    with pytest.raises(ValueError, match="max_target_positions=64"):
        model.preprocessor.dataset([str(RECORDINGS[0])], ["one " * 80])


@pytest.mark.once("the preprocessor's checks and the loader's refusals are numpy and TensorFlow, not the backend's")
def test_language_detection_save_and_bad_inputs(checkpoint, model, audio, tmp_path):
    folder, reference, _ = checkpoint
    with torch.no_grad():
        detected = reference.detect_language(_reference(checkpoint, audio[:3])).numpy()
    codes = {i: code for code, i in model.preprocessor.languages.items()}
    assert model.detect_language(list(audio[:3])) == [codes[i] for i in detected.reshape(-1)]
    with torch.no_grad():  # `transcribe` from WAV files, the language detected
        expected = reference.generate(_reference(checkpoint, audio[:2]), language=codes[int(detected.reshape(-1)[0])]).numpy()
    texts = model.transcribe([str(path) for path in RECORDINGS[:2]])
    assert texts == checkpoint[2].batch_decode(expected, skip_special_tokens=True)
    path = tmp_path / "whisper.keras"
    model.save(path)
    loaded = models.load(path)
    assert loaded.generation_config == model.generation_config
    assert np.array_equal(loaded.generate(audio[:2]), model.generate(audio[:2]))
    with pytest.raises(ValueError, match="audio\\[0\\].*empty"):
        model.transcribe([np.zeros(0, "float32")])
    with pytest.raises(ValueError, match="audio\\[0\\].*finite"):
        model.transcribe([np.full(100, np.nan, "float32")])
    with pytest.raises(ValueError, match="audio\\[0\\]"):
        model.transcribe([b"not a wav file at all"])
    with pytest.raises(ValueError, match="max_seconds=30.0"):
        model.transcribe([np.zeros(16000 * 31, "float32")])
    with pytest.raises(ValueError, match="language"):
        model.transcribe([audio[0]], language="xx")
    with pytest.raises(ValueError, match="`audio` must be a non-empty float array"):
        model.generate(np.zeros((2, 5), "int32"))
    with pytest.raises(ValueError, match="transcripts"):
        model.fit([str(RECORDINGS[0])], [1])
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "decoder_attention_heads": 2}))
    with pytest.raises(ValueError, match="decoder_attention_heads"):
        from_pretrained(bad)


@pytest.mark.once("the SavedModel is traced by TensorFlow on every backend (a TensorFlow worker process on JAX and "
                  "torch, from the .keras file that test_language_detection_save_and_bad_inputs round-trips)")
def test_export_serves_wav_bytes_as_transcribe_does(model, tmp_path):
    import tensorflow as tf

    from kformer import export
    from kformer.generation import BeamSampler

    path = export.export_for_serving(model, tmp_path / "whisper")
    # loads and answers its warmup requests as a stock TF Serving (XLA off: a process of its own)
    check = subprocess.run([sys.executable, "-m", "kformer.cli", "check-serving", str(path)], capture_output=True,
                           text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    wav_bytes = np.array([p.read_bytes() for p in RECORDINGS[:3]], dtype=object)
    served = tf.saved_model.load(str(path)).signatures
    out = served["serving_default"](wav_bytes=tf.constant(wav_bytes))
    expected = model.transcribe([str(p) for p in RECORDINGS[:3]], language="en")  # the export's default prompt
    assert [t.decode("utf-8") for t in out["transcript"].numpy()] == expected
    assert np.array_equal(out["token_ids"].numpy(), model.generate(model.preprocessor.encode(list(wav_bytes))["audio"]))
    beam = served["transcribe_beam"](wav_bytes=tf.constant(wav_bytes[:2]))["transcript"].numpy()
    assert [t.decode("utf-8") for t in beam] == model.transcribe([str(p) for p in RECORDINGS[:2]], language="en",
                                                                sampler=BeamSampler(num_beams=4))
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a WAV file"):
        served["serving_default"](wav_bytes=tf.constant([b"not a wav file at all"]))


@pytest.mark.once("save_pretrained writes numpy arrays and JSON files, which transformers reads on torch")
def test_save_pretrained_opens_in_transformers_with_the_same_logits_and_text(checkpoint, model, audio, tmp_path):
    folder = model.save_pretrained(tmp_path / "saved")
    reference = transformers.WhisperForConditionalGeneration.from_pretrained(folder).eval()
    processor = transformers.WhisperProcessor.from_pretrained(folder)
    texts = ["one two three", "Hello world, this is speech!", "naïve café 😀"]
    assert [processor.tokenizer(t, add_special_tokens=False).input_ids for t in texts] == \
        model.preprocessor.tokenize(texts).to_list()
    rows = audio[:3]
    features = processor.feature_extractor(list(rows), sampling_rate=16000, return_tensors="pt").input_features
    decoder = np.array([[401, 402, 406, 410, 30, 31]] * 3, "int32")
    with torch.no_grad():
        logits = reference(input_features=features, decoder_input_ids=torch.tensor(decoder, dtype=torch.long)).logits
        expected = reference.generate(features, language="en", task="transcribe").numpy()
    got = keras.ops.convert_to_numpy(model.predict_on_batch({"audio": rows, "decoder_token_ids": decoder}))
    assert np.abs(got - logits.numpy()).max() < TOLERANCE
    assert processor.batch_decode(expected, skip_special_tokens=True) == model.preprocessor.detokenize(
        model.generate(rows))
    again = from_pretrained(folder)  # vocab.json, merges.txt and added_tokens.json this time
    assert again.generation_config == model.generation_config
    assert np.array_equal(again.generate(rows), model.generate(rows))
    with pytest.raises(ValueError, match="nothing was written|Nothing was written"):
        models.SpeechToText(vocabulary_size=50, hidden_dim=16, num_heads=2, intermediate_dim=32, num_encoder_layers=1,
                            num_decoder_layers=1, max_source_positions=50, hop_length=80).save_pretrained(
            tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
