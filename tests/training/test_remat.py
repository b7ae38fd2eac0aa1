"""`models.remat_blocks()`: the blocks of a task built under it are rematerialized (and only they), and one
training step gives the same weights as without. Run it under each KERAS_BACKEND."""

import keras
import numpy as np
import pytest

from kformer import models
from tests.models.cases import random_inputs, small_model


def build(name):
    return small_model(name, dropout=0.0)  # no random draws: both steps compute the same


def batch(name, model):
    data = random_inputs(model, batch=4)  # the last row padded: masks cross the checkpoint
    labels = (np.arange(4) % model.num_classes if name == "imdb_tiny"
              else data["decoder_token_ids"] if name == "transformer_tiny" else data["token_ids"])
    return data, labels, keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.mark.parametrize("name", ["imdb_tiny", "gpt_tiny", "transformer_tiny"])
def test_a_step_with_rematerialized_blocks_gives_the_same_weights(name):
    keras.utils.set_random_seed(0)
    plain = build(name)
    with models.remat_blocks():
        remat = build(name)
    remat.set_weights(plain.get_weights())
    start = plain.get_weights()
    checkpointed = sorted(layer.name for layer in remat._flatten_layers()
                          if layer._remat_mode is not None and layer.name in layer._remat_mode.layer_names)
    assert checkpointed and all(n.startswith(("encoder_", "decoder_")) for n in checkpointed)
    assert all(layer._remat_mode is None for layer in plain._flatten_layers())
    data, labels, loss = batch(name, plain)
    for task in (plain, remat):  # plain SGD: the step is the gradient itself
        task.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
        task.train_on_batch(data, labels)
    for a, b in zip(plain.weights, remat.weights):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6, err_msg=a.path)
    assert any(not np.allclose(np.asarray(a), b) for a, b in zip(plain.weights, start))  # the step moved them


@pytest.mark.once("a construction-time check")
def test_blocks_that_cannot_be_rematerialized_are_refused_or_left_out():
    with models.remat_blocks(), pytest.raises(ValueError, match="experts, whose load-balancing loss"):
        small_model("gpt_moe_tiny", dropout=0.0)
    with models.remat_blocks(), pytest.raises(ValueError, match="'encoder_0' has dropout=0.1: the recomputation"):
        small_model("imdb_tiny", dropout=0.1)
    with models.remat_blocks():  # batch-norm statistics: the Conformer's blocks are not named by the scope
        speech = small_model("conformer_speech_tiny")
    assert not [layer.name for layer in speech._flatten_layers()
                if layer._remat_mode is not None and layer.name in layer._remat_mode.layer_names]
