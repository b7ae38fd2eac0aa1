"""benchmarks/recipe_steps.py: its FLOP count, its batches (the recipes' defaults) and its timing."""

import keras
import numpy as np
import pytest

from benchmarks import recipe_steps

jax_only = pytest.mark.skipif(keras.backend.backend() != "jax", reason="FLOPs are counted on JAX traces")


@jax_only
def test_flops_of_dense_attention_and_convolution_match_the_formulas():
    dense = keras.Sequential([keras.Input((5, 16)), keras.layers.Dense(32), keras.layers.Dense(8)])
    assert recipe_steps.forward_flops(dense, np.ones((3, 5, 16), "float32")) == 2 * 3 * 5 * (16 * 32 + 32 * 8)

    conv = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, strides=2, padding="same")])
    assert recipe_steps.forward_flops(conv, np.ones((2, 8, 8, 3), "float32")) == 2 * (2 * 4 * 4 * 4) * (3 * 3 * 3)

    from kformer.layers import MultiHeadAttention

    x = keras.Input((6, 8))
    attention = keras.Model(x, MultiHeadAttention(num_heads=2, key_dim=4)(x, x))
    projections = 4 * 2 * 6 * 8 * 8  # q, k, v, output: 6 tokens, 8 -> 2 heads x 4 -> 8
    scores_and_sum = 2 * 2 * (2 * 6 * 6 * 4)  # per head: QK^T and PV
    assert recipe_steps.forward_flops(attention, np.ones((1, 6, 8), "float32")) == projections + scores_and_sum


@pytest.mark.tf_only
@pytest.mark.parametrize("recipe", recipe_steps.RECIPES)
def test_each_batch_has_the_recipes_default_shape(recipe):
    model, data, args = recipe_steps.build(recipe)
    x = data[0]
    first = x["token_ids"] if recipe == "mini_bert" else x["encoder_token_ids"] if recipe == "translator" else x
    assert first.shape[0] == args.batch_size
    if recipe.startswith("vit"):
        assert first.shape[1:] == tuple(model.input_shape[1:])
        # the dataset flag reaches the recipe's parser, which picks the preset
        assert args.preset == {"vit_mnist": "vit_tiny", "vit_cifar10": "vit_hybrid_cifar"}[recipe]
    else:
        assert first.shape[1] == args.sequence_length and first.max() < args.vocabulary_size


def test_step_seconds_times_fit_steps():
    model, data, _ = recipe_steps.build("vit_mnist")
    seconds = recipe_steps.step_seconds(model, data, warmup=1, steps=2)
    assert 0 < seconds < 60
    assert model.optimizer.iterations.numpy() == 3  # warm-up + measured steps all ran through fit


def test_bad_flags_name_the_flag_and_the_value(capsys):
    with pytest.raises(SystemExit):
        recipe_steps.parse_args(["--recipes", "imdb,bogus"])
    assert "--recipes: unknown ['bogus']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe_steps.parse_args(["--steps", "0"])
    assert "--steps 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe_steps.parse_args(["--malloc", "keep,tcmalloc"])
    assert "--malloc: unknown ['tcmalloc']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe_steps.parse_args(["--dtype-policy", "float32,bfloat8"])
    assert "--dtype-policy: unknown ['bfloat8']" in capsys.readouterr().err


def test_each_recipe_is_built_under_the_workers_dtype_policy(monkeypatch, capsys):
    """`clear_session` after each recipe resets Keras's global policy: the worker sets it again."""
    seen = []

    def build(recipe, jit_compile):
        seen.append(keras.mixed_precision.global_policy().name)
        return None, [None], type("Args", (), {"preset": "vit_tiny"})

    monkeypatch.setattr(recipe_steps, "build", build)
    monkeypatch.setattr(recipe_steps, "step_seconds", lambda *args: 0.1)
    monkeypatch.setattr(recipe_steps, "_shape", lambda x: "1")
    monkeypatch.setattr(recipe_steps.encoder_throughput, "matmul_peak", lambda: 1.0)
    monkeypatch.setattr(recipe_steps.encoder_throughput, "set_process", lambda mode: None)
    try:
        recipe_steps.worker(recipe_steps.parse_args(["--worker", "--recipes", "vit_mnist,vit_mnist",
                                                     "--policy", "mixed_bfloat16"]))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert seen == ["mixed_bfloat16", "mixed_bfloat16"]
    assert '"policy": "mixed_bfloat16"' in capsys.readouterr().out


def test_report_has_a_row_per_malloc_setting():
    flops = {"gpt": {"train_flops": 36e9, "params": 1.44e6}}
    results = [{"backend": "jax", "jit_compile": "auto", "malloc": malloc, "policy": "float32",
                "peak_gflops": 400.0,
                "rows": {"gpt": {"seconds": seconds, "preset": "gpt_tiny", "shape": "32x128"}}}
               for malloc, seconds in (("default", 0.45), ("keep", 0.3))]
    table = recipe_steps.report(flops, results).splitlines()
    assert "| malloc |" in table[2]
    assert "| malloc | policy |" in table[2]
    assert table[4] == "| gpt | gpt_tiny | 32x128 | 1.44M | 36.00 | jax | auto | default | float32 | 450 | 80.0 | 20 % |"
    assert table[5] == "| gpt | gpt_tiny | 32x128 | 1.44M | 36.00 | jax | auto | keep | float32 | 300 | 120.0 | 30 % |"


@pytest.mark.parametrize("recipe", recipe_steps.RECIPES)
def test_recipe_defaults_are_the_recipes_own(recipe):
    """The benchmark keeps each recipe's defaults itself (it imports no recipe); the recipes' parsers agree."""
    import importlib

    module, argv = {"imdb": ("train_imdb", []), "translator": ("train_translator", []),
                    "vit_mnist": ("train_vit", ["--dataset", "mnist"]),
                    "vit_cifar10": ("train_vit", ["--dataset", "cifar10"]),
                    "mini_bert": ("pretrain_mini_bert", []), "gpt": ("train_gpt", [])}[recipe]
    parsed = importlib.import_module(f"recipes.{module}").parse_args([*argv, "--no-keep-freed-memory"])
    for name, value in recipe_steps.RECIPE_DEFAULTS[recipe].items():
        assert getattr(parsed, name) == value, name
    if recipe == "imdb":
        assert parsed.schedule == "constant"  # the benchmark's optimizer keeps the learning rate constant
