"""Every recipe end to end on a tiny slice of the bundled real data: train, evaluate, save, export.

Each recipe runs end to end on one backend (`only_backend`), torch: a tiny
recipe runs eagerly there and costs least, and its export goes through the
TensorFlow worker process as on JAX. The models, `fit`, save/load and export
they use are tested on all three elsewhere; the IMDB recipe (the main job)
trains and exports on TensorFlow in test_train_imdb.py and is killed and
resumed on torch there; the translator and mini-BERT recipes are killed and
rerun in tests/reliability/test_recipe_faults.py, where the translator's last
run (with its beam-search and XLA exports) is checked end to end as here.
"""

import json

import numpy as np
import pytest

from kformer import models
from recipes import pretrain_mini_bert, train_gpt, train_vit
from tests.helpers import assert_figures

COMMON = ["--epochs=1", "--max-examples=64", "--verbose=2"]


@pytest.mark.parametrize("dataset, preset", [
    pytest.param("mnist", "vit_tiny", marks=pytest.mark.only_backend("torch")),  # with its export
    pytest.param("cifar10", None, marks=pytest.mark.only_backend("torch")),  # vit_hybrid_cifar
])
def test_vit_recipe(tmp_path, dataset, preset):
    flags = COMMON + [f"--dataset={dataset}", "--batch-size=32", f"--output-dir={tmp_path}"]
    flags += [f"--preset={preset}"] if preset else []
    if dataset == "cifar10":
        flags.append("--no-export")
    run_dir = train_vit.main(flags)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= metrics["test_top1"] <= metrics["test_top5"] <= 1.0
    model = models.load(run_dir)
    assert model.predict(np.zeros((2, 50, 40, 3), "uint8"), verbose=0).shape == (2, 10)  # any size
    assert len(model.predict_labels([np.zeros((20, 20, 1), "uint8")])) == 1
    assert (run_dir / "saved_model.pb").is_file() == (dataset == "mnist")
    assert run_dir.parent.name == ("vit_tiny_mnist" if dataset == "mnist" else "vit_hybrid_cifar_cifar10")
    assert_figures(run_dir)  # attention.png: class-token attention rollout over the image


