"""Every recipe survives SIGKILL: during training (or a backup write), then during the version write.

Each recipe runs as a real process, killed twice and rerun with the same
command: first at a seeded random moment after its first epoch backup (or in
the middle of a backup write, when the poll catches one), then while it writes
its version folder (the SavedModel export and the rest, in `.tmp-*`). The
third run must finish with exit 0, and the output must hold whole versions
only: no partial version, no temporary folder, no `_training` left. Each
recipe runs on torch, where a tiny recipe process costs least (no graph to
trace or compile again in each of its three runs); the mechanisms are tested
on every backend in
test_versions_and_backups.py. Every recipe reaches them through the same
`recipes.common` code (its backup callback, `write_version` and the run lock),
so two recipes check it: one that trains once and exports (the translator) and
one that trains twice and writes two versions (mini-BERT). The translator's
third run is also its recipe's end-to-end test (`assert_translator_version`:
metrics, model card, reload, and its beam-search and XLA exports). The IMDB recipe's
kill and resume is tests/recipes/test_train_imdb.py's; the ViT and GPT
recipes run end to end in tests/recipes/test_recipes.py.
"""

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from kformer import models
from tests.helpers import assert_figures

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ["--epochs=3", "--verbose=2"]
EXAMPLES = "--max-examples=64"
WORDS = "--vocabulary-size=300"
RECIPES = {  # name: (module, flags, version folders it writes)
    # its last run is also the translator recipe's end-to-end check (`assert_translator_version`)
    "translator": ("train_translator", [EXAMPLES, WORDS, "--preset=transformer_tiny", "--sequence-length=16",
                                        "--batch-size=16", "--max-ood-examples=8", "--no-repeat-ngram-size=3",
                                        "--serving-xla"], ["transformer_tiny_spa-eng"]),
    # two version folders, killed in the first; the export's kill is checked on the translator
    "bert": ("pretrain_mini_bert", [EXAMPLES, WORDS, "--sequence-length=32", "--batch-size=16",
                                    "--finetune-epochs=1", "--no-export"], ["bert_tiny_mlm", "bert_tiny_imdb"]),
}
RECIPES_BY_BASE = {base: flags for _, flags, bases in RECIPES.values() for base in bases}
VERSION_FILES = ("model.keras", "config.json", "metrics.json", "README.md", "saved_model.pb")  # last: export


def run(command, log, kill_when=None, timeout=600):
    """Run `command`; SIGKILL it as soon as `kill_when()` is true. Returns (exit status, killed)."""
    with open(log, "ab") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            if kill_when is not None and kill_when():
                process.send_signal(signal.SIGKILL)
                return process.wait(), True
            time.sleep(0.005)
        if process.poll() is None:
            process.kill()
            pytest.fail(f"{command} ran past {timeout} s")
    return process.returncode, False


def after_first_backup(output, seed):
    """True in a backup write (`.tmp-epoch-*`), or a seeded random 0-1.5 s after epoch 1's backup."""
    delay, seen = random.Random(seed).uniform(0.0, 1.5), []

    def kill_when():
        if any(output.glob("*/_training/**/backup/.tmp-epoch-*")):
            return True
        if not seen and any(output.glob("*/_training/**/backup/epoch-1")):
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= delay
    return kill_when


def assert_translator_version(run_dir):
    """The translator recipe's version, end to end: metrics, model card, reload, and its three exports."""
    import tensorflow as tf

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= metrics["test_bleu"] <= 100.0 and 0.0 <= metrics["test_chrf"] <= 100.0
    assert metrics["test_unseen_sources"] == 64  # none of the 64 test sentences is among the 64 trained on
    assert 0.0 <= metrics["test_bleu_unseen_sources"] <= 100.0 and metrics["no_repeat_ngram_size"] == 3
    assert metrics["test_examples"] == 64 and len(metrics["samples"]) == 8
    assert (metrics["max_length_ratio"], metrics["max_length_offset"]) == (1.5, 10)  # the default limit
    card = (run_dir / "README.md").read_text()
    data, scores = card.split("## Data")[1].split("## Metrics")
    scores, decoding = scores.split("## Training and decoding")  # decoding settings, not scores
    assert "| max_length_ratio | 1.5 |" in decoding and "| num_beams | 4 |" in decoding
    assert "| test_unseen_sources | 64 |" in data and "| test_bleu_unseen_sources |" in scores
    assert {"source", "reference", "translation"} <= set(metrics["samples"][0])
    model = models.load(run_dir)
    assert model.encoder_embedding.vocabulary_size == model.preprocessor.source_tokenizer.vocabulary_size
    assert isinstance(model.translate("How are you?", max_length=4), str)
    served = tf.saved_model.load(str(run_dir)).signatures
    assert set(served) == {"serving_default", "translate_beam", "translate_xla"}
    text = tf.constant(["How are you?"])
    assert served["translate_xla"](text=text)["translation"].numpy().tolist() == \
        served["serving_default"](text=text)["translation"].numpy().tolist()
    assert_figures(run_dir, min_pixels=(100, 300))  # cross-attention of a short translation: wide, low


def in_version_write(output):
    return lambda: any(output.glob("*/.tmp-*"))


def assert_whole_versions_only(output, bases):
    """Every numbered folder is a complete version (a killed write may leave only `.tmp-*`)."""
    for base in bases:
        for version in (output / base).glob("[0-9]*"):
            exported = "--no-export" not in RECIPES_BY_BASE[base]
            missing = [name for name in VERSION_FILES[:None if exported else -1] if not (version / name).is_file()]
            assert not missing, f"partial version {version}: no {missing}"


@pytest.mark.only_backend("torch")
@pytest.mark.parametrize("recipe", ["translator", "bert"])
def test_recipe_killed_twice_then_rerun_finishes_with_whole_versions(tmp_path, recipe):
    module, flags, bases = RECIPES[recipe]
    output = tmp_path / "out"
    command = [sys.executable, "-m", f"recipes.{module}", *TINY, *flags, f"--output-dir={output}"]
    log = tmp_path / "log.txt"

    status, killed = run(command, log, after_first_backup(output, seed=recipe))
    assert killed, f"the run ended ({status}) before it could be killed in training:\n{log.read_text()[-3000:]}"
    assert_whole_versions_only(output, bases)

    status, killed = run(command, log, in_version_write(output))
    assert killed, f"the rerun ended ({status}) before its version write:\n{log.read_text()[-3000:]}"
    assert_whole_versions_only(output, bases)
    assert list(output.glob("*/.tmp-*")), "the kill came after the version write"

    status, killed = run(command, log)
    assert status == 0, log.read_text()[-3000:]
    assert_whole_versions_only(output, bases)
    for base in bases:
        assert sorted(p.name for p in (output / base).iterdir() if p.name != "_prepared") == ["1"], \
            os.listdir(output / base)
    assert not list(output.rglob("_training")) and not list(output.rglob(".tmp-*"))  # the rerun removed them
    if recipe == "translator":
        assert_translator_version(output / bases[0] / "1")
