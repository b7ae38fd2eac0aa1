"""Serving endpoints per task, traced under the TensorFlow backend.

Each `*_endpoints` function returns `{signature_name: (fn, input_signature)}`;
`write_saved_model` puts them in a `keras.export.ExportArchive`. Inputs are
raw strings or images; tokenization, decoding and resizing run in the graph
with core TensorFlow ops only, so a plain `tensorflow` process (or the stock
TF Serving binary) serves them.
"""

import tensorflow as tf

from kformer.data.wordpiece import CLS, END, MASK, SEP, START


def _text_spec():
    return [tf.TensorSpec([None], tf.string, name="text")]


def _bert_inputs(tokenizer, text, sequence_length):
    token_ids = tokenizer(text, sequence_length, prefix=CLS, suffix=SEP)
    return {"token_ids": token_ids, "segment_ids": tf.zeros_like(token_ids),
            "padding_mask": tf.not_equal(token_ids, 0)}


def _labelled(logits, class_names):
    probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
    label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    return {"label": tf.gather(tf.constant(class_names), label_id), "label_id": label_id,
            "probabilities": probabilities}


def text_classification_endpoints(model, tokenizer, spec):
    bert = isinstance(model.input, dict) and "segment_ids" in model.input

    def classify(text):
        if bert:
            inputs = _bert_inputs(tokenizer, text, spec["sequence_length"])
        else:
            inputs = tokenizer(text, spec["sequence_length"])
        return _labelled(model(inputs, training=False), spec["class_names"])

    return {"serving_default": (classify, _text_spec())}


def translation_endpoints(model, source_tokenizer, target_tokenizer, spec):
    from kformer.models.generate import decode_function

    options = dict(max_length=spec["max_length"], start_token_id=target_tokenizer.ids[START],
                   end_token_id=target_tokenizer.ids[END])
    greedy = decode_function(model, strategy="greedy", **options)
    beam = decode_function(model, strategy="beam", num_beams=spec["num_beams"], **options)

    def translator(decode):
        def translate(text):
            source = source_tokenizer(text, spec["sequence_length"], suffix=spec.get("source_suffix"))
            return {"translation": target_tokenizer.detokenize(decode(source))}
        return translate

    return {"serving_default": (translator(greedy), _text_spec()),
            "translate_beam": (translator(beam), _text_spec())}


def fill_mask_endpoints(model, tokenizer, spec):
    """Text with [MASK] tokens -> top-k `tokens` / `scores` `(batch, masks, k)` per mask."""
    mask_id, top_k = tokenizer.ids[MASK], spec["top_k"]

    def fill_mask(text):
        inputs = _bert_inputs(tokenizer, text, spec["sequence_length"])
        is_mask = tf.equal(inputs["token_ids"], mask_id)
        positions = tf.ragged.boolean_mask(
            tf.broadcast_to(tf.range(tf.shape(is_mask)[1]), tf.shape(is_mask)), is_mask)
        num_masks = tf.cast(positions.row_lengths(), tf.int32)
        width = tf.maximum(tf.reduce_max(tf.concat([num_masks, [0]], 0)), 1)
        dense = positions.to_tensor(0)  # (batch, most masks in a row), padded to width >= 1
        inputs["mask_positions"] = tf.pad(dense, [[0, 0], [0, width - tf.shape(dense)[1]]])
        logits = model(inputs, training=False)["mlm_logits"]
        scores, token_ids = tf.math.top_k(tf.nn.softmax(tf.cast(logits, tf.float32)), top_k)
        valid = tf.sequence_mask(num_masks, width)[:, :, None]
        tokens = tf.where(valid, tokenizer._id_to_token.lookup(token_ids), "")
        return {"tokens": tokens, "scores": tf.where(valid, scores, 0.0),
                "token_ids": tf.where(valid, token_ids, -1), "num_masks": num_masks}

    return {"serving_default": (fill_mask, _text_spec()), "fill_mask": (fill_mask, _text_spec())}


def image_classification_endpoints(model, spec):
    height, width, channels = model.input.shape[1:]

    def prepare(images):  # float32 [batch, h, w, 3] in 0..255
        images = tf.image.resize(images, [height, width])
        return tf.image.rgb_to_grayscale(images) if channels == 1 else images

    def classify_images(images):
        images = prepare(tf.cast(images, tf.float32))
        return _labelled(model(images, training=False), spec["class_names"])

    def decode(image_bytes):
        image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
        return tf.image.resize(tf.cast(image, tf.float32), [height, width])

    def classify_image_bytes(image_bytes):
        images = tf.map_fn(decode, image_bytes,
                           fn_output_signature=tf.TensorSpec([height, width, 3], tf.float32))
        return classify_images(images)

    return {
        "serving_default": (classify_image_bytes, [tf.TensorSpec([None], tf.string, name="image_bytes")]),
        "classify_images": (classify_images, [tf.TensorSpec([None, None, None, 3], tf.uint8, name="images")]),
    }


def write_saved_model(model, tokenizers, spec, directory):
    """Trace the task's endpoints and write the SavedModel into `directory` (TF backend only)."""
    import keras

    task = spec["task"]
    if task == "text_classification":
        endpoints = text_classification_endpoints(model, tokenizers[0], spec)
    elif task == "translation":
        endpoints = translation_endpoints(model, tokenizers[0], tokenizers[1], spec)
    elif task == "fill_mask":
        endpoints = fill_mask_endpoints(model, tokenizers[0], spec)
    else:
        endpoints = image_classification_endpoints(model, spec)
    archive = keras.export.ExportArchive()
    archive.track(model)
    for tokenizer in tokenizers:
        archive.track(tokenizer)
    for name, (fn, signature) in endpoints.items():
        archive.add_endpoint(name, fn, input_signature=signature)
    archive.write_out(str(directory), verbose=False)
