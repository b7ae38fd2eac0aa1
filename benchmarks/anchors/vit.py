"""keras-io example "Image classification with Vision Transformer" (Salama, 2021; current revision).

Its sizes: images normalized and resized to 72x72, 6x6 patches (144), patch
projection + learned positions of dim 256 (64 per head x 4 heads), 8
pre-norm blocks (attention with key_dim 64 and dropout 0.1, GELU MLP 512 ->
256 with dropout 0.1), a final LayerNorm, the flattened 144 x 256 features
through a GELU MLP head 2048 -> 1024 with dropout 0.5; AdamW (1e-3, weight
decay 1e-4), batch 256, the checkpoint with the best validation accuracy is
tested. Augmentation: random horizontal flip, rotation 0.02, zoom 0.2; on
MNIST the flip is left out (a mirrored digit is another symbol).
"""

import os
import tempfile
import time

import keras
import numpy as np
from keras import layers

IMAGE_SIZE, PATCH_SIZE = 72, 6
NUM_PATCHES = (IMAGE_SIZE // PATCH_SIZE) ** 2
HEAD_DIM, NUM_HEADS, NUM_BLOCKS = 64, 4, 8
HIDDEN_DIM = HEAD_DIM * NUM_HEADS
HEAD_UNITS = (2048, 1024)


class PatchesWithPositions(layers.Layer):
    """float [batch, 72, 72, c] -> projected patches + learned positions [batch, 144, HIDDEN_DIM]."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.projection = layers.Dense(HIDDEN_DIM)
        self.positions = layers.Embedding(NUM_PATCHES, HIDDEN_DIM)

    def call(self, images):
        patches = keras.ops.image.extract_patches(images, PATCH_SIZE)  # [batch, 12, 12, 36 * c]
        patches = keras.ops.reshape(patches, (-1, NUM_PATCHES, patches.shape[-1]))
        return self.projection(patches) + self.positions(keras.ops.arange(NUM_PATCHES))


def mlp(x, units, rate):
    for n in units:
        x = layers.Dropout(rate)(layers.Dense(n, activation="gelu")(x))
    return x


def jit_compile(flag):
    """A `--jit-compile` flag for a model holding random image layers: "auto" means compiled on JAX."""
    if flag == "auto":
        return True if keras.backend.backend() == "jax" else "auto"
    return flag


def compile_augmentation(model):
    """Let `model`'s random image layers be XLA-compiled: JAX only.

    Keras marks RandomTranslation, RandomRotation and RandomZoom as not
    XLA-compilable (TensorFlow had no XLA kernel for their image transform,
    tensorflow/tensorflow#100865), so a model holding them runs op by op
    even with `jit_compile=True`; on JAX they are plain jax.numpy and compile.
    """
    if keras.backend.backend() != "jax":
        raise ValueError("compile_augmentation is for the JAX backend: TensorFlow's XLA cannot compile the "
                         f"random image layers. Received: backend={keras.backend.backend()!r}")
    for layer in model._flatten_layers():
        if isinstance(layer, (keras.layers.RandomTranslation, keras.layers.RandomRotation,
                              keras.layers.RandomZoom)):
            layer.supports_jit = True


def build(train_images, num_classes, flip=True, jit_compile="auto"):
    """The example's classifier, its Normalization adapted to `train_images` (uint8 [n, h, w, c]).

    Keras marks its random rotation and zoom layers as not XLA-compilable, so
    `"auto"` runs the step op by op; on JAX they compile: `jit_compile=True`
    compiles the whole step there (`compile_augmentation`).
    """
    normalize = layers.Normalization()
    normalize.adapt(train_images.astype("float32"))
    augment = [layers.RandomFlip("horizontal")] if flip else []
    augment += [layers.RandomRotation(0.02), layers.RandomZoom(0.2, 0.2)]
    inputs = keras.Input(train_images.shape[1:])
    x = keras.Sequential([normalize, layers.Resizing(IMAGE_SIZE, IMAGE_SIZE), *augment])(inputs)
    x = PatchesWithPositions()(x)
    for _ in range(NUM_BLOCKS):
        h = layers.LayerNormalization(epsilon=1e-6)(x)
        x = x + layers.MultiHeadAttention(NUM_HEADS, key_dim=HEAD_DIM, dropout=0.1)(h, h)
        x = x + mlp(layers.LayerNormalization(epsilon=1e-6)(x), (HIDDEN_DIM * 2, HIDDEN_DIM), 0.1)
    x = layers.Dropout(0.5)(layers.Flatten()(layers.LayerNormalization(epsilon=1e-6)(x)))
    model = keras.Model(inputs, layers.Dense(num_classes)(mlp(x, HEAD_UNITS, 0.5)), name="keras_io_vit")
    if jit_compile is True:
        compile_augmentation(model)
    model.compile(keras.optimizers.AdamW(1e-3, weight_decay=1e-4),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
                           keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5")],
                  jit_compile=jit_compile)
    return model


def run(train, validation, test, dataset, *, epochs=10, seed=1337, verbose=2, jit_compile="auto"):
    """Train on `train` ((uint8 images, labels)), keep the best on `validation`, score `test`."""
    keras.utils.set_random_seed(seed)
    start = time.time()
    model = build(train[0], int(max(train[1].max(), test[1].max())) + 1, flip=dataset != "mnist",
                  jit_compile=jit_compile)
    with tempfile.TemporaryDirectory() as tmp:
        best = os.path.join(tmp, "best.weights.h5")
        fit_start = time.time()
        history = model.fit(train[0].astype("float32"), train[1], batch_size=256, epochs=epochs,
                            validation_data=(validation[0].astype("float32"), validation[1]), verbose=verbose,
                            callbacks=[keras.callbacks.ModelCheckpoint(best, monitor="val_accuracy",
                                                                       save_best_only=True, save_weights_only=True)])
        fit_seconds = time.time() - fit_start
        model.load_weights(best)
    _, top1, top5 = model.evaluate(test[0].astype("float32"), test[1], batch_size=256, verbose=0)
    return {"test_top1": round(float(top1), 4), "test_top5": round(float(top5), 4),
            "val_accuracy": [round(v, 4) for v in history.history["val_accuracy"]], "epochs": epochs,
            "fit_seconds": round(fit_seconds, 1), "seconds": round(time.time() - start, 1),
            "parameters": model.count_params()}
