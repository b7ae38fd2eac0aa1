"""benchmarks/wordpiece_learning.py: its flags, and a small run's table (the timing itself is a benchmark)."""

import pytest

from benchmarks import wordpiece_learning

pytestmark = pytest.mark.only_backend("tensorflow")  # data code: the same on every backend


@pytest.mark.parametrize("value, message", [("8000,big", "expected comma-separated ints"),
                                            ("7", "must be above the 7 special tokens")])
def test_bad_vocabulary_size_names_the_flag_and_the_value(capsys, value, message):
    with pytest.raises(SystemExit):
        wordpiece_learning.main(["--vocabulary-size", value])
    err = capsys.readouterr().err
    assert "--vocabulary-size" in err and message in err and value in err


def test_small_run_prints_a_row_per_size_with_equal_vocabularies(capsys):
    wordpiece_learning.main(["--max-examples", "40", "--vocabulary-size", "60,120"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("40 reviews, ")
    rows = [line.split(" | ") for line in lines[3:]]
    assert [row[0] for row in rows] == ["| 60", "| 120"]
    assert all(row[3] == "True" and row[-1].endswith("x |") for row in rows)
