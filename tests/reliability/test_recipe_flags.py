"""Bad recipe flags, including those that could only fail after training, fail at parse time:
exit 2, the flag (or path, or the preset to use instead) named. One table for every recipe."""

import os

import keras
import pytest

from recipes import common, pretrain_mini_bert, train_gpt, train_imdb, train_translator, train_vit

ONCE = pytest.mark.once("flag parsing that exits before any backend code")
# Refused by argparse, or by `common.parse_args`'s preset, path and --tfds checks, which run before its first
# look at the backend (`--distribute`, `--model-parallel`, `faster_jax_random`): checked once.
PARSED = [
    (train_imdb, ["--learning-rate=inf"], "--learning-rate: expected a finite number > 0.0, got inf"),
    (train_imdb, ["--learning-rate=nan"], "--learning-rate"),
    (train_imdb, ["--learning-rate=-1e-3"], "--learning-rate"),
    (pretrain_mini_bert, ["--finetune-learning-rate=nan"], "--finetune-learning-rate"),
    (train_vit, ["--weight-decay=nan"], "--weight-decay"),
    (train_vit, ["--weight-decay=2"], "--weight-decay: expected a finite number >= 0.0 and <= 1.0"),
    (train_imdb, ["--seed=-1"], "--seed"),
    (train_imdb, ["--vocabulary-size=5"], "--vocabulary-size: expected an integer >= 64"),
    (train_gpt, ["--vocabulary-size=5"], "--vocabulary-size"),
    (train_imdb, ["--sequence-length=2"], "--sequence-length: expected an integer >= 4"),
    (train_translator, ["--sequence-length=2"], "--sequence-length"),
    (pretrain_mini_bert, ["--sequence-length=4"], "--sequence-length: expected an integer >= 8"),
    (train_translator, ["--num-beams=100000"], "--num-beams: expected an integer >= 1 and <= 64"),
    (train_imdb, ["--epochs=1.5"], "--epochs"),
    (train_imdb, ["--epochs=-1"], "--epochs"),
    (train_imdb, ["--epochs=two"], "--epochs"),
    (train_imdb, ["--data-dir=/no/such/dir"], "/no/such/dir"),
    (train_imdb, ["--preset=vit_tiny"], "imdb_small"),
    (train_imdb, ["--learning-rate=0"], "--learning-rate"),
    (train_translator, ["--preset=imdb_tiny"], "transformer_small"),
    (train_translator, ["--no-repeat-ngram-size=-1"], "--no-repeat-ngram-size"),
    (train_translator, ["--split-by=sentence"], "--split-by"),
    (train_translator, ["--batch-size=0"], "--batch-size"),
    (train_gpt, ["--gradient-accumulation-steps=0"], "--gradient-accumulation-steps: expected an integer >= 1"),
    (train_gpt, ["--quantize=int2"], "--quantize: invalid choice: 'int2'"),
    (pretrain_mini_bert, ["--quantize=int8"], "unrecognized arguments: --quantize=int8"),
    (train_imdb, ["--from-pretrained=x", "--lora-rank=4", "--quantize=int8"], "--quantize and --lora-rank"),
    (train_vit, ["--dataset=imagenet"], "--dataset"),
    (train_vit, ["--tfds", "--data-dir=."], "--tfds and --data-dir"),
    (pretrain_mini_bert, ["--finetune-epochs=-2"], "--finetune-epochs"),
    (pretrain_mini_bert, ["--pretrain-steps=0"], "--pretrain-steps"),
    (pretrain_mini_bert, ["--scratch-learning-rate=inf"], "--scratch-learning-rate"),
    (pretrain_mini_bert, ["--data-dir=/no/such/dir"], "/no/such/dir"),
    (pretrain_mini_bert, ["--objective=nsp"], "--objective: invalid choice: 'nsp'"),
    (pretrain_mini_bert, ["--pretraining-text=books"], "--pretraining-text: invalid choice: 'books'"),
    (pretrain_mini_bert, ["--pretrain-dropout=1"], "--pretrain-dropout: expected a finite number >= 0.0 and <= 0.99"),
    (train_imdb, ["--ema=1"], "--ema: expected a finite number >= 0.0 and <= 0.9999, got 1"),
    (train_imdb, ["--ema=-0.5"], "--ema"),
    (train_gpt, ["--preset=transformer_tiny"], "gpt_tiny"),
    (train_gpt, ["--model-parallel=0"], "--model-parallel"),
]
# Refused after that look (a recipe's own checks once `common.parse_args` returns) or by it: on every backend.
AFTER_PARSE = [
    (train_translator, ["--split-by=source"], "--split-by source needs --dataset spa-eng and the full"),  # bundled sample only
    (train_vit, ["--dataset=cifar10", "--preset=vit_tiny"], "vit_small_cifar"),
    (pretrain_mini_bert, ["--pretraining-text=packed"], "--pretraining-text packed needs --objective mlm"),
    (train_gpt, ["--sequence-length=4096"], "--sequence-length must be in [2, 128]"),
    # Needs JAX (TensorFlow, torch) or enough devices (JAX here has 1).
    (train_gpt, ["--model-parallel=2"], "--model-parallel 2"),
]


