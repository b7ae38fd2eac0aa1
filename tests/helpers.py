"""Shared layer test (STYLE.md section 8), modelled on keras-hub's `run_layer_test`."""

import json

import keras
import numpy as np
from keras import ops


# XLA on TensorFlow and JAX; torch runs eagerly here (see tests/test_jit_all_layers.py).
JIT = keras.backend.backend() != "torch"
# Both mixed policies on TensorFlow; on JAX (eager ops compile per dtype) and torch, the one
# each is used with most (bfloat16 on TPU-style JAX, float16 on CUDA torch).
MIXED_POLICIES = {"tensorflow": ("mixed_float16", "mixed_bfloat16"), "jax": ("mixed_bfloat16",),
                  "torch": ("mixed_float16",)}[keras.backend.backend()]


def to_numpy(x):
    return ops.convert_to_numpy(x)


def _as_dict(input_data):
    return dict(input_data) if isinstance(input_data, dict) else {"inputs": input_data}


def _call(layer, data, call_kwargs):
    if list(data) == ["inputs"]:
        return layer(data["inputs"], **call_kwargs)
    return layer(**data, **call_kwargs)


def _functional(layer, data, call_kwargs, padding_mask, padding_mask_arg):
    """A functional model wrapping `layer`; its inputs are the call args (+ mask)."""
    inputs = {
        name: keras.Input(value.shape[1:], dtype=str(value.dtype), name=name)
        for name, value in data.items()
    }
    kwargs = dict(call_kwargs)
    if padding_mask is not None:
        inputs["mask_input"] = keras.Input(padding_mask.shape[1:], dtype="bool", name="mask_input")
        kwargs[padding_mask_arg] = inputs["mask_input"]
    outputs = _call(layer, {k: v for k, v in inputs.items() if k != "mask_input"}, kwargs)
    return keras.Model(inputs, outputs), inputs


def _feed(data, padding_mask):
    feed = dict(data)
    if padding_mask is not None:
        feed["mask_input"] = padding_mask
    return feed


