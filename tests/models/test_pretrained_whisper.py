"""Whisper checkpoints in the Hugging Face layout: the log-mel features, encoder states and teacher-forced
logits equal transformers', greedy decoding with the forced prompt and suppressed tokens gives
`WhisperForConditionalGeneration.generate`'s tokens, `transcribe` gives the processor's text, and bad
inputs and checkpoints are refused by name. The checkpoint is tests/whisper_checkpoint.py's tiny random
one; the audio, 20 bundled FSDD recordings (8 kHz, resampled to 16 kHz by the preprocessor), a tone and
silence."""

import json
import pathlib
import shutil

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
    with pytest.raises(ValueError, match="not supported yet"):
        model.fit([str(RECORDINGS[0])], ["one"])
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "decoder_attention_heads": 2}))
    with pytest.raises(ValueError, match="decoder_attention_heads"):
        from_pretrained(bad)
