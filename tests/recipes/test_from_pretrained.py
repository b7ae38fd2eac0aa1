"""`--from-pretrained` in train_imdb (BERT), train_vit (ViT) and train_translator (Marian): tiny random
checkpoints written by `transformers`' `save_pretrained`, fine-tuned end to end, saved, carded and (BERT,
Marian) served."""

import csv
import json
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from kformer import models  # noqa: E402
from recipes import common, lock, train_imdb, train_speech, train_translator, train_vit  # noqa: E402

TEXTS = ["A wonderful, moving film.", "Dull, DULL and far too long!", "Café scenes, <br />great actors."]
RUN = ["--epochs=1", "--max-examples=64", "--batch-size=16", "--no-plots", "--verbose=2"]


@pytest.fixture(scope="module")
def bert_checkpoint(tmp_path_factory):
    """A 2-layer, 32-wide random `BertForMaskedLM` whose vocab.txt is learned on the bundled reviews."""
    from kformer.data import imdb
    from kformer.data.wordpiece import BERT_SPECIAL_TOKENS, WordPieceTokenizer

    texts, _ = imdb.load_split("train", max_examples=500)
    vocabulary = WordPieceTokenizer.learn(texts, 400, special_tokens=BERT_SPECIAL_TOKENS).vocabulary
    assert vocabulary[0] == "[PAD]"
    folder = tmp_path_factory.mktemp("checkpoints") / "tiny-bert"
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=len(vocabulary), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=48))
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "vocab.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return folder


@pytest.fixture(scope="module")
def vit_checkpoint(tmp_path_factory):
    """A 2-layer, 32-wide random `ViTForImageClassification` on 32x32 RGB images, 5 classes."""
    folder = tmp_path_factory.mktemp("checkpoints") / "tiny-vit"
    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                                    num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    num_labels=5, id2label=dict(enumerate("abcde")))
    transformers.ViTForImageClassification(config).save_pretrained(folder, safe_serialization=True)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def _card_and_metrics(run_dir, source):
    metrics = json.loads((run_dir / "metrics.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    assert metrics["from_pretrained"] == config["from_pretrained"] == str(source)
    card = (run_dir / "README.md").read_text()
    assert f"fine-tuned from the pretrained checkpoint `{source}`" in card and f"(from {source})" in card
    assert (run_dir / "model.keras").is_file()
    return metrics, config


@pytest.mark.only_backend("tensorflow")  # with its export, served in-process
def test_imdb_fine_tunes_bert_and_serves_its_vocabulary(bert_checkpoint, tmp_path):
    import tensorflow as tf

    run_dir = train_imdb.main(RUN + [f"--from-pretrained={bert_checkpoint}", "--sequence-length=64",
                                     f"--output-dir={tmp_path}"])
    assert run_dir == tmp_path / "tiny-bert_imdb" / "1"
    metrics, config = _card_and_metrics(run_dir, bert_checkpoint)
    assert metrics["learning_rate"] == 2e-5 and metrics["test_examples"] == 64
    assert config["sequence_length"] == 48 and config["normalizer"] == "bert_uncased"  # capped at its positions
    model = models.load(run_dir)
    assert type(model).__name__ == "BertTextClassifier" and model.class_names == train_imdb.CLASS_NAMES
    vocabulary = (bert_checkpoint / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert model.preprocessor.tokenizer.vocabulary == vocabulary
    want = model.predict(TEXTS, verbose=0)
    served = tf.saved_model.load(str(run_dir)).signatures["serving_default"]
    got = served(text=tf.constant(TEXTS))["probabilities"].numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    # In its own process: check-serving turns XLA compilation off for the rest of the process it runs in.
    check = subprocess.run([sys.executable, "-m", "kformer.cli", "check-serving", str(run_dir)],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "serving_default: ok" in check.stdout, check.stdout + check.stderr[-2000:]


@pytest.mark.only_backend("torch")  # the recipe code is the backend's; export is tested above and in tests/export
def test_vit_fine_tunes_on_mnist_with_a_new_head_and_lora(vit_checkpoint, tmp_path, capsys):
    """With `--lora-rank`: model.keras holds the merged weights, and the adapters written beside it
    (kformer's file, and a peft folder) put the same predictions on the checkpoint."""
    run_dir = train_vit.main(RUN + [f"--from-pretrained={vit_checkpoint}", "--no-export", "--lora-rank=4",
                                    f"--output-dir={tmp_path}"])
    assert run_dir == tmp_path / "tiny-vit_mnist" / "1"
    assert "LoRA rank 4 on query, value: training" in capsys.readouterr().out
    metrics, config = _card_and_metrics(run_dir, vit_checkpoint)
    assert metrics["learning_rate"] == 3e-5 and config["new_head"] is True and config["lora_rank"] == 4
    model = models.load(run_dir)
    assert model.num_classes == 10 and model.class_names == [str(d) for d in range(10)]
    assert not [w for w in model.weights if "lora" in w.path]  # merged
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3)).astype("float32")
    want = keras.ops.convert_to_numpy(model(images, training=False))
    assert want.shape == (2, 10)
    for adapter in ("lora_adapter.safetensors", "peft_adapter"):
        base = models.from_pretrained(vit_checkpoint, num_classes=10)
        if adapter.endswith(".safetensors"):
            base.load_lora_weights(run_dir / adapter)
        else:
            base = models.from_pretrained(vit_checkpoint, num_classes=10, adapter=run_dir / adapter)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(base(images, training=False)), want, atol=1e-5)


def test_vit_loader_keeps_or_replaces_the_head(vit_checkpoint):
    original = models.from_pretrained(vit_checkpoint)
    renamed = models.from_pretrained(vit_checkpoint, class_names=list("vwxyz"))  # as many: the head is kept
    assert renamed.class_names == list("vwxyz")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(renamed.head.kernel),
                                  keras.ops.convert_to_numpy(original.head.kernel))
    new = models.from_pretrained(vit_checkpoint, num_classes=3)
    assert new.num_classes == 3 and tuple(new.head.kernel.shape) == (32, 3)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(new.final_norm.gamma),
                                  keras.ops.convert_to_numpy(original.final_norm.gamma))
    with pytest.raises(ValueError, match="num_classes"):
        models.from_pretrained(vit_checkpoint, num_classes=3, class_names=["a", "b"])