@pytest.mark.parametrize("recipe, flags, message", [pytest.param(*case, marks=ONCE) for case in PARSED] + AFTER_PARSE)
def test_bad_flags_exit_2_naming_the_flag(recipe, flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        recipe.main(flags)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@ONCE
def test_an_output_dir_that_is_a_file_fails_before_any_work(tmp_path, capsys):
    (tmp_path / "taken").write_text("not a folder")
    for output_dir in (tmp_path / "taken", tmp_path / "taken" / "below"):
        with pytest.raises(SystemExit) as exit_info:
            train_imdb.parse_args([f"--output-dir={output_dir}"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and "--output-dir" in err and "is a file, not a directory" in err
    if os.path.exists("/proc/self"):  # writable by os.access for root, but no folder can be made there: exit 1 before
        with pytest.raises(SystemExit) as exit_info:
            train_imdb.parse_args(["--output-dir=/proc/kformer-x"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and "--output-dir '/proc/kformer-x': no folder can be made in '/proc'" in err


def test_a_rerun_with_other_training_flags_names_the_flag(tmp_path, capsys):
    flags = [f"--output-dir={tmp_path}", "--preset=imdb_tiny", "--sequence-length=32"]
    common.training_dir(train_imdb.parse_args(flags), "imdb_tiny")  # a killed run's folder
    work_dir = tmp_path / "imdb_tiny" / "_training"
    assert (work_dir / "flags.json").is_file()
    # Flags that do not change what is trained may differ: resuming with more epochs is fine.
    common.training_dir(train_imdb.parse_args(flags + ["--epochs=9", "--learning-rate=1e-4"]), "imdb_tiny")
    with pytest.raises(SystemExit) as exit_info:
        common.training_dir(train_imdb.parse_args(flags[:2] + ["--sequence-length=64"]), "imdb_tiny")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "--sequence-length was 32, now 64" in err and f"delete {work_dir}" in err


def test_a_diverged_run_writes_no_version_and_exits_1(tmp_path, monkeypatch):
    class Diverge(keras.callbacks.Callback):  # what --learning-rate 1e9 does, deterministically
        def on_train_batch_end(self, batch, logs=None):
            weight = self.model.trainable_weights[0]
            weight.assign(keras.ops.full(weight.shape, float("nan")))

    original = common.callbacks
    monkeypatch.setattr(common, "callbacks", lambda *a, **k: original(*a, **k) + [Diverge()])
    with pytest.raises(SystemExit) as exit_info:
        train_imdb.main(["--preset=imdb_tiny", "--max-examples=32", "--sequence-length=16",
                         "--vocabulary-size=200", "--epochs=2", "--verbose=0", f"--output-dir={tmp_path}"])
    assert "training diverged" in str(exit_info.value.code) and "no version was written" in str(exit_info.value.code)
    assert sorted(p.name for p in (tmp_path / "imdb_tiny").iterdir()) == ["_prepared", "_training"]


@pytest.mark.once("gzip JSON Lines read into Python lists and numpy")
@pytest.mark.parametrize("label", [7, -1, 0.6, "1", True, None])
def test_imdb_labels_outside_the_classes_name_the_file_and_line(tmp_path, label):
    import gzip
    import json

    from kformer.data import imdb

    rows = [{"text": "Fine.", "label": 1}, {"text": "Bad.", "label": label}]
    (tmp_path / "imdb").mkdir()
    path = tmp_path / "imdb" / "train.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    with pytest.raises(ValueError, match=rf"Corrupt IMDB file {path} line 2: .*label {label!r} is not one of \(0, 1\)"):
        imdb.load_split("train", tmp_path)


@pytest.mark.once("argparse's --help, before any backend code")
@pytest.mark.parametrize("name", ["train_imdb", "train_translator", "pretrain_mini_bert", "train_vit", "train_gpt",
                                  "train_speech"])
def test_every_recipe_runs_as_a_script(name, monkeypatch, capsys):
    """`python -m recipes.NAME --help`, run in this process as `-m` runs it: the script's `__main__` calls `main`."""
    import runpy
    import sys
    import warnings

    monkeypatch.setattr(sys, "argv", [name, "--help"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exit_info:
        warnings.simplefilter("ignore", RuntimeWarning)  # "found in sys.modules": the test imported it already
        runpy.run_module(f"recipes.{name}", run_name="__main__")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and "--output-dir" in out
