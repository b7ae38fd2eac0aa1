"""benchmarks/first_translator.py at its smallest setting: the README's five lines run as written on 4,000 pairs
for one epoch, print loop-free translations, and the script writes its row (no bound at this size)."""

import csv

import pytest

from benchmarks import first_translator
from tests.helpers import repeated_trigrams


# The user's default backend, where an epoch runs as a compiled graph; the layers it uses are tested on all three.
@pytest.mark.only_backend("tensorflow")
def test_the_five_lines_run_and_translate_without_loops(tmp_path, capsys):
    results = tmp_path / "first_translator.csv"
    (run,) = first_translator.main(["--what", "five_lines", "--pairs", "4000", "--results", str(results)])
    translations = run["translations"]
    assert len(translations) >= 2 and all(isinstance(t, str) and t for t in translations), translations
    for text in translations:
        assert not repeated_trigrams(text), f"a repeated 3-gram in {text!r}"
    assert run["bound"] is None and run["val_loss"] > 0.0  # a bound holds for all 20,000 pairs only
    assert f"| five_lines | 4000 | 1 | {run['val_loss']:.3f} | - |" in capsys.readouterr().out
    (row,) = list(csv.DictReader(results.open()))
    assert (row["what"], row["pairs"], row["bound"]) == ("five_lines", "4000", "")


@pytest.mark.once("argument checks in argparse, before any model is built")
@pytest.mark.parametrize("argv, message", [(["--what", "five"], "--what: unknown ['five']"),
                                           (["--epochs", "0"], "--epochs 0"), (["--pairs", "10"], "--pairs 10")])
def test_bad_flags_are_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        first_translator.main(argv)
    assert message in capsys.readouterr().err