@pytest.mark.parametrize("recipe", [train_imdb, train_vit])
def test_from_pretrained_flags(recipe, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        recipe.parse_args(["--from-pretrained=some/folder", "--preset=vit_tiny" if recipe is train_vit
                           else "--preset=imdb_tiny"])
    assert exit_info.value.code == 2
    assert "--from-pretrained and --preset are alternatives" in capsys.readouterr().err
    scratch, tuned = recipe.parse_args([]), recipe.parse_args(["--from-pretrained=some/folder"])
    assert scratch.learning_rate == 1e-3 and tuned.learning_rate == (2e-5 if recipe is train_imdb else 3e-5)
    assert scratch.from_pretrained is None and tuned.preset is None
    assert recipe.parse_args(["--from-pretrained=x", "--learning-rate=1e-4"]).learning_rate == 1e-4
    assert recipe.parse_args(["--from-pretrained=x", "--lora-rank=8"]).lora_rank == 8 and tuned.lora_rank is None
    assert recipe.parse_args(["--from-pretrained=x", "--lora-rank=8", "--lora-targets=all"]).lora_targets == \
        list(common.LORA_TARGETS)
    assert recipe.parse_args(["--from-pretrained=x", "--lora-rank=8", "--lora-targets=query, mlp_in"]).lora_targets \
        == ["query", "mlp_in"]
    for bad, message in (["--lora-rank=4"], "--lora-rank adapts a checkpoint"), (
            ["--from-pretrained=x", "--lora-rank=0"], "argument --lora-rank: expected an integer >= 1"), (
            ["--from-pretrained=x", "--lora-rank=2", "--lora-targets=qkv"], "--lora-targets: expected names from"), (
            ["--from-pretrained=x", "--lora-targets=all"], "--lora-targets chooses what --lora-rank adapts"):
        with pytest.raises(SystemExit) as exit_info:
            recipe.parse_args(bad)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert "from_pretrained" not in common.MAY_CHANGE_ON_RESUME
    # a rerun with another checkpoint does not resume the unfinished run
    common.training_dir(recipe.parse_args([f"--output-dir={tmp_path}", "--from-pretrained=a"]), "run")
    lock.release_all()
    with pytest.raises(SystemExit) as exit_info:
        common.training_dir(recipe.parse_args([f"--output-dir={tmp_path}", "--from-pretrained=b"]), "run")
    assert exit_info.value.code == 2 and "--from-pretrained was 'a', now 'b'" in capsys.readouterr().err


@pytest.mark.only_backend("tensorflow")  # it exports
def test_readme_pretrained_lines_run(bert_checkpoint, tmp_path, monkeypatch):
    """The README's five lines from a checkpoint to a served model, as written, on the tiny checkpoint."""
    import re

    import tensorflow as tf

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Pretrained weights"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) == 5 and "hf://google-bert/bert-base-uncased" in code
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(code.replace("hf://google-bert/bert-base-uncased", str(bert_checkpoint))  # noqa: S102
             .replace("max_examples=2000", "max_examples=64"), namespace)
    bert = namespace["bert"]
    served = tf.saved_model.load(str(tmp_path / "serving" / "imdb_bert" / "1")).signatures["serving_default"]
    np.testing.assert_allclose(served(text=tf.constant(TEXTS))["probabilities"].numpy(),
                               bert.predict(TEXTS, verbose=0), atol=1e-5)


@pytest.mark.only_backend("tensorflow")  # it exports
def test_readme_lora_lines_run(bert_checkpoint, tmp_path, monkeypatch):
    """The README's LoRA lines, as written, on the tiny checkpoint: the served model is the merged one, and
    the peft folder puts the same predictions on the checkpoint (with the new head, and the pooler this
    masked-LM checkpoint lacks, as `modules_to_save`)."""
    import re

    import tensorflow as tf

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Fine-tune with LoRA"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "enable_lora" in code and "adapter_only=True" in code
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(code.replace("hf://google-bert/bert-base-uncased", str(bert_checkpoint))  # noqa: S102
             .replace("max_examples=2000", "max_examples=64"), namespace)
    want = namespace["bert"].predict(TEXTS, verbose=0)
    served = tf.saved_model.load(str(tmp_path / "serving" / "imdb_bert_lora" / "1")).signatures["serving_default"]
    np.testing.assert_allclose(served(text=tf.constant(TEXTS))["probabilities"].numpy(), want, atol=1e-5)
    again = models.from_pretrained(bert_checkpoint, task="text_classification", num_classes=2,
                                   adapter=tmp_path / "imdb_bert_lora")
    np.testing.assert_allclose(again.predict(TEXTS, verbose=0), want, atol=1e-5)


@pytest.mark.only_backend("torch")  # a tiny recipe process costs least here; the export goes through TensorFlow
def test_translator_fine_tunes_marian_and_serves_source_ids(tmp_path):
    """A Marian checkpoint fine-tuned on the bundled Tatoeba pairs: the loss falls, BLEU and the
    out-of-distribution columns are scored, the version reloads and its SavedModel serves source ids."""
    import tensorflow as tf

    from tests.marian_checkpoint import make_marian_checkpoint

    folder = tmp_path / "tiny-marian"
    folder.mkdir()
    make_marian_checkpoint(folder)
    run_dir = train_translator.main(["--epochs=2", "--max-examples=64", "--batch-size=16", "--verbose=2",
                                     "--sequence-length=16", "--max-ood-examples=8", "--max-test-examples=16",
                                     "--num-beams=1",
                                     f"--from-pretrained={folder}", f"--output-dir={tmp_path / 'out'}"])
    assert run_dir == tmp_path / "out" / "tiny-marian_spa-eng" / "1"
    metrics, config = _card_and_metrics(run_dir, folder)
    assert metrics["learning_rate"] == 5e-5 and config["model_type"] == "marian"
    assert 0.0 <= metrics["test_bleu"] <= 100.0 and "ood_length_bleu" in metrics
    # --num-beams given; the rest the checkpoint's generation config, not the from-scratch guards (3, 1.5)
    assert (metrics["num_beams"], metrics["no_repeat_ngram_size"], metrics["max_length_ratio"]) == (1, 0, None)
    with (run_dir / "training_log.csv").open(newline="") as f:
        losses = [float(row["loss"]) for row in csv.DictReader(f)]
    assert len(losses) == 2 and losses[1] < losses[0], losses
    model = models.load(run_dir)
    assert model.padding_id == model.preprocessor.start_token_id and isinstance(model.translate("Hi."), str)
    served = tf.saved_model.load(str(run_dir)).signatures
    ids = model.preprocessor.encode(["How are you?"])["encoder_token_ids"]
    answer = served["serving_default"](source_ids=tf.constant(ids[:, :8]))
    assert answer["translation"].shape == (1,) and answer["translation_ids"].shape[0] == 1


@pytest.mark.only_backend("torch")  # a tiny recipe run once (torch ran it fastest); the export goes through TensorFlow
def test_speech_fine_tunes_whisper_on_digit_words(tmp_path):
    """A Whisper checkpoint fine-tuned on FSDD digit strings spoken as words: the loss falls, the digit error
    rates (test, isolated recordings) are scored from the digits its transcripts name, and the version
    reloads and serves WAV bytes."""
    import tensorflow as tf

    from tests.whisper_checkpoint import make_whisper_checkpoint

    assert train_speech.as_words("407") == "four zero seven"
    assert train_speech.as_digits(" Four, oh 7 and nine!") == "4079"
    folder = tmp_path / "tiny-whisper"
    folder.mkdir()
    make_whisper_checkpoint(folder)
    run_dir = train_speech.main(["--epochs=2", "--max-examples=12", "--train-utterances=12", "--batch-size=6",
                                 "--test-passes=1", "--ood-speaker=none", "--verbose=2", "--learning-rate=1e-3",
                                 f"--from-pretrained={folder}", f"--output-dir={tmp_path / 'out'}"])
    assert run_dir == tmp_path / "out" / "tiny-whisper_fsdd" / "1"
    metrics, config = _card_and_metrics(run_dir, folder)
    assert config["model_type"] == "whisper" and metrics["test_digit_error_rate"] >= 0.0
    assert "ood_isolated_digit_error_rate" in metrics and (run_dir / "curves.png").is_file()
    with (run_dir / "training_log.csv").open(newline="") as f:
        losses = [float(row["loss"]) for row in csv.DictReader(f)]
    assert len(losses) == 2 and losses[1] < losses[0], losses
    model = models.load(run_dir)
    wav = (pathlib.Path(__file__).parents[2] / "data" / "fsdd" / "recordings" / "3_theo_0.wav").read_bytes()
    served = tf.saved_model.load(str(run_dir)).signatures["serving_default"](wav_bytes=tf.constant([wav]))
    assert [t.decode("utf-8") for t in served["transcript"].numpy()] == model.transcribe([wav], language="en")
