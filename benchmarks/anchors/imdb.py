"""Keras example "Text classification with Transformer" (Nandan, 2020) on raw IMDB text.

Its sizes: a 20,000-word `TextVectorization` vocabulary, 200 tokens, token +
learned position embeddings of dim 32, one post-norm block (2 heads of
key_dim 32, feed-forward 32, dropout 0.1), average pooling, Dense(20) and a
softmax over 2 classes; Adam 1e-3, batch 32, 2 epochs. The example reads
`keras.datasets.imdb`, whose `pad_sequences` keeps the *last* 200 words of a
review: `truncation="tail"` reproduces that on raw text, `"head"` keeps the
first 200 (what `TextVectorization(output_sequence_length=200)` does).
"""

import time

import keras
import numpy as np
from keras import layers

VOCABULARY_SIZE = 20_000
SEQUENCE_LENGTH = 200
EMBED_DIM, NUM_HEADS, FF_DIM = 32, 2, 32


def vectorize(vectorizer, texts, truncation, chunk=1000):
    """texts -> int [n, SEQUENCE_LENGTH], zero-padded after ("head") or before ("tail")."""
    out = np.zeros((len(texts), SEQUENCE_LENGTH), np.int32)
    for start in range(0, len(texts), chunk):
        ids = np.asarray(vectorizer(texts[start:start + chunk]))  # padded to the chunk's longest
        for row, seq in enumerate(ids, start):
            seq = seq[:np.count_nonzero(seq)]  # 0 pads only; out-of-vocabulary words are 1
            seq = seq[:SEQUENCE_LENGTH] if truncation == "head" else seq[-SEQUENCE_LENGTH:]
            if truncation == "head":
                out[row, :len(seq)] = seq
            elif len(seq):
                out[row, -len(seq):] = seq
    return out


class TokenAndPosition(layers.Layer):
    """int [batch, length] -> token + learned position embeddings [batch, length, dim]."""

    def __init__(self, length, vocabulary_size, dim, **kwargs):
        super().__init__(**kwargs)
        self.tokens = layers.Embedding(vocabulary_size, dim)
        self.positions = layers.Embedding(length, dim)

    def call(self, ids):
        return self.tokens(ids) + self.positions(keras.ops.arange(keras.ops.shape(ids)[-1]))


def post_norm_block(x, rate=0.1):
    attended = layers.MultiHeadAttention(NUM_HEADS, key_dim=EMBED_DIM)(x, x)
    x = layers.LayerNormalization(epsilon=1e-6)(x + layers.Dropout(rate)(attended))
    hidden = layers.Dense(EMBED_DIM)(layers.Dense(FF_DIM, activation="relu")(x))
    return layers.LayerNormalization(epsilon=1e-6)(x + layers.Dropout(rate)(hidden))


def build():
    inputs = keras.Input((SEQUENCE_LENGTH,), dtype="int32")
    x = post_norm_block(TokenAndPosition(SEQUENCE_LENGTH, VOCABULARY_SIZE, EMBED_DIM)(inputs))
    x = layers.Dropout(0.1)(layers.GlobalAveragePooling1D()(x))
    x = layers.Dropout(0.1)(layers.Dense(20, activation="relu")(x))
    model = keras.Model(inputs, layers.Dense(2, activation="softmax")(x), name="keras_example_imdb")
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def run(splits, *, epochs=2, truncation="tail", seed=1337, verbose=2):
    """Train on splits["train"], pick nothing on splits["validation"], score splits["test"].

    `splits`: {"train" | "validation" | "test": (texts, labels)}. Returns a dict
    with test_accuracy, the validation accuracy per epoch, fit_seconds and seconds.
    """
    keras.utils.set_random_seed(seed)
    start = time.time()
    vectorizer = layers.TextVectorization(VOCABULARY_SIZE)
    vectorizer.adapt(list(splits["train"][0]), batch_size=1024)
    x = {k: vectorize(vectorizer, list(texts), truncation) for k, (texts, _) in splits.items()}
    y = {k: np.asarray(labels, np.int32) for k, (_, labels) in splits.items()}
    model = build()
    fit_start = time.time()
    history = model.fit(x["train"], y["train"], batch_size=32, epochs=epochs,
                        validation_data=(x["validation"], y["validation"]), verbose=verbose)
    fit_seconds = time.time() - fit_start
    _, accuracy = model.evaluate(x["test"], y["test"], batch_size=256, verbose=0)
    return {"test_accuracy": round(float(accuracy), 4),
            "val_accuracy": [round(v, 4) for v in history.history["val_accuracy"]],
            "epochs": epochs, "fit_seconds": round(fit_seconds, 1), "seconds": round(time.time() - start, 1),
            "parameters": model.count_params(), "truncation": truncation}
