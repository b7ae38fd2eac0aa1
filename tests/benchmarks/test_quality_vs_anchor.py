"""The anchor examples of benchmarks/quality_vs_anchor.py and the script itself (tiny real data)."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import quality_vs_anchor
from benchmarks.anchors import imdb as imdb_anchor
from benchmarks.anchors import mlm_bert, translation, vit

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


class FixedVectorizer:
    """Stands in for an adapted TextVectorization: word i -> id i, padded with 0 to the longest."""

    def __call__(self, texts):
        ids = [[int(w) for w in t.split()] for t in texts]
        out = np.zeros((len(ids), max(map(len, ids))), "int64")
        for row, seq in enumerate(ids):
            out[row, :len(seq)] = seq
        return out


def test_imdb_anchor_keeps_the_chosen_end_of_long_reviews():
    long = " ".join(str(i) for i in range(1, 251))  # 250 words, ids 1..250
    short = "7 8 9"
    tail = imdb_anchor.vectorize(FixedVectorizer(), [long, short], "tail")
    head = imdb_anchor.vectorize(FixedVectorizer(), [long, short], "head")
    assert tail.shape == head.shape == (2, imdb_anchor.SEQUENCE_LENGTH)
    np.testing.assert_array_equal(tail[0], np.arange(51, 251))  # the last 200 words, as pad_sequences keeps
    np.testing.assert_array_equal(head[0], np.arange(1, 201))
    np.testing.assert_array_equal(tail[1, -3:], [7, 8, 9])
    assert not tail[1, :-3].any() and not head[1, 3:].any()  # padded before / after


def test_imdb_anchor_is_the_example_model():
    model = imdb_anchor.build()
    embeddings = 20_000 * 32 + 200 * 32
    attention = 3 * (32 * 64 + 64) + (64 * 32 + 32)  # 2 heads of key_dim 32
    block = attention + 2 * (32 * 32 + 32) + 2 * 64  # feed-forward 32, two LayerNorms
    assert model.count_params() == embeddings + block + (32 * 20 + 20) + (20 * 2 + 2) == 657_758
    probs = np.asarray(model.predict(np.ones((3, 200), "int32"), verbose=0))
    assert probs.shape == (3, 2)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


def test_translation_anchor_reattaches_punctuation_like_the_recipe():
    assert translation.attach_punctuation("¿ qué es esto ?") == "¿qué es esto?"
    assert translation.attach_punctuation("no , gracias .  ") == "no, gracias."
    assert translation.attach_punctuation("it ' s tom") == "it's tom"


def test_mlm_bert_anchor_masks_as_the_example():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 500, (200, 256))
    masked, labels, weights = mlm_bert.mask(ids, 499, rng)
    selected = weights > 0
    assert not selected[ids <= 2].any()  # padding, [UNK] and id 2 are never selected
    assert 0.13 < selected[ids > 2].mean() < 0.17
    np.testing.assert_array_equal(labels, ids)
    np.testing.assert_array_equal(masked[~selected], ids[~selected])  # only selected tokens change
    share_masked = (masked[selected] == 499).mean()
    assert 0.75 < share_masked < 0.85  # 90 % [mask]ed, a ninth of those then random: 80 %


def test_vit_anchor_is_the_example_model_on_grey_digits():
    images = np.random.default_rng(0).integers(0, 255, (4, 28, 28, 1)).astype("uint8")
    model = vit.build(images, 10, flip=False)
    assert vit.NUM_PATCHES == 144 and vit.HIDDEN_DIM == 256
    assert not any("flip" in layer.name for layer in model.layers[1].layers)
    assert np.asarray(model.predict(images.astype("float32"), verbose=0)).shape == (4, 10)


@pytest.mark.parametrize("argv, message", [
    (["--task", "imdb", "--epochs", "0"], "--epochs must be a positive integer, got 0"),
    (["--task", "mnist", "--split-by", "source"], "--split-by source is for --task translation"),
    (["--task", "imdb", "--data-dir", "/no/such/folder"], "'/no/such/folder' is not a folder"),
    (["--task", "imdb", "--malloc", "tcmalloc"], "--malloc: invalid choice: 'tcmalloc'"),
])
def test_bad_flags_are_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        quality_vs_anchor.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.only_backend("torch")  # the recipe and the Keras example train fastest here (no graph to trace)
def test_imdb_side_by_side_on_the_bundled_sample(tmp_path):
    out = subprocess.run([sys.executable, "-m", "benchmarks.quality_vs_anchor", "--task", "imdb",
                          "--max-examples", "96", "--epochs", "1", "--output-dir", str(tmp_path),
                          "--verbose", "0"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "quality_vs_anchor_imdb.json").read_text())
    recipe = report["recipe"]["metrics"]["imdb_bigram"]
    assert report["malloc"] == "keep" and "--no-keep-freed-memory" not in report["recipe"]["command"]
    assert recipe["epochs"] == 1 and recipe["test_examples"] == 96
    assert set(report["anchor"]) == {"keras example (tail 200 words)", "keras example (head 200 words)"}
    for result in [recipe, *report["anchor"].values()]:
        assert 0.0 <= result["test_accuracy"] <= 1.0
    assert "kformer imdb_bigram" in out.stdout and "keras example (tail 200 words)" in out.stdout
