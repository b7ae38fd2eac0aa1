"""keras-io example "Automatic Speech Recognition using CTC" (Mohamed Reda Bouadjenek and Ngoc Dung Huynh,
2021), made small for a 2-core CPU.

Its design: an STFT magnitude spectrogram (frame 256, step 160, FFT 384
samples; magnitude ** 0.5, normalized per utterance), two 2D convolutions
(32 filters, kernels 11x41 strides 2x2 and 11x21 strides 1x2, each with
BatchNorm + ReLU), bidirectional GRUs, a ReLU Dense layer with dropout, a
linear output over the characters + the CTC blank, trained with the CTC loss
over every (padded) frame, Adam, greedy CTC decoding. Its published sizes (5
GRU layers of 512 units, Dense 1024: 26M parameters) are cut to 2 layers of
128 units and Dense 256 (`RNN_LAYERS`, `RNN_UNITS`, `DENSE_UNITS`). The
audio here is FSDD's 8 kHz (the example's LJSpeech is 22 kHz): the same frame
sizes in samples span 32 ms every 20 ms. Characters are the digits.
"""

import time

import keras
import numpy as np
from keras import layers, ops

FRAME_LENGTH, FRAME_STEP, FFT_LENGTH = 256, 160, 384
RNN_LAYERS, RNN_UNITS, DENSE_UNITS = 2, 128, 256
DIGITS = "0123456789"


def spectrogram(waveform):
    """float waveform -> normalized `(frames, FFT_LENGTH // 2 + 1)` magnitude ** 0.5, as the example."""
    import tensorflow as tf

    stft = tf.signal.stft(tf.constant(waveform), FRAME_LENGTH, FRAME_STEP, FFT_LENGTH)
    x = tf.math.pow(tf.abs(stft), 0.5)
    mean, std = tf.math.reduce_mean(x, 1, keepdims=True), tf.math.reduce_std(x, 1, keepdims=True)
    return ((x - mean) / (std + 1e-10)).numpy()


def batches(audio, texts, batch_size, shuffle=False, seed=0):
    """Padded `(spectrograms, labels)` numpy batches: frames padded with zeros, labels with 0 (ids 1-10)."""
    import tensorflow as tf

    features = [spectrogram(a) for a in audio]
    width = max(len(t) for t in texts)
    labels = np.zeros((len(texts), width), "int32")
    for row, text in enumerate(texts):
        labels[row, :len(text)] = [DIGITS.index(c) + 1 for c in text]
    ds = tf.data.Dataset.from_generator(lambda: iter(zip(features, labels)), output_signature=(
        tf.TensorSpec([None, FFT_LENGTH // 2 + 1], tf.float32), tf.TensorSpec([width], tf.int32)))
    ds = ds.cache()
    if shuffle:
        ds = ds.shuffle(len(texts), seed=seed, reshuffle_each_iteration=True)
    return ds.padded_batch(batch_size).prefetch(2)


def ctc_loss(y_true, y_pred):
    """The example's CTC over every padded frame (its `input_length` is the batch's frame count)."""
    batch, frames = ops.shape(y_pred)[0], ops.shape(y_pred)[1]
    labels = ops.cast(y_true, "int32")
    return ops.ctc_loss(labels, y_pred, ops.sum(ops.cast(labels > 0, "int32"), axis=1),
                        ops.full((batch,), frames, "int32"), mask_index=0)


def build():
    """The example's DeepSpeech2-like model at `RNN_LAYERS` x `RNN_UNITS`: logits `(batch, frames / 2, 11)`."""
    inputs = keras.Input((None, FFT_LENGTH // 2 + 1), name="input")
    x = layers.Reshape((-1, FFT_LENGTH // 2 + 1, 1))(inputs)
    x = layers.Conv2D(32, [11, 41], strides=[2, 2], padding="same", use_bias=False)(x)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    x = layers.Conv2D(32, [11, 21], strides=[1, 2], padding="same", use_bias=False)(x)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    x = layers.Reshape((-1, x.shape[-2] * x.shape[-1]))(x)
    for i in range(RNN_LAYERS):
        x = layers.Bidirectional(layers.GRU(RNN_UNITS, return_sequences=True), merge_mode="concat")(x)
        if i < RNN_LAYERS - 1:
            x = layers.Dropout(0.5)(x)
    x = layers.Dropout(0.5)(layers.Dense(DENSE_UNITS, activation="relu")(x))
    return keras.Model(inputs, layers.Dense(len(DIGITS) + 1)(x), name="keras_asr_ctc_example")


def decode(model, ds):
    """Greedy CTC transcripts of every batch of `ds` (the example decodes over all frames)."""
    texts = []
    for features, _ in ds:
        logits = ops.convert_to_numpy(model.predict_on_batch(features.numpy()))
        frames = np.full((logits.shape[0],), logits.shape[1], "int32")
        ids = ops.convert_to_numpy(ops.ctc_decode(logits, frames, strategy="greedy", mask_index=0)[0][0])
        texts += ["".join(DIGITS[i - 1] for i in row if i > 0) for row in ids]
    return texts


def run(train, validation, test, *, epochs=10, seed=1337, verbose=2, learning_rate=1e-3, batch_size=32):
    """Train on `(audio, transcripts)` splits; returns test digit error rate, utterance accuracy, times."""
    from recipes.train_speech import edit_distance

    start = time.time()
    keras.utils.set_random_seed(seed)
    model = build()
    model.compile(keras.optimizers.Adam(learning_rate), loss=ctc_loss)
    train_ds = batches(*train, batch_size, shuffle=True, seed=seed)
    val_ds = batches(*validation, batch_size)
    fit_start = time.time()
    model.fit(train_ds, validation_data=val_ds, epochs=epochs, verbose=verbose)
    fit_seconds = time.time() - fit_start
    hypotheses = decode(model, batches(*test, batch_size))
    references = test[1]
    errors = sum(edit_distance(r, h) for r, h in zip(references, hypotheses))
    return {"test_digit_error_rate": errors / sum(map(len, references)),
            "test_utterance_accuracy": float(np.mean([r == h for r, h in zip(references, hypotheses)])),
            "parameters": int(model.count_params()), "epochs": epochs, "fit_seconds": round(fit_seconds, 1),
            "seconds": round(time.time() - start, 1)}
