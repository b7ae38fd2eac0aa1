"""ConformerEncoder: Table 1 presets, 4x subsampling, padding that never leaks."""

import keras
import numpy as np
import pytest

from kformer import models
from tests.helpers import to_numpy


def small(**kwargs):
    return models.conformer_encoder(preset="conformer_s", **{
        "num_features": 16, "num_layers": 2, "hidden_dim": 16, "num_heads": 2, "kernel_size": 5,
        "dropout": 0.0, **kwargs})


@pytest.mark.parametrize("preset, size", [("conformer_s", (16, 144, 4, 32)), ("conformer_m", (16, 256, 4, 32)),
                                          ("conformer_l", (17, 512, 8, 32))])
def test_presets_follow_table_1(preset, size):
    config = models.get_preset(preset)
    assert (config["num_layers"], config["hidden_dim"], config["num_heads"], config["kernel_size"]) == size
    encoder = models.conformer_encoder(preset=preset, num_layers=1)  # one block: built, not run
    assert encoder.output.shape == (None, None, size[1])
    block = encoder.conformer_blocks[0]
    assert block.num_heads == size[2] and block.kernel_size == size[3]


def test_four_times_fewer_frames_and_padding_does_not_leak():
    keras.utils.set_random_seed(0)
    encoder = small()
    rng = np.random.default_rng(0)
    features = rng.normal(size=(2, 64, 16)).astype("float32")
    lengths = np.array([64, 40])
    mask = np.arange(64) < lengths[:, None]
    out = to_numpy(encoder({"features": features, "padding_mask": mask}))
    assert out.shape == (2, (64 - 3) // 4, 16)
    sub = np.asarray(to_numpy(encoder.output_padding_mask(mask)))
    assert sub.sum(axis=1).tolist() == [15, 9]
    noisy = features.copy()
    noisy[1, 40:] = rng.normal(size=(24, 16)) * 100  # change only the padding
    again = to_numpy(encoder({"features": noisy, "padding_mask": mask}))
    np.testing.assert_allclose(again[1][sub[1]], out[1][sub[1]], atol=1e-4)
    np.testing.assert_allclose(again[0], out[0], atol=1e-5)


def test_trains_and_reloads(tmp_path):
    encoder = small()
    data = {"features": np.random.default_rng(1).normal(size=(4, 32, 16)).astype("float32"),
            "padding_mask": np.ones((4, 32), bool)}
    encoder.compile("adam", "mse")
    history = encoder.fit(data, np.zeros((4, 7, 16), "float32"), epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    encoder.save(tmp_path / "conformer.keras")
    reloaded = keras.saving.load_model(tmp_path / "conformer.keras", safe_mode=True)
    assert isinstance(reloaded, models.ConformerEncoder)
    np.testing.assert_allclose(to_numpy(reloaded.predict(data, verbose=0)),
                               to_numpy(encoder.predict(data, verbose=0)), atol=1e-5)


def test_bad_sizes_name_the_argument():
    with pytest.raises(ValueError, match="hidden_dim=18, num_heads=4"):
        models.conformer_encoder(preset="conformer_s", hidden_dim=18)
