"""benchmarks/speech_training.py on the bundled FSDD sample, made small: both settings run and print."""

import csv
import json

import pytest

from benchmarks import speech_training

pytestmark = [pytest.mark.slow, pytest.mark.only_backend("torch")]  # plain Keras fits: one backend, the one
# that fits this small model fastest (no graph to trace)


def test_steps_and_plateau_print_and_record_one_line_per_setting(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(speech_training, "STEP_UTTERANCES", 64)  # 2 batches
    monkeypatch.setattr(speech_training, "PLATEAU_UTTERANCES", 32)
    monkeypatch.setattr(speech_training, "PLATEAU_CHUNKS", 2)
    monkeypatch.setattr(speech_training, "CHUNK_STEPS", 1)
    results = tmp_path / "speech_training.csv"
    speech_training.main(["steps", "--results", str(results)])
    speech_training.main(["plateau", "--results", str(results)])
    out = capsys.readouterr().out
    assert "bundled sample" in out
    for setting in ("sort_window=1:", "sort_window=16:"):
        seconds = float(out.split(setting)[1].split(" s a step")[0])
        assert 0 < seconds < 60
    for setting in ("global_clipnorm=None:", "global_clipnorm=1.0:"):
        losses = json.loads(out.split(setting)[1].splitlines()[0].split("steps ")[1])
        assert len(losses) == 2 and all(loss > 0 for loss in losses)
    with results.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["what"], r["setting"]) for r in rows] == [
        ("steps", "sort_window=1"), ("steps", "sort_window=16"),
        ("plateau", "global_clipnorm=None"), ("plateau", "global_clipnorm=1.0")]
    assert all(r["commit"] and r["machine"] and r["backend"] == "torch" for r in rows)
    assert float(rows[0]["seconds_a_step"]) > 0 and len(rows[2]["loss_every_25_steps"].split()) == 2
