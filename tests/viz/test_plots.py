"""kformer.viz on tiny models: every plot saved to PNG and checked, on every backend."""

import ast
import pathlib
import sys

import keras
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

import kformer  # noqa: E402
from kformer import blocks, layers, models  # noqa: E402
from kformer.data import preprocessors as pre  # noqa: E402
from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer  # noqa: E402
from kformer.viz import _scores, plot_attention, plot_history, plot_patch_attention  # noqa: E402
from kformer.viz import plot_positional_encoding  # noqa: E402
from kformer.viz.patches import _rollout  # noqa: E402
from tests.helpers import to_numpy  # noqa: E402

WORDS = ["a", "fine", "film", "hola", "mundo", "hello", "world"]
TOKENIZER = WordPieceTokenizer(list(SPECIAL_TOKENS) + WORDS)
SMALL = dict(hidden_dim=8, num_heads=2, intermediate_dim=16)  # one set of shapes: fewer JAX compiles
FILM = ["a", "fine", "film"]


@pytest.fixture(scope="module")
def translator():
    return models.Translator(vocabulary_size=16, sequence_length=8, num_encoder_layers=1,
                             num_decoder_layers=1, **SMALL,
                             preprocessor=pre.TranslatorPreprocessor(TOKENIZER, sequence_length=8))


@pytest.fixture(scope="module")
def backbone():
    # sequence_length=16: the position table is (16, 8) like the token table (one JAX compile less).
    return models.BertBackbone(vocabulary_size=16, sequence_length=16, num_layers=2, **SMALL)


def make_vit(preprocessor=True):
    return models.ViTImageClassifier(
        image_size=8, patch_size=4, num_classes=2, channels=1, num_layers=2,
        preprocessor=pre.ImageClassifierPreprocessor(8, 1) if preprocessor else None, **SMALL)


@pytest.fixture(scope="module")
def vit():
    return make_vit()


def check_png(fig, tmp_path, dpi=40):
    """Save `fig`, then check the PNG: its pixel size, and that it is not one flat colour."""
    path = tmp_path / "plot.png"
    fig.savefig(path, dpi=dpi)
    width, height = fig.get_size_inches() * dpi
    plt.close(fig)
    assert path.stat().st_size > 1000
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (round(height), round(width))
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 20


def ticks(ax):
    return [t.get_text() for t in ax.get_xticklabels()], [t.get_text() for t in ax.get_yticklabels()]


def shown(ax, image=0):
    return np.asarray(ax.get_images()[image].get_array())


def test_text_classifier_attention_shows_tokens_without_padding(tmp_path):
    model = models.TextClassifier(vocabulary_size=16, sequence_length=8, num_layers=1,
                                  preprocessor=pre.TextClassifierPreprocessor(TOKENIZER, 8), **SMALL)
    fig = plot_attention(model, ["A fine film"], layer="encoder_0")
    assert len(fig.axes) == 3  # two heads and a colorbar
    assert [ax.get_title() for ax in fig.axes[:2]] == ["head 0", "head 1"]
    assert ticks(fig.axes[0]) == (FILM, FILM)
    np.testing.assert_allclose(shown(fig.axes[1]).sum(-1), 1.0, atol=1e-5)  # padded keys held 0
    check_png(fig, tmp_path)
    fig = plot_attention(model, np.array([[7, 8, 0, 0, 0, 0, 0, 0]]), layer=model.encoder_blocks[0], head=1)
    assert len(fig.axes) == 2 and fig.axes[0].get_title() == "head 1"
    assert ticks(fig.axes[0])[0] == ["a", "fine"]
    assert "padding" not in fig.get_suptitle()  # masked: every weight is drawn
    check_png(fig, tmp_path)


def test_attention_on_padding_of_an_unmasked_classifier_is_stated(tmp_path):
    model = models.TextClassifier(vocabulary_size=16, sequence_length=8, num_layers=1, mask_padding=False,
                                  preprocessor=pre.TextClassifierPreprocessor(TOKENIZER, 8), **SMALL)
    fig = plot_attention(model, ["A fine film"], layer="encoder_0")
    assert ticks(fig.axes[0]) == (FILM, FILM)  # padding still left out of the axes
    missing = 1.0 - np.mean([shown(ax).sum(-1).mean() for ax in fig.axes[:2]])
    assert missing > 0.05
    assert f"{missing:.0%} of the attention falls on padding" in fig.get_suptitle()
    check_png(fig, tmp_path)


def test_translator_self_and_cross_attention(translator, tmp_path):
    source, target = ["hello", "world"], ["[START]", "hola", "mundo"]
    fig = plot_attention(translator, "hello world", layer=0, targets="hola mundo")
    assert ticks(fig.axes[0]) == (source, source) and fig.texts[0].get_text() == "encoder_0: self-attention"
    fig = plot_attention(translator, "hello world", layer="decoder_0", targets="hola mundo")
    assert ticks(fig.axes[0]) == (target, target)
    np.testing.assert_array_equal(np.triu(shown(fig.axes[0]), 1), 0.0)  # causal
    check_png(fig, tmp_path)
    fig = plot_attention(translator, "hello world", layer=0, attention="cross", targets="hola mundo")
    assert ticks(fig.axes[0]) == (source, target) and shown(fig.axes[1]).shape == (3, 2)
    check_png(fig, tmp_path)
    ids = translator.preprocessor.encode(["hello"])["encoder_token_ids"]
    fig = plot_attention(translator, {"encoder_token_ids": ids, "decoder_token_ids": ids},
                         layer=translator.decoder_blocks[0], attention="cross", head=0)
    assert ticks(fig.axes[0]) == (["hello"], ["hello"])
    plt.close("all")


