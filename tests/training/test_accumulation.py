"""Gradient accumulation: `k` batches of `b` update the weights as one batch of `k * b`, also across a resume."""

import keras
import numpy as np
import pytest

from kformer import models
from kformer.training import accumulating, adamw
from recipes import common, pretrain_mini_bert, train_gpt, train_imdb, train_speech, train_translator, train_vit
from recipes.backup import AtomicBackupAndRestore
from tests.models.cases import small_model

RNG = np.random.default_rng(0)
TOKENS = RNG.integers(3, 40, (24, 12)).astype("int32")
LABELS = RNG.integers(0, 2, (24,)).astype("int32")


def classifier(optimizer):
    keras.utils.set_random_seed(0)
    model = small_model("imdb_tiny", dropout=0.0)
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def weights(model):
    return [np.asarray(w) for w in model.weights]


def assert_same_weights(a, b):
    for x, y in zip(weights(a), weights(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def optimizer():
    # SGD: Adam's first steps divide each gradient by its own size, so float noise in the many near-zero
    # gradients would decide the comparison. No clipping: on TensorFlow, Keras takes the norm of an
    # embedding's sparse gradient over its rows before repeated tokens' rows are summed, so the one-batch
    # side would clip by another norm than the accumulated (dense) mean.
    return keras.optimizers.SGD(0.5, momentum=0.9, weight_decay=0.01)


def test_k_batches_of_b_update_as_one_batch_of_k_times_b():
    big = classifier(optimizer())
    big.fit(TOKENS, LABELS, batch_size=12, epochs=1, shuffle=False, verbose=0)  # two updates
    small = classifier(accumulating(optimizer(), 3))
    small.fit(TOKENS, LABELS, batch_size=4, epochs=1, shuffle=False, verbose=0)  # six batches, two updates
    assert int(small.optimizer.iterations) == 2
    assert_same_weights(small, big)
    untouched = classifier(accumulating(optimizer(), 3))
    untouched.fit(TOKENS[:8], LABELS[:8], batch_size=4, epochs=1, shuffle=False, verbose=0)  # a group unfinished
    assert_same_weights(untouched, classifier(optimizer()))


def test_a_run_stopped_mid_group_resumes_to_the_same_weights(tmp_path):
    """Epochs of 3 batches, groups of 2: the backup after epoch 1 holds half a group's gradients."""
    whole = classifier(accumulating(optimizer(), 2))
    whole.fit(TOKENS, LABELS, batch_size=8, epochs=2, shuffle=False, verbose=0)

    class Stop(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise KeyboardInterrupt  # after the backup callback ran, as a crash then would

    stopped = classifier(accumulating(optimizer(), 2))
    with pytest.raises(KeyboardInterrupt):
        stopped.fit(TOKENS, LABELS, batch_size=8, epochs=2, shuffle=False, verbose=0,
                    callbacks=[AtomicBackupAndRestore(tmp_path / "backup"), Stop()])
    resumed = classifier(accumulating(optimizer(), 2))
    history = resumed.fit(TOKENS, LABELS, batch_size=8, epochs=2, shuffle=False, verbose=0,
                          callbacks=[AtomicBackupAndRestore(tmp_path / "backup")])
    assert history.epoch == [1]
    assert int(resumed.optimizer.iterations) == 3
    assert_same_weights(resumed, whole)


@pytest.mark.once("argument checks and Keras's optimizer config, no step taken")
def test_accumulating_keeps_the_optimizer_and_names_bad_arguments():
    schedule = models.warmup_cosine(1e-3, 100)
    optimizer = accumulating(keras.optimizers.AdamW(schedule, weight_decay=0.05, beta_2=0.95, clipnorm=1.0), 4)
    assert (type(optimizer), optimizer.gradient_accumulation_steps, optimizer.weight_decay, optimizer.beta_2,
            optimizer.clipnorm, optimizer._learning_rate) == (keras.optimizers.AdamW, 4, 0.05, 0.95, 1.0, schedule)
    assert adamw(1e-3, 100, gradient_accumulation_steps=2).gradient_accumulation_steps == 2
    plain = keras.optimizers.SGD()
    assert accumulating(plain, 1) is plain
    for bad in (0, 2.0, True, "2"):
        with pytest.raises(ValueError, match=rf"`gradient_accumulation_steps` must be an int >= 1. Received: "
                                             rf"gradient_accumulation_steps={bad!r}"):
            accumulating(plain, bad)
    with pytest.raises(ValueError, match="`optimizer` must be a Keras optimizer"):
        accumulating("adam", 2)
    plain.build([keras.Variable(1.0)])
    with pytest.raises(ValueError, match="already updated weights"):
        accumulating(plain, 2)


@pytest.mark.once("argparse and an optimizer's config, no step taken")
@pytest.mark.parametrize("recipe", [train_imdb, train_translator, pretrain_mini_bert, train_gpt, train_vit, train_speech],
                         ids=lambda recipe: recipe.__name__.split(".")[-1])
def test_every_recipe_takes_gradient_accumulation_steps(recipe, tmp_path):
    args = recipe.parse_args([f"--output-dir={tmp_path}", "--gradient-accumulation-steps=3"])
    assert common.accumulated(args, keras.optimizers.Adam()).gradient_accumulation_steps == 3
    assert recipe.parse_args([f"--output-dir={tmp_path}"]).gradient_accumulation_steps == 1
