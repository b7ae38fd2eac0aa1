"""`models.layout_map`: Megatron-style weight splits for `keras.distribution.ModelParallel`."""

import os
import subprocess
import sys

import keras
import pytest

from kformer import models
from tests.models.cases import small_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mesh(model_devices):  # named devices are enough to build a layout map (nothing is placed)
    return keras.distribution.DeviceMesh((1, model_devices), ["batch", "model"],
                                         [f"cpu:{i}" for i in range(model_devices)])


def test_paper_preset_splits_attention_by_head_and_the_feed_forward_megatron_style():
    layout = models.layout_map("transformer_base", mesh(8))
    expected = {
        "decoder_5/cross_attention/key/kernel": (None, "model", None),  # column split (heads)
        "encoder_0/self_attention/value/bias": ("model", None),
        "encoder_0/self_attention/attention_output/kernel": ("model", None, None),  # row split
        "decoder_0/feed_forward/mlp_in/kernel": (None, "model"),
        "decoder_0/feed_forward/mlp_in/bias": ("model",),
        "decoder_0/feed_forward/mlp_out/kernel": ("model", None),
        "shared_embedding/token_embedding/embeddings": (None, "model"),  # any vocabulary size
        "vit/encoder_0/moe/inner_kernel": ("model", None, None),  # experts
    }
    for path, axes in expected.items():
        assert tuple(layout[path].axes) == axes, path
    for replicated in ("encoder_0/self_attention_norm/gamma", "encoder_0/self_attention/attention_output/bias",
                       "embedding/position_embedding/embeddings", "logits/kernel"):
        assert layout[replicated] is None, replicated


def test_every_weight_of_each_family_matches_at_most_one_rule():
    layout = models.layout_map("gpt_tiny", mesh(2))
    for preset in ("transformer_tiny", "bert_tiny", "vit_tiny", "gpt_tiny"):
        model = small_model(preset)
        split = [w.path for w in model.weights if layout[w.path] is not None]  # raises on two matches
        assert any(p.endswith("query/kernel") for p in split) and any(p.endswith("mlp_out/kernel") for p in split)


def test_sizes_that_do_not_split_are_named():
    with pytest.raises(ValueError, match=r"`num_heads` must split evenly over the 3 devices.*num_heads=8"):
        models.layout_map("transformer_base", mesh(3))
    with pytest.raises(ValueError, match=r"`intermediate_dim` must split.*intermediate_dim=33"):
        models.layout_map(small_model("gpt_tiny", intermediate_dim=33), mesh(2))
    with pytest.raises(ValueError, match="`model_axis` must be one of"):
        models.layout_map("gpt_tiny", mesh(2), model_axis="tensor")
    with pytest.raises(TypeError, match="`mesh` must be a keras.distribution.DeviceMesh"):
        models.layout_map("gpt_tiny", (2, 4))
    with pytest.raises(TypeError, match="`model_or_preset` must be"):
        models.layout_map(3, mesh(2))


@pytest.mark.only_backend("jax")
def test_sharded_training_step_equals_the_unsharded_one_on_8_simulated_devices():
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3",
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8")
    result = subprocess.run([sys.executable, "-W", "ignore", "-m", "tests.models.model_parallel_check"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for preset in ("transformer_tiny", "bert_tiny", "vit_tiny", "gpt_tiny"):
        assert f"OK {preset}" in result.stdout, result.stdout


@pytest.mark.only_backend("jax")
def test_two_processes_train_as_one_with_keras_distribution_initialize():
    import socket

    with socket.socket() as s:  # a free port for the coordinator
        s.bind(("localhost", 0))
        port = str(s.getsockname()[1])
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-W", "ignore", "-m", "tests.models.multi_process_check"]
    workers = [subprocess.Popen(command + [str(i), port], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    try:
        reference = subprocess.run(command + ["reference"], cwd=ROOT, env=env, capture_output=True, text=True,
                                   timeout=300)
        results = []
        for worker in workers:
            out, err = worker.communicate(timeout=300)
            assert worker.returncode == 0, err[-3000:]
            results.append(out)
    finally:
        for worker in workers:
            worker.kill()  # a no-op once it has exited; never leave a waiting peer behind
    assert reference.returncode == 0, reference.stderr[-3000:]
    lines = [next(line for line in out.splitlines() if line.startswith("RESULT")).split()
             for out in results + [reference.stdout]]
    losses = {float(line[1].split("=")[1]) for line in lines}
    weights = [float(line[2].split("=")[1]) for line in lines]
    assert len(losses) == 1, lines  # the global batch's mean loss, in each process and in one
    assert max(weights) - min(weights) < 1e-4 * max(weights), lines
