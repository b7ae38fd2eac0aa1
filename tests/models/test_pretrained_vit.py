"""Hugging Face ViT image classifiers loaded by `kformer.models.pretrained`, checked against transformers."""

import json
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from kformer.models import pretrained  # noqa: E402
from kformer.models.vit import ViTImageClassifier  # noqa: E402

LABELS = ["cat", "dog", "bird", "fish", "frog"]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]  # per channel, unlike the 0.5 default
TOLERANCE = 1e-4


def _reference(folder):
    """A small random `ViTForImageClassification` saved to `folder` with its image processor."""
    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                                    num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    num_labels=5, id2label=dict(enumerate(LABELS)))
    model = transformers.ViTForImageClassification(config).eval()
    with torch.no_grad():  # weights of order 1, not 0.02: logits far apart, so a wrong mapping shows
        for name, parameter in model.named_parameters():
            parameter.normal_(1.0 if "layernorm" in name and name.endswith("weight") else 0.0, 0.3)
    model.save_pretrained(folder, safe_serialization=True)
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=MEAN, image_std=STD)
    processor.save_pretrained(folder)
    return model, processor


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vit")
    model, processor = _reference(folder)
    return folder, model, processor


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return pretrained.from_pretrained(checkpoint[0])


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).integers(0, 256, size=(4, 32, 32, 3)).astype("uint8")


def _reference_logits(model, pixel_values):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(pixel_values)).logits.numpy()


def _normalized(images):
    """transformers' ViTImageProcessor arithmetic (rescale in float64, then normalize), NCHW."""
    x = (images.astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - np.asarray(MEAN, np.float32)) / np.asarray(STD, np.float32)
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def test_logits_and_labels_equal_the_reference(checkpoint, loaded, images):
    _, reference, processor = checkpoint
    pixel_values = processor(list(images), return_tensors="np")["pixel_values"]  # 32x32: not resized
    np.testing.assert_allclose(pixel_values, _normalized(images), atol=1e-6)
    want = _reference_logits(reference, pixel_values)
    got = keras.ops.convert_to_numpy(loaded(images.astype("float32"), training=False))
    diff = float(np.abs(got - want).max())
    print(f"\n{keras.backend.backend()}: max |logit difference| = {diff:.3g} (logits up to "
          f"{float(np.abs(want).max()):.3g})")
    assert diff < TOLERANCE
    assert loaded.predict_labels(images) == [LABELS[i] for i in want.argmax(-1)]
    probabilities = loaded.predict(images, verbose=0)
    np.testing.assert_allclose(probabilities, keras.ops.convert_to_numpy(keras.ops.softmax(want)), atol=1e-5)


def test_loaded_model_keeps_the_checkpoint_settings(loaded, tmp_path, images):
    assert isinstance(loaded, ViTImageClassifier)
    assert loaded.class_names == LABELS and loaded.num_classes == 5
    assert (loaded.image_size, loaded.patch_size, loaded.channels, loaded.hidden_dim) == (32, 8, 3, 32)
    assert loaded.layer_norm_epsilon == 1e-12
    assert loaded.pixel_mean == MEAN and loaded.pixel_std == STD
    assert (loaded.preprocessor.image_size, loaded.preprocessor.channels) == (32, 3)
    loaded.save(tmp_path / "vit.keras")  # the normalization and epsilon are part of the saved config
    again = keras.saving.load_model(tmp_path / "vit.keras")
    assert (again.pixel_mean, again.pixel_std, again.layer_norm_epsilon) == (MEAN, STD, 1e-12)
    np.testing.assert_allclose(again.predict(images, verbose=0), loaded.predict(images, verbose=0), atol=1e-6)