@pytest.mark.only_backend("torch")
def test_mini_bert_recipe_pretrains_then_fine_tunes(tmp_path):
    # the default objective (masked LM + next sentence) runs in tests/reliability/test_recipe_faults.py
    mlm_dir, clf_dir = pretrain_mini_bert.main(COMMON + [
        "--finetune-epochs=1", "--vocabulary-size=300", "--sequence-length=32", "--batch-size=16",
        "--pretrain-steps=7", "--compare-scratch", "--no-export", f"--output-dir={tmp_path}",
        "--objective=mlm", "--pretraining-text=packed", "--pretrain-dropout=0", "--finetune-batch-size=8"])
    mlm_metrics = json.loads((mlm_dir / "metrics.json").read_text())
    assert 0.0 <= mlm_metrics["masked_token_accuracy"] <= 1.0
    assert mlm_metrics["objective"] == "mlm" and mlm_metrics["next_sentence_accuracy"] is None
    assert mlm_metrics["pretraining_steps"] == 7  # one epoch of 7 steps, not a pass over the pairs
    log = (clf_dir / "pretrain" / "training_log.csv").read_text().splitlines()
    assert len(log) == 2  # the header and the one epoch of 7 steps
    clf_metrics = json.loads((clf_dir / "metrics.json").read_text())
    assert 0.0 <= clf_metrics["test_accuracy"] <= 1.0 and clf_metrics["pretrained"]
    # from scratch: as many optimizer steps as pretraining and fine-tuning together
    # (7 + 8 -> 2 epochs of 8: 58 reviews in fine-tuning batches of 8, not the pretraining batch of 16)
    assert clf_metrics["train_examples"] == 58 and clf_metrics["scratch_epochs"] == 2
    assert clf_metrics["finetune_batch_size"] == 8
    training = (clf_dir / "README.md").read_text().split("## Training")[1]  # the card: a setting, not a score
    assert "| finetune_batch_size | 8 |" in training
    assert 0.0 <= clf_metrics["scratch_test_accuracy"] <= 1.0
    # the short-text figures (issue 60): test reviews cut to their first sentence and to 10-30 words
    for key in ("ood_first_sentence_accuracy", "ood_crop_10_30_accuracy"):
        assert 0.0 <= clf_metrics[key] <= 1.0
        assert f"| {key} | {clf_metrics[key]:.4g} |" in (clf_dir / "README.md").read_text().split(
            "## Out of distribution")[1]
    pretrained, classifier = models.load(mlm_dir), models.load(clf_dir)
    assert {"mlm_logits", "nsp_logits"} == set(pretrained.output)
    # pretrained without dropout, fine-tuned with the preset's (0.1)
    assert pretrained.backbone.dropout == 0.0 and classifier.backbone.dropout == 0.1
    assert classifier.output.shape == (None, 2)
    assert len(pretrained.fill_mask("A [MASK] film.", top_k=2)) == 1
    assert classifier.predict_labels(["A fine film."])[0] in ("negative", "positive")
    assert (clf_dir / "pretrain" / "training_log.csv").is_file()
    assert not (tmp_path / "bert_tiny_mlm" / "_training").exists()
    cached = sorted(p.name.split("-")[0] for p in (tmp_path / "bert_tiny_mlm" / "_prepared").iterdir())
    assert cached == ["mlm_sequences", "vocabulary"]  # a rerun reuses both (tests/recipes/test_prepared.py)
    assert mlm_metrics["pretraining_text"] == "packed"  # contiguous text: no pairs built
    data, metrics_table = (mlm_dir / "README.md").read_text().split("## Data")[1].split("## Metrics")
    assert "| pretraining_texts |" in data and "pretraining_texts" not in metrics_table.split("## Training")[0]
    assert_figures(mlm_dir)  # pretraining curves (MLM and NSP) and attention on a masked sentence
    assert_figures(clf_dir)  # fine-tuning curves


# Bad flags: one table for every recipe in tests/reliability/test_recipe_flags.py.


@pytest.mark.only_backend("torch")  # exports through the TensorFlow worker process
def test_gpt_recipe_reports_perplexity_samples_and_exports(tmp_path):
    run_dir = train_gpt.main(COMMON + [
        "--vocabulary-size=300", "--sequence-length=32", "--sample-length=12", "--batch-size=16",
        "--quantize=int8", f"--output-dir={tmp_path}"])
    assert run_dir == tmp_path / "gpt_tiny" / "1"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["quantized"] == "int8"  # its perplexity and samples are the int8 model's
    assert 1.0 < metrics["validation_perplexity"] < 400  # below the uniform 300-token guess's ~300
    assert metrics["validation_reviews"] == 3 and metrics["train_reviews"] == 61
    assert [s["prompt"] for s in metrics["samples"]] == train_gpt.PROMPTS
    assert metrics["samples"][0]["top_p"].startswith("the movie was")  # the prompt, then the continuation
    assert all(isinstance(s["greedy"], str) and isinstance(s["top_p"], str) for s in metrics["samples"])
    model = models.load(run_dir)
    assert any(layer.quantization_mode == "int8" for layer in model._flatten_layers())
    assert model.token_embedding.vocabulary_size == model.preprocessor.tokenizer.vocabulary_size
    assert model.generate("The movie was", max_length=8).startswith("the movie was")
    assert (run_dir / "saved_model.pb").is_file()
    cached = sorted(p.name.split("-")[0] for p in (tmp_path / "gpt_tiny" / "_prepared").iterdir())
    assert cached == ["lm_windows", "lm_windows", "vocabulary"]  # train and validation windows
    assert_figures(run_dir)
