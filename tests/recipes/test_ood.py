"""Out-of-distribution figures (issue 60): the image shifts, the model card's table, the ViT and GPT recipes' keys.

The shifts and the card are checked on every backend; each tiny recipe run on one (`only_backend`):
the OOD evaluation is NumPy and `model.evaluate`, and tests/recipes/test_recipes.py trains both
recipes on the other backends.
"""

import argparse
import json

import numpy as np
import pytest

from kformer.data import shifts
from recipes import model_card, train_gpt, train_vit

SHIFTS = [lambda x, s: shifts.translate(x, pixels=3 * s, seed=1), lambda x, s: shifts.rotate(x, degrees=15 * s, seed=1),
          lambda x, s: shifts.gaussian_noise(x, std=0.1 * s, seed=1), lambda x, s: shifts.reduce_contrast(x, 1 - s / 2)]


def _images(n=6, size=12, channels=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, channels), dtype="uint8")


@pytest.mark.parametrize("shift", SHIFTS, ids=["translate", "rotate", "noise", "contrast"])
@pytest.mark.once("numpy only")
def test_a_shift_keeps_shape_and_dtype_repeats_and_is_the_identity_at_zero_strength(shift):
    images = _images()
    before = images.copy()
    shifted = shift(images, 1)
    assert shifted.shape == images.shape and shifted.dtype == np.uint8
    assert np.array_equal(shift(images, 1), shifted)  # seeded: the same every call
    assert (shifted != images).mean() > 0.2  # it changes most pixels
    assert np.array_equal(shift(images, 0), images)
    assert np.array_equal(images, before)  # a new array: the input is untouched


@pytest.mark.once("numpy only")
def test_translate_moves_every_image_by_the_pixels_on_both_axes_with_seeded_directions():
    images = np.zeros((16, 11, 11, 1), "uint8")
    images[:, 5, 5] = 200
    moved = shifts.translate(images, pixels=3, seed=0)
    where = np.argwhere(moved[..., 0])  # (image, row, column) of the one lit pixel
    assert where[:, 0].tolist() == list(range(16))
    assert set(map(tuple, np.abs(where[:, 1:] - 5).tolist())) == {(3, 3)}
    assert len({tuple(w) for w in where[:, 1:].tolist()}) > 1  # not all the same way
    assert not np.array_equal(shifts.translate(images, 3, seed=1), moved)
    edge = np.full((1, 4, 4, 1), 9, "uint8")
    assert int(shifts.translate(edge, pixels=1).sum()) == 9 * 9  # a 3x3 part stays, the rest is black fill
    assert not shifts.translate(edge, pixels=4).any()  # moved out of the frame
    assert shifts.translate(edge[:0]).shape == (0, 4, 4, 1)


@pytest.mark.once("numpy only")
def test_rotate_turns_about_the_centre_both_ways_and_fills_black_corners():
    bar = np.zeros((8, 9, 9, 1), "uint8")
    bar[:, 4, :] = 255  # a horizontal bar through the centre
    turned = shifts.rotate(bar, degrees=90, seed=0)
    assert np.array_equal(turned[:, :, 4, 0], np.full((8, 9), 255))  # vertical, whichever way it turned
    tilted = shifts.rotate(bar, degrees=15, seed=0)
    assert (tilted[:, 4, 4] == 255).all()  # the centre stays
    assert len({t.tobytes() for t in tilted}) == 2  # clockwise and anticlockwise, seeded
    flat = np.full((1, 9, 9, 1), 100, "uint8")
    assert shifts.rotate(flat, degrees=45)[0, 0, 0, 0] == 0 and shifts.rotate(flat, 45)[0, 4, 4, 0] == 100


@pytest.mark.once("numpy only")
def test_noise_has_the_standard_deviation_and_contrast_keeps_the_mean():
    grey = np.full((4, 32, 32, 3), 128, "uint8")
    noise = shifts.gaussian_noise(grey, std=0.1, seed=0).astype(float) - 128
    assert abs(noise.mean()) < 1.0 and abs(noise.std() - 25.5) < 1.0
    assert not np.array_equal(shifts.gaussian_noise(grey, 0.1, seed=1), shifts.gaussian_noise(grey, 0.1, seed=0))
    images = _images(size=16)
    low = shifts.reduce_contrast(images, factor=0.5).astype(float)
    assert np.allclose(low.mean(axis=(1, 2)), images.mean(axis=(1, 2)), atol=0.5)  # per image and channel
    assert np.allclose(low.std(axis=(1, 2)), images.std(axis=(1, 2)) / 2, atol=0.5)
    assert np.ptp(shifts.reduce_contrast(images, factor=0.0), axis=(1, 2)).max() == 0  # flat grey


