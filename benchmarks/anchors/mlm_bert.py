"""keras-io example "End-to-end Masked Language Modeling with BERT" (Singh, 2020; 2024 revision).

Its sizes: a 30,000-word `TextVectorization` vocabulary (lower-cased, <br />
and punctuation stripped) whose last id is [mask], 256 tokens, word +
learned position embeddings of dim 128, one post-norm block (8 heads of 16,
feed-forward 128, dropout 0.1), a softmax over the vocabulary at every
position; 15 % of tokens selected once (ids <= 2 never), 90 % of those
[mask]ed and a ninth of those then replaced by a random word; Adam 1e-3,
batch 32. Fine-tuning: max-pooled features -> Dense(64) -> sigmoid, first
with the backbone frozen, then unfrozen, Adam 1e-3 (the example: 5 + 5
epochs). Two departures so that the test split stays unseen: the example
learns its vocabulary and pretrains on the train *and test* reviews and
validates on test; here it uses the recipe's pretraining texts (train +
unlabeled) and validation split. Its summed loss becomes a mean (Adam is
invariant to the scale). Its keras-hub `PositionEmbedding` is the same
learned table written with keras alone (`LearnedPositions`), so `train` runs
on a machine with keras and numpy only (benchmarks/mlm_bert_gpu.py).
"""

import pathlib
import re
import time

import keras
import numpy as np
from keras import layers

VOCABULARY_SIZE, SEQUENCE_LENGTH = 30_000, 256
EMBED_DIM, NUM_HEADS, FF_DIM = 128, 8, 128
_PUNCTUATION = "[%s]" % re.escape("!#$%&'()*+,-./:;<=>?@\\^_`{|}~")


def standardize(texts):
    import tensorflow as tf

    texts = tf.strings.regex_replace(tf.strings.lower(texts), "<br />", " ")
    return tf.strings.regex_replace(texts, _PUNCTUATION, "")


def vectorizer(texts):
    """The example's `TextVectorization` over `texts`, with [mask] as its last id."""
    layer = layers.TextVectorization(VOCABULARY_SIZE, standardize=standardize,
                                     output_sequence_length=SEQUENCE_LENGTH)
    layer.adapt(texts, batch_size=1024)
    layer.set_vocabulary(layer.get_vocabulary()[2:VOCABULARY_SIZE - 1] + ["[mask]"])
    return layer


def encode(layer, texts, chunk=2000):
    return np.concatenate([np.asarray(layer(texts[i:i + chunk])) for i in range(0, len(texts), chunk)])


def mask(ids, mask_id, rng):
    """int [n, length] -> (masked inputs, labels, sample weights): the example's static masking."""
    selected = (rng.random(ids.shape) < 0.15) & (ids > 2)
    masked = ids.copy()
    to_mask = selected & (rng.random(ids.shape) < 0.90)
    masked[to_mask] = mask_id
    to_random = to_mask & (rng.random(ids.shape) < 1 / 9)
    masked[to_random] = rng.integers(3, mask_id, to_random.sum())
    return masked, ids, selected.astype("float32")


class LearnedPositions(layers.Layer):
    """[batch, length, dim] -> the same shape: a trainable [length, dim] table (glorot uniform), broadcast."""

    def build(self, input_shape):
        self.table = self.add_weight(shape=tuple(input_shape[1:]), initializer="glorot_uniform", name="table")

    def call(self, inputs):
        return keras.ops.broadcast_to(self.table, keras.ops.shape(inputs))