def test_translator_decoder_sees_its_own_translation_without_targets(translator):
    fig = plot_attention(translator, "hello world", layer="decoder_0", attention="cross", head=0)
    keys, queries = ticks(fig.axes[0])
    assert keys == ["hello", "world"] and queries[0] == "[START]"
    plt.close(fig)


@pytest.mark.parametrize("layer", ["encoder_0", "decoder_0"])
def test_blocks_see_what_the_model_computes(translator, layer):
    """A block re-run on the sub-model's values gives the model's own block output (masks included)."""
    feed = {"encoder_token_ids": np.array([[12, 13, 12, 0, 0, 0, 0, 0]], "int32"),
            "decoder_token_ids": np.array([[5, 10, 11, 0, 0, 0, 0, 0]], "int32")}
    owner, block = _scores.find_block(translator, layer)
    [(args, kwargs)] = _scores.block_calls(owner, [block], feed)
    expected = keras.Model(owner.input, block.output)(feed, training=False)
    np.testing.assert_allclose(to_numpy(block(*args, **kwargs)), to_numpy(expected), atol=1e-5)
    scores = _scores.attention_scores(block, args, kwargs)
    np.testing.assert_array_equal(scores["cross" if "decoder" in layer else "self"][..., 3:], 0.0)


@pytest.mark.parametrize("task", [models.BertTextClassifier, models.BertPretrainer])
def test_bert_tasks_use_the_backbone_blocks(backbone, task, tmp_path):
    masks = task is models.BertPretrainer
    model = task(backbone, preprocessor=pre.BertPreprocessor(TOKENIZER, 8, mask_positions=masks))
    fig = plot_attention(model, ["a fine [MASK]"], layer=1)
    assert len(fig.axes) == 3 and fig.texts[0].get_text() == "encoder_1: self-attention"
    assert ticks(fig.axes[0])[0] == ["[CLS]", "a", "fine", "[MASK]", "[SEP]"]
    check_png(fig, tmp_path)


def test_vit_attention_labels_class_token_and_patches(vit, tmp_path):
    fig = plot_attention(vit, np.full((12, 12, 3), 200, "uint8"), layer=-1)
    assert ticks(fig.axes[0])[0] == ["[CLS]", "p0", "p1", "p2", "p3"]
    check_png(fig, tmp_path)


def test_standalone_blocks(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 8, 8)).astype("float32")  # shapes as above: fewer compiles
    padding = np.array([[True] * 8, [True] * 3 + [False] * 5])
    fig = plot_attention(blocks.TransformerEncoderBlock(2, 16), {"inputs": x, "padding_mask": padding},
                         index=1, tokens=["w", "x", "y"] + ["pad"] * 5)
    assert ticks(fig.axes[0]) == (["w", "x", "y"], ["w", "x", "y"])
    check_png(fig, tmp_path)
    fig = plot_attention(blocks.TransformerDecoderBlock(2, 16), (x[:1], x[1:]), attention="cross", head=1,
                         tokens=([f"q{i}" for i in range(8)], list("abcdefgh")))
    assert ticks(fig.axes[0]) == (list("abcdefgh"), [f"q{i}" for i in range(8)])
    plt.close(fig)


def test_attention_errors(translator, vit):
    with pytest.raises(ValueError, match="no cross-attention"):
        plot_attention(translator, "hello", layer="encoder_0", attention="cross")
    with pytest.raises(ValueError, match="encoder_0, decoder_0"):
        plot_attention(translator, "hello", layer="decoder_7")
    with pytest.raises(ValueError, match="head=2"):
        plot_attention(translator, "hello", head=2)
    with pytest.raises(ValueError, match="needs a Translator"):
        plot_attention(vit, np.zeros((8, 8, 1)), targets="hola")
    with pytest.raises(ValueError, match="kformer task"):
        plot_attention(keras.Sequential([keras.layers.Dense(2)]), np.zeros((1, 2)))


@pytest.mark.parametrize("method", ["rollout", "last"])
def test_patch_attention_on_images_of_any_size(vit, method, tmp_path):
    for size in ((20, 12, 3), (8, 8, 1)):  # RGB, resized; then grayscale
        image = np.random.default_rng(0).integers(0, 255, size, dtype="uint8")
        fig = plot_patch_attention(vit, image, method=method)
        assert [ax.get_title() for ax in fig.axes[:3]] == [
            "image", f"class-token attention ({method})", "image × attention"]
        assert len(fig.axes) == 4  # and the colorbar
        overlay = shown(fig.axes[1], image=1)
        assert overlay.shape == size[:2] and np.isclose(overlay.max(), 1.0) and overlay.min() >= 0
        check_png(fig, tmp_path)


