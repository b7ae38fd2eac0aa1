"""benchmarks/moe_vs_dense.py: FLOPs matching, the curve summary and figure, and a short run on the bundled reviews."""

import csv

import keras
import pytest

from benchmarks import moe_vs_dense
from kformer import models


def test_moe_preset_matches_the_dense_multiply_adds_per_token():
    dense, moe = (models.build(name, vocabulary_size=800, sequence_length=64).get_config()
                  for name in ("gpt_tiny", "gpt_moe_tiny"))  # what the benchmark reads
    dense_nominal, dense_computed = moe_vs_dense.flops_per_token(dense)
    moe_nominal, moe_computed = moe_vs_dense.flops_per_token(moe, moe_capacity_factor=moe["capacity_factor"])
    assert dense_nominal == dense_computed
    router = 2 * moe["hidden_dim"] * moe["num_experts"]
    assert moe_nominal == dense_nominal + router  # two experts half as wide: the dense feed-forward's work
    assert moe_computed > moe_nominal  # every capacity slot is computed, filled or not, plus dispatch and combine


def test_equal_steps_summary_takes_the_last_step_both_were_scored_at():
    curve = [["gpt_tiny", 200, 0, 10.0, 500.0], ["gpt_tiny", 400, 0, 20.0, 300.0], ["gpt_tiny", 430, 0, 21.0, 290.0],
             ["gpt_moe_tiny", 200, 0, 12.0, 520.0], ["gpt_moe_tiny", 400, 0, 24.0, 310.0],
             ["gpt_moe_tiny", 401, 0, 24.1, 309.0]]
    assert moe_vs_dense.equal_steps_summary(curve) == (
        "at step 400 (the last both were scored at): gpt_tiny 300.00, gpt_moe_tiny 310.00")
    assert "no step" in moe_vs_dense.equal_steps_summary([["a", 1, 0, 1.0, 9.0], ["b", 2, 0, 1.0, 9.0]])


@pytest.mark.slow
# Eager torch costs least here: plain train_on_batch and evaluate (the layers are tested on every backend).
# `--max-steps` ends it, not the wall budget: three scored points however busy the machine (a 2-second budget
# once left room for one turn only).
@pytest.mark.only_backend("torch")
def test_short_run_writes_rows_curve_and_figure(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(moe_vs_dense, "FULL_DATA", tmp_path / "absent")  # the bundled reviews, as in CI
    monkeypatch.setenv("KFORMER_RESULTS_DIR", str(tmp_path))
    figure = tmp_path / "curves.png"
    moe_vs_dense.main(["--budget", "600", "--max-steps", "7", "--chunk", "2", "--eval-every", "2",
                       "--max-examples", "120", "--vocabulary-size", "500", "--sequence-length", "32",
                       "--batch-size", "4", "--max-validation-windows", "8", "--figure", str(figure)])
    out = capsys.readouterr().out
    assert "bundled" in out and "passes over the" in out and "the last both were scored at" in out
    with (tmp_path / "moe_vs_dense.csv").open(newline="") as f:
        rows = {r["model"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"gpt_tiny", "gpt_moe_tiny"}
    assert int(rows["gpt_moe_tiny"]["params"]) > int(rows["gpt_moe_tiny"]["active_params_per_token"])
    assert float(rows["gpt_moe_tiny"]["moe_balancing_loss"]) > 0 and rows["gpt_tiny"]["moe_balancing_loss"] == ""
    assert all(float(r["validation_perplexity"]) > 1 and r["commit"] and r["backend"] == keras.backend.backend()
               for r in rows.values())
    with (tmp_path / "moe_vs_dense_curve.csv").open(newline="") as f:
        curve = list(csv.DictReader(f))
    for name in rows:  # every scored point, the last one the final figure
        points = [r for r in curve if r["model"] == name]
        steps = [int(p["train_steps"]) for p in points]
        assert len(steps) >= 2 and steps == sorted(set(steps)) and steps[-1] == int(rows[name]["train_steps"])
        assert steps == [3, 5, 7]  # the compiling step, then turns of 2 steps, each scored, up to --max-steps
        assert points[-1]["validation_perplexity"] == rows[name]["validation_perplexity"]
    assert figure.stat().st_size > 10_000 and figure.read_bytes()[:4] == b"\x89PNG"
