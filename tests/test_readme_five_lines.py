"""The README's "Five lines" translator, run as written (one epoch on 4,000 of the 20,000 pairs instead of three
epochs on all): they are five lines, they train and translate, and the translations have no loop.

The validation loss the five lines reach after one epoch over all pairs is a benchmark:
`python -m benchmarks.first_translator --what five_lines` (tests/benchmarks/test_first_translator.py).
"""

import pathlib

from benchmarks import first_translator

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_the_five_lines_are_five_lines_that_train_and_translate():
    code = first_translator.five_lines()
    site = (README.parent / "docs" / "index.md").read_text(encoding="utf-8")
    assert code in site, "docs/index.md's five lines differ from the README's"
    body = [line for line in code.strip().splitlines() if line and not line.startswith(("from ", "import "))]
    assert len(body) == 5, code
    assert "epochs=3" in code and "translator.translate(" in code


# The run itself: tests/benchmarks/test_first_translator.py runs the five lines through the benchmark's
# smallest setting and checks their translations.
