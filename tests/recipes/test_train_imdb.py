import json

import keras
import numpy as np
import pytest

from recipes import train_imdb


def test_recipe_trains_saves_and_never_overwrites(tmp_path):
    flags = ["--epochs=1", "--max-examples=96", "--sequence-length=32", "--preset=imdb_tiny",
             f"--output-dir={tmp_path}"]
    first = train_imdb.main(flags)
    assert first == tmp_path / "imdb_tiny" / "1"
    config = json.loads((first / "config.json").read_text())
    assert config["preset"] == "imdb_tiny" and config["sequence_length"] == 32
    metrics = json.loads((first / "metrics.json").read_text())
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["test_examples"] == 96
    model = keras.saving.load_model(first / "model.keras")
    vocabulary = (first / "vocabulary.txt").read_text().splitlines()
    assert vocabulary[:2] == ["", "[UNK]"]
    probs = model.predict(np.ones((2, 32), "int32"), verbose=0)
    assert probs.shape == (2, 2)
    before = (first / "model.keras").read_bytes()
    second = train_imdb.main(flags)
    assert second == tmp_path / "imdb_tiny" / "2"
    assert (first / "model.keras").read_bytes() == before
    assert not list((tmp_path / "imdb_tiny").glob(".tmp-*"))


@pytest.mark.parametrize("flags, message", [
    (["--epochs=-1"], "--epochs"),
    (["--data-dir=/no/such/dir"], "/no/such/dir"),
    (["--preset=vit_tiny"], "imdb_small"),
    (["--learning-rate=0"], "--learning-rate"),
])
def test_bad_flags_exit_with_a_clear_message(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_imdb.main(flags)
    assert exit_info.value.code != 0
    assert message in capsys.readouterr().err


def test_missing_data_file_exits_with_the_path(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        train_imdb.main([f"--data-dir={tmp_path}", f"--output-dir={tmp_path}"])
    assert str(tmp_path / "imdb" / "train.jsonl.gz") in str(exit_info.value.code)