def _perturb(data, positions, rng):
    """Change every input at `positions` (bool `(batch, seq)`) along axis 1.

    Float noise is shifted and drawn from its own seed: a plain scaled copy of
    the data (same seed) would pass through a LayerNorm unchanged and prove nothing.
    """
    changed = {}
    for name, value in data.items():
        value = np.array(value)
        if value.ndim >= 2 and value.shape[:2] == positions.shape:
            if np.issubdtype(value.dtype, np.integer):
                noise = rng.integers(1, max(2, value.max() + 1), size=value.shape)
            else:
                noise = rng.normal(size=value.shape) * 3.0 + 1.5
            where = positions.reshape(positions.shape + (1,) * (value.ndim - 2))
            value = np.where(where, noise.astype(value.dtype), value)
        changed[name] = value
    return changed


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    expected_output_shape,
    *,
    call_kwargs=None,
    padding_mask=None,
    padding_mask_arg="padding_mask",
    causal=False,
    run_fit=True,
    run_mixed_precision=True,
    tmp_path=None,
):
    """Check a layer: shapes/dtypes eager and symbolic, config round trip,
    `.keras` reload, padding and causal invariance, one jit-compiled `fit`
    step and mixed precision.

    `input_data` is an array (first call argument) or a dict of call
    arguments; `padding_mask` (bool `(batch, seq)`) is passed as
    `padding_mask_arg`.
    """
    call_kwargs = call_kwargs or {}
    data = _as_dict(input_data)
    rng = np.random.default_rng(0)

    # 1. Eager and symbolic shapes and dtypes.
    layer = layer_cls(**init_kwargs)
    eager_kwargs = dict(call_kwargs)
    if padding_mask is not None:
        eager_kwargs[padding_mask_arg] = padding_mask
    output = _call(layer, data, eager_kwargs)
    assert tuple(output.shape) == tuple(expected_output_shape), output.shape
    assert keras.backend.standardize_dtype(output.dtype) == layer.compute_dtype
    assert np.all(np.isfinite(to_numpy(output)))
    model, symbolic = _functional(layer, data, call_kwargs, padding_mask, padding_mask_arg)
    assert tuple(model.output.shape[1:]) == tuple(expected_output_shape[1:])
    feed = _feed(data, padding_mask)
    reference = model.predict(feed, verbose=0)
    np.testing.assert_allclose(reference, to_numpy(output), atol=1e-5)

    # 2. Config round trip.
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert json.dumps(clone.get_config(), sort_keys=True, default=str) == json.dumps(
        config, sort_keys=True, default=str
    )
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(restored, layer_cls)

    # 3. `.keras` save and reload (catches a build() that skips children).
    if tmp_path is not None:
        path = str(tmp_path / f"{layer_cls.__name__}.keras")
        model.save(path)
        reloaded = keras.saving.load_model(path)
        np.testing.assert_allclose(reloaded.predict(feed, verbose=0), reference, atol=1e-5)

    # 4. Padding invariance: padded positions do not change real outputs.
    if padding_mask is not None:
        changed = _perturb(data, ~padding_mask, np.random.default_rng(2024))
        perturbed = model.predict(_feed(changed, padding_mask), verbose=0)
        np.testing.assert_allclose(perturbed[padding_mask], reference[padding_mask], atol=1e-5)

    # 5. Causality: later tokens do not change earlier outputs.
    if causal:
        seq = next(iter(data.values())).shape[1]
        cut = seq // 2
        future = np.zeros(next(iter(data.values())).shape[:2], bool)
        future[:, cut + 1 :] = True
        perturbed = model.predict(_feed(_perturb(data, future, np.random.default_rng(2024)), padding_mask),
                                  verbose=0)
        np.testing.assert_allclose(perturbed[:, : cut + 1], reference[:, : cut + 1], atol=1e-5)

    # 6. One jit-compiled fit step on random targets moves the weights
    # (torch.compile costs ~30 s a model: tests/test_jit_all_layers.py covers it).
    if run_fit:
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=JIT)
        before = [to_numpy(w).copy() for w in model.trainable_weights]
        target = rng.normal(size=reference.shape).astype("float32")
        history = model.fit(feed, target, batch_size=len(target), epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])
        after = [to_numpy(w) for w in model.trainable_weights]
        assert any(not np.allclose(a, b) for a, b in zip(before, after)), "no weight moved"

    # 7. Mixed precision: sublayers follow the dtype policy.
    if run_mixed_precision:
        for policy in MIXED_POLICIES:
            mixed = layer_cls(**init_kwargs, dtype=policy)
            out = _call(mixed, data, eager_kwargs)
            compute = keras.dtype_policies.get(policy).compute_dtype
            assert keras.backend.standardize_dtype(out.dtype) == compute, (policy, out.dtype)
            assert np.all(np.isfinite(to_numpy(ops.cast(out, "float32"))))
            for sub in mixed._flatten_layers(include_self=False):
                if sub.dtype_policy.name != "float32":
                    assert sub.dtype_policy.name == policy, (sub.name, sub.dtype_policy.name)
    return layer


def assert_figures(folder, names=("curves.png", "attention.png"), min_pixels=(150, 300)):
    """Each PNG in `names` exists in `folder`, is at least `min_pixels` (height, width) and not blank,
    and the folder's model card shows it."""
    import matplotlib.image

    card = (folder / "README.md").read_text(encoding="utf-8")
    for name in names:
        image = matplotlib.image.imread(folder / name)  # (height, width, 3 or 4), floats in [0, 1]
        assert image.ndim == 3 and image.shape[0] >= min_pixels[0] and image.shape[1] >= min_pixels[1], (
            name, image.shape)
        assert float(image[..., :3].std()) > 0.02, f"{name} is blank"
        assert f"]({name})" in card, f"the model card does not show {name}"


def repeated_trigrams(text):
    """The word 3-grams that occur more than once in `text` (a translation that loops has some)."""
    words = text.split()
    grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    return sorted({g for g in grams if grams.count(g) > 1})


def committed_code_cells(path):
    """The code cells of the notebook at `path`, asserting it is committed without outputs."""
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code, f"{path.name} has no code cells"
    assert all(not c["outputs"] and c["execution_count"] is None for c in code), (
        f"strip the outputs before committing: jupyter nbconvert --clear-output --inplace {path.name}")
    return code