def test_default_vit_is_unchanged():
    model = ViTImageClassifier(image_size=8, patch_size=4, num_classes=3, channels=1, hidden_dim=16,
                               num_layers=1, num_heads=2, intermediate_dim=32)
    config = model.get_config()
    assert (config["layer_norm_epsilon"], config["pixel_mean"], config["pixel_std"]) == (1e-6, None, None)
    assert model.get_layer("rescale").get_config()["scale"] == 1.0 / 255
    for key in ("layer_norm_epsilon", "pixel_mean", "pixel_std"):  # a config saved before these arguments
        del config[key]
    old = ViTImageClassifier.from_config(config)
    old.set_weights(model.get_weights())
    x = np.random.default_rng(1).uniform(0, 255, (2, 8, 8, 1)).astype("float32")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(old(x)), keras.ops.convert_to_numpy(model(x)))
    with pytest.raises(ValueError, match=r"`pixel_std` must be.*Received: pixel_std=\[1.0, 0.0, 1.0\]"):
        ViTImageClassifier(image_size=8, patch_size=4, num_classes=3, hidden_dim=16, num_layers=1,
                           num_heads=2, intermediate_dim=32, pixel_std=[1.0, 0.0, 1.0])


def test_resize_differs_from_pil_slightly(checkpoint, loaded):
    """kformer resizes with tf.image.resize (bilinear), transformers with PIL (bilinear, antialiased when
    shrinking): close, not equal. Reported here; the model is compared on identical pixels above."""
    _, reference, processor = checkpoint
    rng = np.random.default_rng(2)
    cases = {"shrink 48x40": rng.integers(0, 256, size=(2, 48, 40, 3)).astype("uint8"),
             "enlarge 20x24": rng.integers(0, 256, size=(2, 20, 24, 3)).astype("uint8")}
    for name, x in cases.items():
        pixel_values = processor(list(x), return_tensors="np")["pixel_values"]
        ours = keras.ops.convert_to_numpy(loaded.preprocessor.inputs(x))  # 0-255, (batch, 32, 32, 3)
        theirs = pixel_values.transpose(0, 2, 3, 1) * np.asarray(STD) + np.asarray(MEAN)
        pixel_diff = float(np.abs(ours / 255 - theirs).max() * 255)
        logit_diff = float(np.abs(loaded.predict(x, verbose=0) - keras.ops.convert_to_numpy(
            keras.ops.softmax(_reference_logits(reference, pixel_values)))).max())
        print(f"\nresize {name} -> 32x32: max |pixel difference| {pixel_diff:.3g} of 255, "
              f"max |probability difference| {logit_diff:.3g}")
        assert 0 < pixel_diff < 255


@pytest.mark.parametrize("change, message", [
    ({"hidden_act": "gelu_new"}, r"config.json: `hidden_act`='gelu_new' cannot be represented exactly"),
    ({"hidden_act": {"name": "gelu"}}, r"config.json: `hidden_act`=\{'name': 'gelu'\} cannot be represented"),
    ({"qkv_bias": False}, r"config.json: `qkv_bias`=False cannot be represented exactly"),
    ({"patch_size": 5}, r"config.json: `image_size`=32 is not divisible by `patch_size`=5"),
    ({"image_size": [32, 32]}, r"config.json: `image_size`=\[32, 32\] must be a positive int"),
    ({"num_labels": 4}, r"config.json: `num_labels`=4 but `id2label` names 5 classes"),
    ({"architectures": ["ViTForMaskedImageModeling"]}, r"config.json: `architectures`="),
    ({"intermediate_size": 128}, r"config.json: `intermediate_size`=128, but model.safetensors holds tensor "
                                 r"'vit.encoder.layer.0.intermediate.dense.bias' of shape \(64,\)"),
    ({"num_hidden_layers": 1}, r"config.json: `num_hidden_layers`=1, but model.safetensors holds 2 layers"),
    ({"num_hidden_layers": 3}, r"config.json: `num_hidden_layers`=3, but model.safetensors holds 2 layers"),
    # sizes that would take minutes and gigabytes to build are compared with the tensors first
    ({"num_hidden_layers": 100_000}, r"`num_hidden_layers`=100000, but model.safetensors holds 2 layers; .*nothing "
                                     r"was built"),
    ({"hidden_size": 2 ** 20, "num_attention_heads": 2}, r"`hidden_size`=1048576, but model.safetensors holds "
                                                         r"tensor 'vit.embeddings.cls_token'"),
    ({"image_size": 2 ** 16, "preprocessor": {"size": {"height": 2 ** 16, "width": 2 ** 16}}}, r"`image_size`=65536 with `patch_size`=8 makes 67108865 positions, but "
                              r"model.safetensors holds tensor 'vit.embeddings.position_embeddings' of shape "
                              r"\(1, 17, 32\)"),
    ({"preprocessor": {"resample": 3}}, r"preprocessor_config.json: `resample`=3 cannot be represented exactly"),
    ({"preprocessor": {"do_center_crop": True}}, r"preprocessor_config.json: `do_center_crop`=True"),
    ({"preprocessor": {"size": {"height": 64, "width": 64}}}, r"preprocessor_config.json: `size`="),
    ({"preprocessor": {"rescale_factor": 1.0}}, r"preprocessor_config.json: `rescale_factor`=1.0"),
    ({"preprocessor": {"image_std": [0.5, 0.0, 0.5]}}, r"preprocessor_config.json: `image_std`="),
    ({"weights": "truncated"}, r"model.safetensors: tensor .* the file is truncated"),
    ({"weights": "missing"}, r"holds no model.safetensors"),
])
def test_unsupported_checkpoints_are_refused(checkpoint, tmp_path, change, message):
    folder = tmp_path / "copy"
    shutil.copytree(checkpoint[0], folder)
    change = dict(change)
    weights = change.pop("weights", None)
    for name, edit in (("preprocessor_config.json", change.pop("preprocessor", {})), ("config.json", change)):
        config = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps({**config, **edit}))
    data = (folder / "model.safetensors").read_bytes()
    if weights == "truncated":
        (folder / "model.safetensors").write_bytes(data[:-100])
    elif weights == "missing":
        (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=message):
        pretrained.from_pretrained(folder)


