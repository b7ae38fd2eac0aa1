"""The quickstart notebook runs top to bottom, and is committed without outputs.

The run here trains its translator for one epoch on 1,000 of the bundled pairs: it checks that every cell
runs and shows what it says. The validation loss the full run reaches (one epoch over all 20,000 pairs) is
a benchmark: `python -m benchmarks.first_translator --what quickstart` (tests/benchmarks/test_first_translator.py).
"""

import pathlib
import re

import pytest

from tests.helpers import committed_code_cells, repeated_trigrams

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
SMALL = {"EPOCHS": 1, "TRANSLATION_PAIRS": 1000, "CLASSIFIER_EXAMPLES": 300, "CLASSIFIER_EPOCHS": 1}


def test_notebook_is_committed_without_outputs():
    committed_code_cells(NOTEBOOK)


@pytest.mark.tf_only
def test_notebook_runs_top_to_bottom():
    pytest.importorskip("nbclient")
    pytest.importorskip("nbformat")
    from benchmarks import first_translator

    outputs, images = first_translator.run_notebook(SMALL)  # the kernel: this environment's backend, TensorFlow
    assert "Traceback" not in outputs
    translations = first_translator.notebook_translations(outputs)
    assert len(translations) == 3, outputs  # the three example sentences
    for text in translations:  # translate's default guard: no loops, even after one epoch
        assert not repeated_trigrams(text), f"a repeated 3-gram in {text!r}"
    assert first_translator.notebook_val_loss(outputs) > 0.0  # printed after the last epoch
    assert images >= 2, f"expected the position encoding and attention plots, got {images} images"
    assert re.search(r"\['(positive|negative)', '(positive|negative)'\]", outputs)  # predict_labels
    assert "imdb/1" in outputs  # the export path, version 1