def backbone(vocabulary_size):
    """int [batch, 256] -> features [batch, 256, 128]: the example's one-block encoder."""
    inputs = keras.Input((SEQUENCE_LENGTH,), dtype="int32")
    x = layers.Embedding(vocabulary_size, EMBED_DIM)(inputs)
    x = x + LearnedPositions()(x)
    attended = layers.MultiHeadAttention(NUM_HEADS, key_dim=EMBED_DIM // NUM_HEADS)(x, x, x)
    x = layers.LayerNormalization(epsilon=1e-6)(x + layers.Dropout(0.1)(attended))
    hidden = layers.Dense(EMBED_DIM)(layers.Dense(FF_DIM, activation="relu")(x))
    x = layers.LayerNormalization(epsilon=1e-6)(x + layers.Dropout(0.1)(hidden))
    return keras.Model(inputs, x, name="keras_mlm_bert_backbone")


def classifier(encoder):
    inputs = keras.Input((SEQUENCE_LENGTH,), dtype="int32")
    pooled = layers.GlobalMaxPooling1D()(encoder(inputs))
    model = keras.Model(inputs, layers.Dense(1, activation="sigmoid")(layers.Dense(64, activation="relu")(pooled)))
    model.compile(keras.optimizers.Adam(), "binary_crossentropy", metrics=["accuracy"])
    return model


def vectorize(splits, unlabeled):
    """Texts -> the arrays `train` needs: {"pretraining": ids [n, 256], "<split>_ids", "<split>_labels"}.

    The vocabulary is learned on the pretraining texts: splits["train"] and
    `unlabeled` (TensorFlow's `TextVectorization`).
    """
    texts = list(splits["train"][0]) + list(unlabeled)
    layer = vectorizer(texts)
    ids = "uint16" if layer.vocabulary_size() <= 2**16 else "int32"
    arrays = {"pretraining": encode(layer, texts).astype(ids)}
    for split, (split_texts, labels) in splits.items():
        arrays[f"{split}_ids"] = encode(layer, list(split_texts)).astype(ids)
        arrays[f"{split}_labels"] = np.asarray(labels, "uint8")
    arrays["vocabulary_size"] = np.asarray(layer.vocabulary_size())
    return arrays


class TimeBudget(keras.callbacks.Callback):
    """Stop `fit` after the first epoch that ends past `seconds` of training (None: never)."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def on_train_begin(self, logs=None):
        self.start = time.time()

    def on_epoch_end(self, epoch, logs=None):
        if self.seconds is not None and time.time() - self.start >= self.seconds:
            self.model.stop_training = True


def train(arrays, *, epochs=5, finetune_epochs=2, pretrain_seconds=None, seed=1337, verbose=2, log_dir=None):
    """Pretrain on arrays["pretraining"] (5 % held out), fine-tune on the train split, score the test split.

    `finetune_epochs` are split as the example splits its 5 + 5: the first
    half with the backbone frozen, the rest unfrozen. `pretrain_seconds`
    stops pretraining after the epoch that passes it (an equal-time budget).
    `log_dir`: write pretrain_log.csv and finetune_log.csv (per epoch,
    held-out masked-token and validation accuracy) there.
    """
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    vocabulary_size = int(arrays["vocabulary_size"])
    mask_id = vocabulary_size - 1
    ids = arrays["pretraining"].astype("int32")
    cut = len(ids) - max(1, len(ids) // 20)  # 5 % held out for masked-token accuracy
    train_x, train_y, train_w = mask(ids[:cut], mask_id, rng)
    held_x, held_y, held_w = mask(ids[cut:], mask_id, rng)

    def logs(name, append=False):
        return [keras.callbacks.CSVLogger(str(pathlib.Path(log_dir) / name), append=append)] if log_dir else []

    encoder = backbone(vocabulary_size)
    inputs = keras.Input((SEQUENCE_LENGTH,), dtype="int32")
    mlm = keras.Model(inputs, layers.Dense(vocabulary_size, activation="softmax")(encoder(inputs)))
    mlm.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy",
                weighted_metrics=["sparse_categorical_accuracy"])
    fit_start = time.time()
    history = mlm.fit(train_x, train_y, sample_weight=train_w, batch_size=32, epochs=epochs, verbose=verbose,
                      validation_data=(held_x, held_y, held_w), validation_batch_size=64,
                      callbacks=[TimeBudget(pretrain_seconds), *logs("pretrain_log.csv")])
    pretrain_seconds = time.time() - fit_start
    epochs_run = len(history.epoch)
    masked_accuracy = history.history["val_sparse_categorical_accuracy"][-1]  # the final weights, held out

    x = {split: arrays[f"{split}_ids"].astype("int32") for split in ("train", "validation", "test")}
    y = {split: arrays[f"{split}_labels"].astype("float32") for split in ("train", "validation", "test")}
    frozen = max(1, finetune_epochs // 2) if finetune_epochs > 1 else 0
    tune_start = time.time()
    encoder.trainable = False
    model = classifier(encoder)
    if frozen:
        model.fit(x["train"], y["train"], batch_size=32, epochs=frozen,
                  validation_data=(x["validation"], y["validation"]), verbose=verbose,
                  callbacks=logs("finetune_log.csv"))
    encoder.trainable = True
    model.compile(keras.optimizers.Adam(), "binary_crossentropy", metrics=["accuracy"])
    model.fit(x["train"], y["train"], batch_size=32, epochs=finetune_epochs, initial_epoch=frozen,
              validation_data=(x["validation"], y["validation"]), verbose=verbose,
              callbacks=logs("finetune_log.csv", append=frozen > 0))  # one file: unfrozen epochs after frozen
    finetune_seconds = time.time() - tune_start
    _, accuracy = model.evaluate(x["test"], y["test"], batch_size=256, verbose=0)
    return {"test_accuracy": round(float(accuracy), 4), "masked_token_accuracy": round(float(masked_accuracy), 4),
            "epochs": epochs_run, "finetune_epochs": f"{frozen} frozen + {finetune_epochs - frozen}",
            "pretraining_texts": cut, "pretraining_steps": epochs_run * -(-cut // 32),
            "pretrain_seconds": round(pretrain_seconds, 1), "finetune_seconds": round(finetune_seconds, 1),
            "fit_seconds": round(pretrain_seconds + finetune_seconds, 1), "parameters": mlm.count_params()}


def run(splits, unlabeled, *, epochs=5, finetune_epochs=2, seed=1337, verbose=2):
    """Pretrain on train + `unlabeled` texts, fine-tune on splits["train"], score splits["test"]."""
    start = time.time()
    result = train(vectorize(splits, unlabeled), epochs=epochs, finetune_epochs=finetune_epochs, seed=seed,
                   verbose=verbose)
    return {**result, "seconds": round(time.time() - start, 1)}