def test_other_options_are_refused(checkpoint):
    with pytest.raises(ValueError, match=r"`task` must be one of \[None, 'image_classification'\]. Received: "
                                         r"task='fill_mask'"):
        pretrained.from_pretrained(checkpoint[0], task="fill_mask")
    with pytest.raises(ValueError, match=r"takes `task`, `num_classes` and `class_names`. Received: "
                                         r"\['sequence_length'\]"):
        pretrained.from_pretrained(checkpoint[0], sequence_length=3)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the export is checked on TensorFlow")
def test_exported_model_serves_the_checkpoint_normalization(checkpoint, loaded, images, tmp_path):
    """The served graph (PNG or JPEG bytes in) gives in-process `predict`'s probabilities on the decoded image,
    so it applies the checkpoint's pixel normalization too; and equals the reference on 32x32 images."""
    import tensorflow as tf

    from kformer import export

    path = export.export_for_serving(loaded, tmp_path / "vit")
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    odd = np.random.default_rng(3).integers(0, 256, size=(48, 40, 3)).astype("uint8")
    for batch, encode in ((images, tf.io.encode_png), (odd[None], tf.io.encode_png), (images, tf.io.encode_jpeg),
                          (odd[None], tf.io.encode_jpeg)):
        encoded = tf.constant([encode(image).numpy() for image in batch])
        served = serve(image_bytes=encoded)
        decoded = np.stack([tf.io.decode_image(e, channels=3).numpy() for e in encoded.numpy()])
        want = loaded.predict(decoded, verbose=0)
        np.testing.assert_allclose(served["probabilities"].numpy(), want, atol=1e-6)
        assert [s.decode() for s in served["label"].numpy()] == loaded.predict_labels(decoded)
    # In its own process: check-serving turns XLA compilation off for the rest of the process it runs in.
    check = subprocess.run([sys.executable, "-m", "kformer.cli", "check-serving", str(path)],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "serving_default: ok" in check.stdout, check.stdout + check.stderr[-2000:]
    reference = _reference_logits(checkpoint[1], _normalized(images))
    served = serve(image_bytes=tf.constant([tf.io.encode_png(image).numpy() for image in images]))
    np.testing.assert_allclose(served["probabilities"].numpy(), tf.nn.softmax(reference).numpy(), atol=1e-5)
