import numpy as np
import pytest

from kformer.layers import MixtureOfExperts
from tests.helpers import run_layer_test, to_numpy

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 6, 8)).astype("float32")
PADDING = np.array([[True] * 6, [True] * 3 + [False] * 3])


def test_moe_layer(tmp_path):
    run_layer_test(MixtureOfExperts, {"num_experts": 4, "intermediate_dim": 16, "top_k": 2},
                   X, (2, 6, 8), padding_mask=PADDING, tmp_path=tmp_path)


def _expert(layer, e, x):
    w1, b1, w2, b2 = (to_numpy(w)[e] for w in (layer.inner_kernel, layer.inner_bias,
                                                layer.outer_kernel, layer.outer_bias))
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


@pytest.mark.parametrize("top_k", [1, 2])
def test_every_token_goes_to_its_top_k_experts(top_k):
    layer = MixtureOfExperts(4, 16, top_k=top_k, capacity_factor=4.0)
    out = to_numpy(layer(X))
    routing = {k: to_numpy(v) for k, v in layer.route(X).items()}
    expected_index = np.argsort(-routing["router_probs"], axis=-1)[..., :top_k]
    np.testing.assert_array_equal(np.sort(routing["expert_index"], -1), np.sort(expected_index, -1))
    np.testing.assert_allclose(routing["dispatch"].sum(axis=(2, 3)), top_k)
    for b in range(2):
        for s in range(6):
            chosen = set(np.nonzero(routing["dispatch"][b, s].sum(-1))[0])
            assert chosen == set(expected_index[b, s])
            manual = sum(g * _expert(layer, e, X[b, s])
                         for g, e in zip(routing["gates"][b, s], routing["expert_index"][b, s]))
            np.testing.assert_allclose(out[b, s], manual, atol=1e-4)
    if top_k == 2:
        np.testing.assert_allclose(routing["gates"].sum(-1), 1.0, rtol=1e-6)


def test_tokens_over_capacity_are_dropped_in_training_only():
    layer = MixtureOfExperts(2, 8, capacity_factor=0.5)  # capacity = ceil(0.5 * 6 / 2) = 2
    layer(X)
    layer.router.set_weights([np.concatenate([np.ones((8, 1)), -np.ones((8, 1))], 1) * 0])
    routing = {k: to_numpy(v) for k, v in layer.route(X, training=True).items()}
    assert routing["dispatch"].shape[-1] == 2
    kept = routing["dispatch"].sum(axis=(2, 3))  # ties route every token to expert 0
    np.testing.assert_array_equal(kept, [[1, 1, 0, 0, 0, 0]] * 2)
    out = to_numpy(layer(X, training=True))
    np.testing.assert_allclose(out[:, 2:], 0.0)
    # Outside training every token reaches its expert: each output is expert 0's on that token alone,
    # times its gate (0.5: the zero router's probability).
    assert to_numpy(layer.route(X)["dispatch"]).sum(axis=(2, 3)).tolist() == [[1.0] * 6] * 2
    inference = to_numpy(layer(X))
    np.testing.assert_allclose(inference, 0.5 * _expert(layer, 0, X), atol=1e-5)
    np.testing.assert_allclose(inference[:, :2], out[:, :2], atol=1e-6)


def _loss_for_router(kernel, x):
    layer = MixtureOfExperts(4, 8, aux_loss_weight=1.0)
    layer(x)
    layer.router.set_weights([kernel])
    layer(x)
    (loss,) = layer.losses
    return float(to_numpy(loss))


def test_balancing_loss_is_one_when_balanced_and_num_experts_when_collapsed():
    x = np.tile(np.eye(4, dtype="float32"), (2, 2, 1))  # (2, 8, 4): each expert's token twice
    assert _loss_for_router(np.eye(4, dtype="float32") * 50, x) == pytest.approx(1.0, abs=1e-4)
    collapsed = np.zeros((4, 4), "float32")
    collapsed[:, 0] = 50
    assert _loss_for_router(collapsed, x + 1) == pytest.approx(4.0, abs=1e-4)
    partial = np.eye(4, dtype="float32") * 50
    partial[:, 0] += 1  # ties broken towards expert 0 would not change this: balanced routing
    skewed = np.eye(4, dtype="float32") * 50
    skewed[1, 0] = 100  # expert 1's tokens now go to expert 0
    assert _loss_for_router(skewed, x) > 1.2


