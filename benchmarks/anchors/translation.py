"""keras-hub example "English-to-Spanish translation with KerasHub" (Sharma, 2022; 2024 revision).

Its sizes: lower-cased text, WordPiece vocabularies of 15,000 per language
(`keras_hub.tokenizers.compute_word_piece_vocabulary`, reserved [PAD] [UNK]
[START] [END]), 40 tokens, `keras_hub.layers` TokenAndPositionEmbedding of
dim 256, one TransformerEncoder and one TransformerDecoder (8 heads,
intermediate 2048), dropout 0.5 before a softmax over the Spanish
vocabulary; RMSprop, batch 64 (1 epoch in the example, "at least 10" to
converge). Greedy decoding with `keras_hub.samplers.GreedySampler`, which
reruns the whole model each step as the example does. The example scores 30
test sentences with ROUGE; here every test pair is scored with sacrebleu
like the recipe, on the detokenizer's output as the example leaves it
("¿ qué es esto ?") and with punctuation re-attached as kformer's
detokenizer does.
"""

import re
import time

import keras
import numpy as np

VOCABULARY_SIZE = 15_000
SEQUENCE_LENGTH = 40
EMBED_DIM, INTERMEDIATE_DIM, NUM_HEADS = 256, 2048, 8
RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]


def attach_punctuation(text):
    """'¿ qué es esto ?' -> '¿qué es esto?' (the rules of kformer's WordPiece detokenizer)."""
    text = re.sub(r" ([.,!?;:%)\]}])", r"\1", " ".join(text.split()))
    text = re.sub(r"([¿¡(\[{]) ", r"\1", text)
    return re.sub(r"(\w) ' (\w)", r"\1'\2", text).strip()


def _tokenizer(texts):
    import keras_hub
    import tensorflow as tf

    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        tf.data.Dataset.from_tensor_slices(texts).batch(1000), vocabulary_size=VOCABULARY_SIZE,
        reserved_tokens=RESERVED)
    return keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary, lowercase=False)


def _dataset(source_tokenizer, target_tokenizer, sources, targets, shuffle, seed):
    import keras_hub
    import tensorflow as tf

    source_packer = keras_hub.layers.StartEndPacker(SEQUENCE_LENGTH, pad_value=0)
    target_packer = keras_hub.layers.StartEndPacker(SEQUENCE_LENGTH + 1, start_value=2, end_value=3, pad_value=0)

    def pack(source, target):
        target = target_packer(target_tokenizer(target))
        return {"encoder_inputs": source_packer(source_tokenizer(source)),
                "decoder_inputs": target[:, :-1]}, target[:, 1:]

    ds = tf.data.Dataset.from_tensor_slices((sources, targets)).batch(64).map(pack, tf.data.AUTOTUNE).cache()
    return (ds.shuffle(2048, seed=seed) if shuffle else ds).prefetch(16)


def build(source_vocabulary_size, target_vocabulary_size):
    import keras_hub

    encoder_inputs = keras.Input((None,), name="encoder_inputs")
    x = keras_hub.layers.TokenAndPositionEmbedding(source_vocabulary_size, SEQUENCE_LENGTH, EMBED_DIM)(
        encoder_inputs)
    encoded = keras_hub.layers.TransformerEncoder(INTERMEDIATE_DIM, NUM_HEADS)(x)
    decoder_inputs = keras.Input((None,), name="decoder_inputs")
    x = keras_hub.layers.TokenAndPositionEmbedding(target_vocabulary_size, SEQUENCE_LENGTH, EMBED_DIM)(
        decoder_inputs)
    x = keras_hub.layers.TransformerDecoder(INTERMEDIATE_DIM, NUM_HEADS)(decoder_sequence=x, encoder_sequence=encoded)
    outputs = keras.layers.Dense(target_vocabulary_size, activation="softmax")(keras.layers.Dropout(0.5)(x))
    model = keras.Model([encoder_inputs, decoder_inputs], outputs, name="keras_hub_example_translator")
    model.compile("rmsprop", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def translate(model, source_tokenizer, target_tokenizer, sources, batch_size=256):
    """Greedy translations of `sources` (list[str]) as the example decodes them (no cache)."""
    import keras_hub

    sampler = keras_hub.samplers.GreedySampler()
    packer = keras_hub.layers.StartEndPacker(SEQUENCE_LENGTH, pad_value=0)
    outputs = []
    for start in range(0, len(sources), batch_size):
        encoder_ids = keras.ops.convert_to_tensor(packer(source_tokenizer(sources[start:start + batch_size])))
        n = keras.ops.shape(encoder_ids)[0]
        prompt = np.zeros((n, SEQUENCE_LENGTH), "int32")
        prompt[:, 0] = 2  # [START], then [PAD]s

        def next_token(prompt, cache, index):
            return model([encoder_ids, prompt], training=False)[:, index - 1, :], None, cache

        ids = sampler(next_token, keras.ops.convert_to_tensor(prompt), stop_token_ids=[3], index=1)
        for text in target_tokenizer.detokenize(ids):
            text = text.numpy().decode() if hasattr(text, "numpy") else str(text)
            for token in RESERVED[:1] + RESERVED[2:]:
                text = text.replace(token, "")
            outputs.append(text.strip())
    return outputs


def run(train, validation, test, *, epochs=1, seed=1337, verbose=2):
    """Train on `train` ((sources, targets)), watch `validation`, translate and score `test`."""
    import sacrebleu

    keras.utils.set_random_seed(seed)
    start = time.time()
    train, validation, test = ([[t.lower() for t in side] for side in split] for split in (train, validation, test))
    source_tokenizer, target_tokenizer = _tokenizer(train[0]), _tokenizer(train[1])
    train_ds = _dataset(source_tokenizer, target_tokenizer, *train, shuffle=True, seed=seed)
    val_ds = _dataset(source_tokenizer, target_tokenizer, *validation, shuffle=False, seed=seed)
    model = build(source_tokenizer.vocabulary_size(), target_tokenizer.vocabulary_size())
    fit_start = time.time()
    history = model.fit(train_ds, epochs=epochs, validation_data=val_ds, verbose=verbose)
    fit_seconds = time.time() - fit_start
    decode_start = time.time()
    raw = translate(model, source_tokenizer, target_tokenizer, test[0])
    joined = [attach_punctuation(t) for t in raw]
    references = [test[1]]
    return {"test_bleu": round(sacrebleu.corpus_bleu(joined, references, lowercase=True).score, 2),
            "test_chrf": round(sacrebleu.corpus_chrf(joined, references).score, 2),
            "test_bleu_as_detokenized": round(sacrebleu.corpus_bleu(raw, references, lowercase=True).score, 2),
            "val_loss": [round(v, 4) for v in history.history["val_loss"]], "epochs": epochs,
            "fit_seconds": round(fit_seconds, 1), "translate_seconds": round(time.time() - decode_start, 1),
            "seconds": round(time.time() - start, 1), "parameters": model.count_params(),
            "samples": list(zip(test[0][:3], joined[:3]))}
