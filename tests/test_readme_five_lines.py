"""The README's "Five lines" translator, run as written (one epoch instead of the README's three): its
printed translations have no loop, and the model it trains reaches a stated validation loss."""

import contextlib
import io
import pathlib
import re

import pytest

from tests.helpers import repeated_trigrams

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
# Label-smoothed cross-entropy on the 500 bundled validation pairs after one epoch over the 20,000 bundled
# training pairs with the five lines' settings: 5.21 (torch; 4.34 after the README's three epochs, TensorFlow);
# uniform guessing over the 4,000-piece vocabulary would score ln(4000) = 8.3.
VAL_LOSS_AFTER_ONE_EPOCH = 5.6


def five_lines():
    readme = README.read_text(encoding="utf-8")
    section = readme[readme.index("## Five lines"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_five_lines_are_five_lines_that_train_and_translate():
    code = five_lines()
    site = (README.parent / "docs" / "index.md").read_text(encoding="utf-8")
    assert code in site, "docs/index.md's five lines differ from the README's"
    body = [line for line in code.strip().splitlines() if line and not line.startswith(("from ", "import "))]
    assert len(body) == 5, code
    assert "epochs=3" in code and "translator.translate(" in code


# The user's default backend, where one epoch over 20,000 pairs runs as a compiled graph (faster than eager
# torch); the layers it uses are tested on all three.
@pytest.mark.only_backend("tensorflow")
def test_the_five_lines_run_and_translate_without_loops():
    from kformer.data import translation

    printed = io.StringIO()
    namespace = {}
    with contextlib.redirect_stdout(printed):
        exec(five_lines().replace("epochs=3", "epochs=1"), namespace)  # noqa: S102
    translations = eval(printed.getvalue().strip().splitlines()[-1])  # noqa: S307  (the printed list of str)
    assert len(translations) >= 2 and all(isinstance(t, str) and t for t in translations), translations
    for text in translations:
        assert not repeated_trigrams(text), f"a repeated 3-gram in {text!r}"
    translator = namespace["translator"]
    val_loss = translator.evaluate(*translation.load_split("validation"), batch_size=64, verbose=0)
    assert val_loss < VAL_LOSS_AFTER_ONE_EPOCH, val_loss