@pytest.mark.parametrize("call", [lambda: shifts.translate(np.zeros((2, 4, 4, 1), "float32")),
                                  lambda: shifts.rotate(np.zeros((4, 4, 1), "uint8")),
                                  lambda: shifts.translate(np.zeros((1, 4, 4, 1), "uint8"), pixels=-1),
                                  lambda: shifts.gaussian_noise(np.zeros((1, 4, 4, 1), "uint8"), std=float("nan")),
                                  lambda: shifts.reduce_contrast(np.zeros((1, 4, 4, 1), "uint8"), factor=2)])
@pytest.mark.once("argument check, numpy only")
def test_a_shift_rejects_what_is_not_a_uint8_batch_or_a_bad_strength(call):
    with pytest.raises(ValueError):
        call()


class _Model:  # what the card reads of a trained task
    task_type = "image_classification"

    def count_params(self):
        return 1234


def _card(tmp_path, metrics, ood=None, exported=False):
    args = argparse.Namespace(_argv=["--epochs=1"], no_export=not exported)
    model_card.write_for_run(tmp_path, model=_Model(), name="vit_x", recipe="train_vit", args=args,
                             config={"preset": "vit_x"}, metrics=metrics, dataset="mnist", limits=["Small."],
                             ood=ood)
    return (tmp_path / "README.md").read_text()


@pytest.mark.once("Markdown and JSON from a stub model")
def test_the_card_puts_ood_figures_in_their_own_table_with_what_was_changed(tmp_path):
    metrics = {"test_top1": 0.9, "test_examples": 64, "epochs": 1, "ood_shift_noise_accuracy": 0.5,
               "val_ood_shift_noise_accuracy": 0.25, "ood_rare_word_bleu": 12.5, "ood_rare_word_pairs": 40}
    text = _card(tmp_path, metrics, ood={"ood_shift_noise_accuracy": "Gaussian | noise\nadded"}, exported=True)
    scores, rest = text.split("## Metrics")[1].split("## Out of distribution")
    table, training = rest.split("## Training and decoding")
    assert "| test_top1 | 0.9 |" in scores and "ood_" not in scores
    assert "| ood_shift_noise_accuracy | 0.5 | Gaussian \\| noise added |" in table  # one escaped cell
    assert "| val_ood_shift_noise_accuracy | 0.25 | Gaussian \\| noise added |" in table  # ood_'s line
    assert "| ood_rare_word_bleu | 12.5 |  |" in table  # no description: an empty cell, still shown
    assert "| ood_rare_word_pairs | 40 |  |" in table  # a count of the shifted data stays with it
    assert "| epochs | 1 |" in training and "| test_examples | 64 |" in text.split("## Metrics")[0]
    facts = json.loads((tmp_path / "assets.extra" / "model_card.json").read_text())
    assert facts["out_of_distribution"]["ood_shift_noise_accuracy"] == {
        "value": 0.5, "description": "Gaussian | noise\nadded"}
    assert "ood_shift_noise_accuracy" not in facts["metrics"]


@pytest.mark.once("Markdown and JSON from a stub model")
def test_a_card_without_ood_figures_has_no_such_section(tmp_path):
    text = _card(tmp_path, {"test_top1": 0.9}, ood={"ood_never_computed": "skipped"})
    assert "Out of distribution" not in text and "ood_" not in text


def _tiny(tmp_path):
    return ["--epochs=1", "--max-examples=32", "--verbose=0", "--batch-size=16", "--no-export", "--no-plots",
            f"--output-dir={tmp_path}"]


def _card_table(run_dir):
    return (run_dir / "README.md").read_text().split("## Out of distribution")[1].split("## Training")[0]


@pytest.mark.only_backend("torch")  # eager: the cheapest tiny ViT run
def test_vit_recipe_reports_top1_under_each_shift(tmp_path, capsys):
    run_dir = train_vit.main(_tiny(tmp_path))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    keys = ["ood_shift_translate_accuracy", "ood_shift_rotate_accuracy", "ood_shift_noise_accuracy",
            "ood_shift_contrast_accuracy"]
    assert list(train_vit.SHIFTS) == keys and all(0.0 <= metrics[k] <= 1.0 for k in keys)
    table = _card_table(run_dir)
    assert all(f"| {k} | {metrics[k]:.4g} | top-1 on the test images " in table for k in keys)
    assert "shifted test images, top-1: translate " in capsys.readouterr().out


@pytest.mark.only_backend("torch")  # eager: the cheapest tiny GPT run
def test_gpt_recipe_reports_perplexity_on_tatoeba_english(tmp_path, capsys):
    run_dir = train_gpt.main(_tiny(tmp_path) + ["--max-examples=4", "--batch-size=32", "--vocabulary-size=300",
                                                "--sequence-length=32", "--sample-length=4"])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 1.0 < metrics["ood_tatoeba_english_perplexity"] < 10_000  # a 300-token vocabulary, barely trained
    assert len(train_gpt.tatoeba_english()) == train_gpt.OOD_SENTENCES == 500
    assert "| ood_tatoeba_english_perplexity |" in _card_table(run_dir) and "Tatoeba" in _card_table(run_dir)
    assert "Tatoeba English sentences" in capsys.readouterr().out
