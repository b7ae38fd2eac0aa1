"""gpt_moe_tiny / CausalLM(num_experts=...): parameters, which blocks have experts, fit's routing logs,
save and reload, cached generation and the expert-load figure."""

import keras
import numpy as np
import pytest

from kformer import layers, models, viz
from tests.helpers import to_numpy

VOCAB, SEQ = 100, 16
SMALL = dict(vocabulary_size=VOCAB, sequence_length=SEQ, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32,
             expert_intermediate_dim=16, num_experts=4)
TOKENS = np.random.default_rng(0).integers(1, VOCAB, (8, SEQ + 1)).astype("int32")


def feed_forward_params(width, hidden, experts=0):
    """Dense: two kernels and biases; experts: that per expert (each `hidden` wide) plus the router."""
    one = width * hidden + hidden + hidden * width + width
    return one if not experts else experts * one + width * experts


def test_preset_has_the_expected_parameters_and_every_other_block_has_experts():
    dense = models.build("gpt_tiny", vocabulary_size=1000)
    moe = models.build("gpt_moe_tiny", vocabulary_size=1000)
    preset = models.get_preset("gpt_moe_tiny")
    assert (preset["num_experts"], preset["top_k"], preset["expert_intermediate_dim"]) == (8, 2, 256)
    assert [block.num_experts for block in moe.decoder_blocks] == [0, 8]
    assert [layer.name for layer in moe.experts] == ["mixture_of_experts"] and dense.experts == []
    trainable = sum(int(np.prod(w.shape)) for w in moe.trainable_weights)
    # gpt_tiny with its second feed-forward (128 -> 512 -> 128) replaced by 8 experts 128 -> 256 -> 128.
    assert trainable == dense.count_params() - feed_forward_params(128, 512) + feed_forward_params(128, 256, 8)
    assert trainable == 937_856  # with embeddings 1000 x 128 and 128 x 128, 2 blocks, final norm
    # Each token's 2 experts together are as wide as the dense feed-forward: the same FLOPs per token.
    assert preset["top_k"] * preset["expert_intermediate_dim"] == preset["intermediate_dim"]
    assert moe.count_params() - trainable == 2 * 8 + 1  # the recorded routing: routed, kept, balancing loss
    four = models.build("gpt_moe_tiny", vocabulary_size=50, num_layers=4)
    assert [block.num_experts for block in four.decoder_blocks] == [0, 8, 0, 8]


@pytest.fixture(scope="module")
def trained():
    keras.utils.set_random_seed(0)
    model = models.causal_lm(**SMALL, capacity_factor=0.5)  # capacity = ceil(0.5 * 2 * 16 / 4) = 4 of 32 choices
    model.compile(keras.optimizers.Adam(1e-3), models.SparseCrossEntropy(), metrics=[models.SparseAccuracy()])
    history = model.fit(TOKENS[:, :-1], TOKENS[:, 1:], validation_data=(TOKENS[:, :-1], TOKENS[:, 1:]),
                        batch_size=4, epochs=2, verbose=0)
    return model, history.history


def test_fit_reports_the_balancing_loss_and_dropped_tokens(trained):
    model, history = trained
    moe_keys = {"moe_balancing_loss", "moe_dropped_tokens", "moe_dropped_fraction"}
    assert moe_keys <= set(history) and not {f"val_{key}" for key in moe_keys} & set(history)
    assert all(len(history[key]) == 2 and np.all(np.isfinite(history[key])) for key in moe_keys)
    assert all(0.5 < v < 4.0 for v in history["moe_balancing_loss"])  # 1 = balanced, 4 = collapsed
    # 4 experts x 4 slots = 16 of a sequence's 32 choices at most: half or more are dropped, and the
    # count is the fraction of the 4 x 16 x 2 = 128 choices of each batch.
    assert all(f >= 0.5 for f in history["moe_dropped_fraction"])
    np.testing.assert_allclose(history["moe_dropped_tokens"], np.array(history["moe_dropped_fraction"]) * 128,
                               rtol=1e-5)
    stats = {k: to_numpy(v) for k, v in model.experts[0].routing_statistics().items()}
    assert stats["routed_tokens"].sum() == 128 and stats["kept_tokens"].sum() <= 4 * 16


def test_the_expert_load_figure_has_a_bar_pair_per_expert(trained):
    import matplotlib
    matplotlib.use("Agg")
    model, _ = trained
    fig = viz.plot_expert_load(model)
    assert len(fig.axes) == 1 and len(fig.axes[0].patches) == 2 * 4
    assert fig.axes[0].get_title().startswith("decoder_1: balancing loss")
    with pytest.raises(ValueError, match="no recorded routing"):
        viz.plot_expert_load(models.causal_lm(**SMALL))  # never trained
    with pytest.raises(ValueError, match="no mixture-of-experts layer"):
        viz.plot_expert_load(models.causal_lm(**{**SMALL, "num_experts": 0}))


def test_save_and_load_keep_the_outputs_and_the_expert_settings(trained, tmp_path):
    model, _ = trained
    model.save(tmp_path / "moe.keras")
    loaded = keras.saving.load_model(tmp_path / "moe.keras")
    assert [block.num_experts for block in loaded.decoder_blocks] == [0, 4]
    assert (loaded.top_k, loaded.capacity_factor, loaded.expert_intermediate_dim) == (2, 0.5, 16)
    assert isinstance(loaded.experts[0], layers.MixtureOfExperts)
    np.testing.assert_allclose(to_numpy(loaded(TOKENS[:2, :-1])), to_numpy(model(TOKENS[:2, :-1])), atol=1e-5)
    np.testing.assert_array_equal(to_numpy(loaded.experts[0].routed_tokens), to_numpy(model.experts[0].routed_tokens))


def test_inference_drops_no_token_so_cached_generation_equals_the_full_pass():
    keras.utils.set_random_seed(1)
    # capacity = ceil(0.5 * 2 * 16 / 4) = 4 of 32 choices: a training pass drops most of them; inference
    # routes every token to its experts, as a cached step (one token alone) always does.
    model = models.causal_lm(**SMALL, capacity_factor=0.5)
    tokens = TOKENS[:2, :SEQ]
    full = to_numpy(model(tokens))
    assert not np.allclose(to_numpy(model(tokens, training=True)), full, atol=1e-3)  # dropout is 0: the cut
    cache = model.empty_cache(2, SEQ, "float32")
    for t in range(SEQ):
        logits, cache = model.call_with_cache(tokens[:, t:t + 1], cache, t, {})
        np.testing.assert_allclose(to_numpy(logits)[:, -1, 1:], full[:, t, 1:], atol=1e-4)  # id 0: padding, banned
    prompts = np.array([[5, 9, 12, 7], [5, 30, 0, 0]], "int32")
    cached = model.generate(prompts, max_length=8)
    assert cached.shape == (2, 8) and np.all((cached[:, 4:] > 0) & (cached[:, 4:] < VOCAB))
    np.testing.assert_array_equal(cached[:, :2], prompts[:, :2])
    np.testing.assert_array_equal(model.generate(prompts, max_length=8, use_cache=False), cached)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_experts": -1}, "num_experts=-1"),
    ({"num_experts": 2, "top_k": 3}, "top_k=3"),
    ({"moe_every": 0}, "moe_every=0"),
    ({"expert_intermediate_dim": 0}, "expert_intermediate_dim=0"),
    ({"capacity_factor": 0}, "capacity_factor=0"),
])
def test_bad_expert_settings_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        models.causal_lm(**{**SMALL, **kwargs})