def test_patch_attention_without_preprocessor_needs_the_model_size(tmp_path):
    model = make_vit(preprocessor=False)
    check_png(plot_patch_attention(model, np.full((1, 8, 8, 1), 90.0)), tmp_path)
    with pytest.raises(ValueError, match=r"\(8, 8, 1\)"):
        plot_patch_attention(model, np.zeros((16, 16, 1)))


@pytest.mark.once("numpy only")
def test_rollout_is_the_product_of_residual_averaged_attention():
    a, b = np.random.default_rng(0).dirichlet(np.ones(5), size=(2, 2, 5))  # 2 layers of (heads, 5, 5)
    step = [(m.mean(0) + np.eye(5)) / 2 for m in (a, b)]
    np.testing.assert_allclose(_rollout([a, b]), (step[1] @ step[0])[0, 1:], atol=1e-12)


def test_positional_encodings(vit, tmp_path):
    fig = plot_positional_encoding("sinusoidal", sequence_length=8, hidden_dim=16)
    assert shown(fig.axes[0]).shape == (8, 16) and len(fig.axes) == 2
    positions = np.arange(8)
    np.testing.assert_allclose(shown(fig.axes[0])[:, :2], np.stack([np.sin(positions), np.cos(positions)], 1),
                               atol=1e-5)
    check_png(fig, tmp_path)
    fig = plot_positional_encoding("rotary", sequence_length=8, hidden_dim=16)
    assert len(fig.axes) == 3 and shown(fig.axes[0]).shape == (8, 8)
    np.testing.assert_allclose(shown(fig.axes[0])[:, 0], np.cos(np.arange(8)), atol=1e-5)
    check_png(fig, tmp_path)
    fig = plot_positional_encoding(layer=vit)  # the patch embedding's learned table
    table = vit.patch_embedding.position_embedding.position_embeddings
    np.testing.assert_allclose(shown(fig.axes[0]), to_numpy(table), atol=1e-6)
    check_png(fig, tmp_path)
    embedding = layers.TokenAndPositionEmbedding(16, 8, 8)
    embedding(np.zeros((1, 8), "int32"))
    assert shown(plot_positional_encoding("learned", 6, layer=embedding).axes[0]).shape == (6, 8)
    with pytest.raises(ValueError, match="match `layer`"):
        plot_positional_encoding("rotary", layer=embedding)
    with pytest.raises(ValueError, match="needs `layer`"):
        plot_positional_encoding("learned")
    plt.close("all")


def test_history_from_keras_history_csv_logger_and_dict(tmp_path):
    logs = [{"accuracy": 0.5 + e / 10, "loss": 1 - e / 5, "val_accuracy": 0.4 + e / 10,
             "val_loss": 1.1 - e / 5} for e in range(3)]
    csv_path = tmp_path / "training_log.csv"
    history, logger = keras.callbacks.History(), keras.callbacks.CSVLogger(str(csv_path))
    for callback in (history, logger):  # the callbacks `fit` runs, driven by hand
        callback.set_model(keras.Sequential([keras.layers.Dense(1)]))
        callback.on_train_begin()
        for epoch, epoch_logs in enumerate(logs):
            callback.on_epoch_end(epoch, dict(epoch_logs))
        callback.on_train_end()
    for source in (history, csv_path, str(csv_path), history.history):
        fig = plot_history(source)
        assert [ax.get_title() for ax in fig.axes] == ["loss", "accuracy"]
        lines = fig.axes[0].get_lines()
        assert [line.get_label() for line in lines] == ["train", "validation"]
        np.testing.assert_array_equal(lines[0].get_xdata(), [1, 2, 3])
        np.testing.assert_allclose(lines[1].get_ydata(), history.history["val_loss"], rtol=1e-5)
        check_png(fig, tmp_path)
    fig = plot_history({"loss": [3, 2], "val_bleu": [0.1, 0.2], "learning_rate": [1e-3, 5e-4]})
    assert [ax.get_title() for ax in fig.axes] == ["loss", "learning_rate", "bleu"]
    plt.close(fig)
    with pytest.raises(ValueError, match="no metrics"):
        plot_history({})


@pytest.mark.once("source scan and an import check")
def test_matplotlib_is_imported_lazily_with_a_clear_error(monkeypatch):
    """No other kformer module imports kformer.viz; kformer.viz imports matplotlib only inside functions.

    (Keras itself imports matplotlib when it is installed, so `sys.modules` cannot show this.)
    """
    for path in pathlib.Path(kformer.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module = "" if isinstance(node, ast.Import) else f"{node.module}."
                names = [module + alias.name for alias in node.names] + [module.rstrip(".")]
                for name in names:
                    assert not (name.startswith("kformer.viz") and "viz" not in path.parts), (path, name)
                    assert not (name.startswith("matplotlib") and node in tree.body), (path, name)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install kformer\[viz\]"):
        plot_history({"loss": [1.0]})
