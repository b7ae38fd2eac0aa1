import math

import keras
import numpy as np
import pytest

from kformer.layers import PatchEmbedding, TokenAndPositionEmbedding
from tests.helpers import run_layer_test, to_numpy

IDS = np.array([[5, 3, 9, 2, 7, 1], [4, 8, 6, 0, 0, 0]], "int32")
PADDING = IDS != 0


@pytest.mark.parametrize("position", ["learned", "sinusoidal"])
def test_token_and_position_layer(position, tmp_path):
    run_layer_test(
        TokenAndPositionEmbedding,
        {"vocabulary_size": 10, "sequence_length": 8, "hidden_dim": 6, "position": position,
         "mask_zero": True, "scale_by_sqrt_dim": True},
        IDS, (2, 6, 6), padding_mask=None, tmp_path=tmp_path,
    )


def test_mask_zero_and_scaling():
    layer = TokenAndPositionEmbedding(10, 8, 6, position="sinusoidal", mask_zero=True,
                                      scale_by_sqrt_dim=True)
    out = to_numpy(layer(IDS))
    np.testing.assert_array_equal(to_numpy(layer.compute_mask(IDS)), PADDING)
    table = to_numpy(layer.token_embedding.embeddings)
    positions = to_numpy(layer.position_embedding(np.zeros((2, 6, 6), "float32")))
    np.testing.assert_allclose(out, table[IDS] * math.sqrt(6) + positions, atol=1e-5)


def test_reverse_is_the_tied_transpose():
    layer = TokenAndPositionEmbedding(10, 8, 6)
    layer(IDS)
    hidden = np.random.default_rng(0).normal(size=(2, 6, 6)).astype("float32")
    logits = to_numpy(layer(hidden, reverse=True))
    table = to_numpy(layer.token_embedding.embeddings)
    np.testing.assert_allclose(logits, hidden @ table.T, atol=1e-5)
    assert logits.shape == (2, 6, 10)


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_reverse_of_a_quantized_table_is_de_scaled(mode):
    """`model.quantize` stores integer rows and per-row scales; the tied projection must use their
    values (it multiplied by the raw integers: logits thousands of times too large)."""
    layer = TokenAndPositionEmbedding(50, 8, 16)
    layer(IDS)
    hidden = np.random.default_rng(0).normal(size=(2, 6, 16)).astype("float32")
    want = to_numpy(layer(hidden, reverse=True))
    layer.token_embedding.quantize(mode)
    got = to_numpy(layer(hidden, reverse=True))
    np.testing.assert_allclose(got, want, atol=0.1 * np.abs(want).max())


def test_start_index_continues_positions():
    layer = TokenAndPositionEmbedding(10, 8, 6)
    full = to_numpy(layer(IDS))
    step = to_numpy(layer(IDS[:, 4:5], start_index=4))
    np.testing.assert_allclose(step, full[:, 4:5], atol=1e-6)


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "none"])
def test_rows_of_the_position_table_replace_computed_positions(position):
    """Decoding adds `position_table` rows (made once) instead of computing positions each step."""
    layer = TokenAndPositionEmbedding(10, 8, 6, position=position, scale_by_sqrt_dim=True)
    full = to_numpy(layer(IDS))
    table = layer.position_table(8)
    if position == "none":
        assert table is None
        return
    assert tuple(table.shape) == (8, 6)
    np.testing.assert_allclose(to_numpy(layer(IDS[:, 4:5], positions=to_numpy(table)[4:5])), full[:, 4:5], atol=1e-6)


def test_token_and_position_errors():
    with pytest.raises(ValueError, match="position='rope'"):
        TokenAndPositionEmbedding(10, 8, 6, position="rope")
    with pytest.raises(ValueError, match="sequence_length=None"):
        TokenAndPositionEmbedding(10, None, 6)
    with pytest.raises(ValueError, match="sequence_length=4"):
        TokenAndPositionEmbedding(10, 4, 6)(IDS)
    with pytest.raises(ValueError, match=r"inputs.shape=\(2, 6, 6\)"):
        TokenAndPositionEmbedding(10, 8, 6)(np.zeros((2, 6, 6), "int32"))
    TokenAndPositionEmbedding(10, None, 6, position="sinusoidal")(IDS)  # any length


