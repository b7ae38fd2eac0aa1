"""benchmarks/whisper_decode.py at its smallest setting: one row per backend and batch size, with both
sides' seconds and their ratio; bad flags named."""

import csv

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

from benchmarks import whisper_decode  # noqa: E402


@pytest.mark.once("the benchmark runs each backend in a subprocess of its own")
def test_smallest_run_writes_a_row_with_both_sides_and_their_ratio(tmp_path, capsys):
    results = tmp_path / "whisper_decode.csv"
    whisper_decode.main(["--backends", "torch", "--size", "tiny", "--batch-sizes", "1", "--new-tokens", "2",
                         "--repeats", "1", "--results", str(results)])
    with results.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["backend"], r["batch"], r["new_tokens"]) for r in rows] == [("torch", "1", "2")]
    ours, theirs = float(rows[0]["kformer_seconds"]), float(rows[0]["transformers_seconds"])
    assert ours > 0 and theirs > 0 and float(rows[0]["ratio"]) == pytest.approx(theirs / ours, rel=0.05, abs=0.01)
    assert rows[0]["commit"] and rows[0]["machine"] and rows[0]["command"]
    assert "torch       1 recordings" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [(["--new-tokens", "0"], "--new-tokens must be >= 1, got 0"),
                                           (["--size", "huge"], "invalid choice: 'huge'")])
def test_bad_flags_are_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        whisper_decode.parse_args(argv)
    assert message in capsys.readouterr().err