def test_padded_tokens_are_not_routed():
    layer = MixtureOfExperts(4, 8, top_k=2, capacity_factor=4.0)
    layer(X)
    dispatch = to_numpy(layer.route(X, PADDING)["dispatch"])
    np.testing.assert_allclose(dispatch.sum(axis=(2, 3)), PADDING * 2.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_experts": 0, "intermediate_dim": 8}, "num_experts=0"),
    ({"num_experts": 2, "intermediate_dim": 8, "top_k": 3}, "top_k=3"),
    ({"num_experts": 2, "intermediate_dim": 8, "capacity_factor": 0}, "capacity_factor=0"),
])
def test_moe_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MixtureOfExperts(**kwargs)


def test_causal_routing_never_lets_a_later_token_change_an_earlier_output():
    # Small capacity, so that tokens are dropped; a change at position 4 may only change positions >= 4.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 12, 8)).astype("float32")
    changed = x.copy()
    changed[:, 4:] = rng.normal(size=(3, 8, 8))
    causal = MixtureOfExperts(4, 16, top_k=2, capacity_factor=0.5, causal=True)
    before, after = to_numpy(causal(x, training=True)), to_numpy(causal(changed, training=True))
    np.testing.assert_allclose(after[:, :4], before[:, :4], atol=1e-6)
    # GShard's order (first choices first) is not causal: a later first choice can take an earlier token's slot
    by_rank = MixtureOfExperts(4, 16, top_k=2, capacity_factor=0.5)
    by_rank.build(x.shape)
    for weights_from, weights_to in zip(causal.weights, by_rank.weights):
        weights_to.assign(weights_from)
    assert not np.allclose(to_numpy(by_rank(changed, training=True))[:, :4],
                           to_numpy(by_rank(x, training=True))[:, :4], atol=1e-6)
    assert MixtureOfExperts.from_config(causal.get_config()).causal


def test_decoder_blocks_route_causally_and_encoder_blocks_do_not():
    from kformer.blocks import TransformerDecoderBlock, TransformerEncoderBlock

    decoder = TransformerDecoderBlock(2, 16, num_experts=4, top_k=2)
    encoder = TransformerEncoderBlock(2, 16, num_experts=4, top_k=2)
    decoder(X), encoder(X)
    assert decoder.feed_forward.causal and not encoder.feed_forward.causal


@pytest.mark.parametrize("initializer", ["glorot_uniform", "he_normal", "lecun_normal"])
def test_each_expert_is_initialized_as_a_dense_kernel_of_its_shape(initializer):
    import keras

    layer = MixtureOfExperts(num_experts=8, intermediate_dim=64, kernel_initializer=initializer)
    layer.build((2, 6, 32))

    def dense_std(fan_in, fan_out):
        dense = keras.layers.Dense(fan_out, kernel_initializer=initializer)
        dense.build((None, fan_in))
        return to_numpy(dense.kernel).std()

    for kernel, want in ((layer.inner_kernel, dense_std(32, 64)), (layer.outer_kernel, dense_std(64, 32))):
        np.testing.assert_allclose(to_numpy(kernel).std(axis=(1, 2)), want, rtol=0.1)  # 2,048 draws an expert
    fixed = MixtureOfExperts(num_experts=8, intermediate_dim=64,
                             kernel_initializer=keras.initializers.RandomNormal(stddev=0.02))
    fixed.build((2, 6, 32))
    np.testing.assert_allclose(to_numpy(fixed.inner_kernel).std(), 0.02, rtol=0.05)  # no fans: left alone
