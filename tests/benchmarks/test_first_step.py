"""benchmarks/first_step.py: one row per recipe on TensorFlow; a clear error elsewhere and for bad flags."""

import re

import keras
import pytest

from benchmarks import first_step


@pytest.mark.tf_only
def test_prints_both_paths_seconds_and_their_ratio(capsys):
    first_step.main(["--recipes", "gpt", "--repeats", "1"])
    row = capsys.readouterr().out.splitlines()[-1]
    match = re.fullmatch(r"\| gpt \| gpt_tiny \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \|", row)
    assert match, row
    plain, ours, ratio = map(float, match.groups())
    assert plain > 0 and ours > 0 and ratio == pytest.approx(plain / ours, abs=0.1)


@pytest.mark.parametrize("argv, message", [(["--recipes", "gpt3"], "gpt3"), (["--repeats", "0"], "--repeats 0")])
def test_bad_flags_are_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        first_step.main(argv)
    assert message in capsys.readouterr().err


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="the benchmark's own backend")
def test_other_backends_are_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        first_step.main(["--recipes", "gpt"])
    assert keras.backend.backend() in capsys.readouterr().err
