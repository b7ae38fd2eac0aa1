"""The pretrained notebook (checkpoint -> fine-tuned on IMDB -> TF Serving) runs top to bottom on a
tiny random checkpoint written by `transformers`, and is committed without outputs."""

import json
import pathlib
import re

import numpy as np
import pytest

from tests.helpers import committed_code_cells

NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "pretrained.ipynb"
STATE = "NOTEBOOK-STATE "
STATE_CELL = f"""import json
print({STATE!r} + json.dumps({{  # what the test checks, as one line
    "accuracy": float(accuracy), "path": str(path), "difference": difference,
    "served": answer["probabilities"].numpy().tolist(), "predicted": probabilities.tolist(),
    "labels": classifier.predict_labels(reviews), "served_labels": [s.decode() for s in answer["label"].numpy()],
    "train": len(train_labels), "test": len(test_labels), "epochs": len(history.history["loss"]),
    "sequence_length": preprocessor.sequence_length}}))"""


def test_notebook_is_committed_without_outputs():
    code = committed_code_cells(NOTEBOOK)
    parameters = [c for c in code if "parameters" in c["metadata"].get("tags", [])]
    assert len(parameters) == 1, "one cell tagged `parameters`"
    assert 'SOURCE = "hf://google-bert/bert-base-uncased"' in "".join(parameters[0]["source"])


@pytest.fixture
def bert_checkpoint(tmp_path):
    """A 2-layer, 32-wide random `BertForMaskedLM` whose vocab.txt is learned on the bundled reviews
    (as tests/recipes/test_from_pretrained.py writes it)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from kformer.data import imdb
    from kformer.data.wordpiece import BERT_SPECIAL_TOKENS, WordPieceTokenizer

    texts, _ = imdb.load_split("train", max_examples=1000)  # about 1,500 pieces: most common words whole
    vocabulary = WordPieceTokenizer.learn(texts, 1500, special_tokens=BERT_SPECIAL_TOKENS).vocabulary
    assert vocabulary[0] == "[PAD]" and {"the", "movie", "film", "good", "bad"} <= set(vocabulary)
    folder = tmp_path / "tiny-bert"
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=len(vocabulary), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64))
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "vocab.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return folder


@pytest.mark.only_backend("tensorflow")  # it exports and serves in-process; each piece is tested on all backends
def test_notebook_fine_tunes_exports_and_serves(bert_checkpoint, tmp_path):
    pytest.importorskip("nbclient")
    pytest.importorskip("nbformat")
    from benchmarks import notebooks

    out = tmp_path / "served"
    # The tiny checkpoint and smaller runs after the cell tagged "parameters"; the kernel inherits this
    # environment (TensorFlow backend) and runs in notebooks/.
    notebook = notebooks.execute(NOTEBOOK, dict(
        SOURCE=str(bert_checkpoint), TRAIN_REVIEWS=96, TEST_REVIEWS=64, EPOCHS=1, SEQUENCE_LENGTH=48, BATCH_SIZE=32,
        LEARNING_RATE=1e-3, OUTPUT_DIR=str(out)), cells=[STATE_CELL], timeout=600)
    outputs = notebooks.printed(notebook)[0]
    assert "Traceback" not in outputs, outputs[-3000:]
    assert not re.search(r"\w+Warning: ", outputs), outputs[-3000:]  # no Python warnings for a first-time user
    state = json.loads(next(line for line in outputs.splitlines() if line.startswith(STATE))[len(STATE):])

    assert 0.0 <= state["accuracy"] <= 1.0
    assert (state["train"], state["test"], state["epochs"], state["sequence_length"]) == (96, 64, 1, 48)
    path = pathlib.Path(state["path"])
    assert path == out / "bert_imdb" / "1" and (path / "saved_model.pb").is_file()
    served, predicted = np.asarray(state["served"]), np.asarray(state["predicted"])
    assert served.shape == predicted.shape == (2, 2)
    np.testing.assert_allclose(served.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(served, predicted, atol=1e-5)
    assert state["difference"] < 1e-5
    assert state["labels"] == state["served_labels"] and set(state["labels"]) <= {"negative", "positive"}
    assert "BertTextClassifier: 2 layers, hidden size 32" in outputs
    assert "WordPiece: ['an'," in outputs  # the checkpoint's vocabulary, lowercased
    assert outputs.count("'The movie was [MASK].'") == 1 and "-> [" in outputs  # fill_mask's five guesses
    assert "test accuracy: " in outputs and "largest difference from classifier.predict" in outputs