IMAGES = np.random.default_rng(0).random((2, 8, 12, 3)).astype("float32")


@pytest.mark.parametrize("use_class_token, tokens", [(True, 7), (False, 6)])
def test_patch_embedding_layer(use_class_token, tokens, tmp_path):
    run_layer_test(PatchEmbedding, {"patch_size": 4, "hidden_dim": 16,
                                    "use_class_token": use_class_token},
                   IMAGES, (2, tokens, 16), tmp_path=tmp_path)


def test_patch_embedding_with_a_convolutional_stem(tmp_path):
    # Two stride-2 stem convolutions then a 1x1 projection: 4x downsampling, as patch_size=4.
    run_layer_test(PatchEmbedding, {"patch_size": 4, "hidden_dim": 16, "stem_channels": [4, 8]},
                   IMAGES, (2, 7, 16), tmp_path=tmp_path)
    layer = PatchEmbedding(8, 16, stem_channels=(4,))  # one stride-2 conv, then a 4x4 projection
    assert tuple(layer(IMAGES[:, :8, :8]).shape) == (2, 2, 16)
    assert tuple(layer.projection.kernel.shape) == (4, 4, 4, 16)


def test_the_stem_batch_norm_learns_statistics_only_in_training():
    layer = PatchEmbedding(4, 16, stem_channels=(4, 8))
    layer(IMAGES)
    norm = layer.stem[1]
    before = to_numpy(norm.moving_mean)
    layer(IMAGES, training=False)
    np.testing.assert_array_equal(to_numpy(norm.moving_mean), before)
    layer(IMAGES, training=True)
    assert not np.allclose(to_numpy(norm.moving_mean), before)
    # Inside a model, `fit` reaches the nested BatchNorm through the call context.
    images = keras.Input(IMAGES.shape[1:])
    model = keras.Model(images, keras.layers.GlobalAveragePooling1D()(layer(images)))
    model.compile("sgd", "mse")
    before = to_numpy(norm.moving_mean)
    model.fit(IMAGES, np.zeros((2, 16)), epochs=1, verbose=0)
    assert not np.allclose(to_numpy(norm.moving_mean), before)


@pytest.mark.parametrize("stem_channels, message", [
    ("64", r"`stem_channels` must be a list or tuple of ints. Received: stem_channels='64'"),
    ((8, 0), r"`stem_channels\[1\]` must be a positive int. Received: stem_channels\[1\]=0"),
    ((8, 8, 8), r"`patch_size` must be divisible by 2\*\*len\(stem_channels\)=8.*patch_size=4"),
])
def test_bad_stem_channels_are_named(stem_channels, message):
    with pytest.raises(ValueError, match=message):
        PatchEmbedding(4, 16, stem_channels=stem_channels)


def test_patches_are_linear_projections_of_pixels():
    layer = PatchEmbedding(4, 16)
    out = to_numpy(layer(IMAGES))
    kernel, bias = (to_numpy(w) for w in layer.projection.weights)
    positions = to_numpy(layer.position_embedding.position_embeddings)
    patch = IMAGES[:, 4:8, 8:12, :]  # row 1, column 2 -> patch index 1 * 3 + 2 = 5, token 6
    expected = np.einsum("bhwc,hwcd->bd", patch, kernel) + bias + positions[6]
    np.testing.assert_allclose(out[:, 6], expected, atol=1e-5)
    np.testing.assert_allclose(out[:, 0], np.broadcast_to(to_numpy(layer.class_token)[0, 0] + positions[0], (2, 16)), atol=1e-6)


def test_patch_size_must_divide_image():
    with pytest.raises(ValueError, match=r"patch_size=5.*inputs.shape=\(2, 8, 12, 3\)"):
        PatchEmbedding(5, 16)(IMAGES)
    with pytest.raises(ValueError, match="patch_size=0"):
        PatchEmbedding(0, 16)
