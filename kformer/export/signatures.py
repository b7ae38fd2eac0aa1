"""The serving signatures of every task type: one table, read by export and warmup.

`SIGNATURES[task.task_type]` lists a task's signatures: name, inputs
(name -> dtype and shape), outputs, the endpoint factory and a warmup
request. An endpoint factory takes the task, its preprocessor and the export
options and returns a function of TensorFlow tensors that runs the task's own
preprocessor, the model (and a decoding loop) in the graph. Only core
TensorFlow ops: a plain `tensorflow` process and the stock TF Serving binary
run them. The one exception is opt-in: a signature with an `option` (such as
`translate_xla`) is written only when that export option is true.
"""

import collections

import numpy as np
import tensorflow as tf

from kformer.data.wordpiece import MASK
from kformer.generation.batching import batch_bucket, repeat_last_row, strip_prompt, trim_width
from kformer.models.postprocess import classify, top_masked_tokens

Signature = collections.namedtuple("Signature", "name inputs outputs endpoint warmup option", defaults=(None,))
Signature.__doc__ = """One serving signature of a task type.

Args:
    name: str. The signature name (`serving_default`, `translate_beam`, ...).
    inputs: dict input name -> (tf dtype, shape).
    outputs: tuple of output names.
    endpoint: callable `(task, preprocessor, options) -> fn(*inputs) -> dict of outputs`.
    warmup: callable `() -> {input name: numpy array}`, one real request, or
        `() -> [request, ...]` (an XLA signature: one per batch size to
        compile while TF Serving loads the model).
    option: str or None. An export option that must be true for this
        signature to be written (`None`: always written).

Example:

>>> [s.name for s in SIGNATURES["translation"]]
['serving_default', 'translate_beam', 'translate_xla']
"""
WARMUP_TEXTS = ["A warmup request.", "Ein [MASK] Satz."]
LABEL_OUTPUTS = ("label", "label_id", "probabilities")


def _labelled(logits, class_names):
    label_id, probabilities = classify(logits)  # as `ClassifierTask.predict_labels`
    return {"label": tf.gather(tf.constant(class_names), label_id), "label_id": label_id,
            "probabilities": probabilities}


def classify_text(task, preprocessor, options):
    def classify(text):
        return _labelled(task(preprocessor.inputs(text), training=False), options["class_names"])
    return classify


def signature_config(options, strategy):
    """The `GenerationConfig` a decoding signature runs: the export's (`options["generation"]`) with the
    signature's sampler: greedy for `translate` / `generate`; the config's `BeamSampler` (else
    `BeamSampler()`) for `translate_beam`; its top-k / top-p sampler (else `TopPSampler()`) for
    `generate_sample`."""
    from kformer.generation import BeamSampler, GenerationConfig, GreedySampler, TopKSampler, TopPSampler

    config = GenerationConfig.from_dict(options["generation"])
    sampler = config.sampler
    if strategy == "greedy":
        sampler = GreedySampler()
    elif strategy == "beam":
        sampler = sampler if isinstance(sampler, BeamSampler) else BeamSampler()
    elif not isinstance(sampler, (TopKSampler, TopPSampler)):
        sampler = TopPSampler()
    return config.replace(sampler=sampler, seed=None, strip_prompt=False, num_return_sequences=1)


def _translation_loop(task, preprocessor, options, strategy, jit_compile=False):
    """The export's decoding loop of a translator: source ids `(batch, width)` -> generated ids."""
    from kformer.generation.search import decode_function

    return decode_function(task, signature_config(options, strategy), xla=jit_compile)


def translate(strategy, jit_compile=False):
    """Text `(batch,)` -> `translation`; with `jit_compile`, the decoding loop is one XLA-compiled function."""
    def make(task, preprocessor, options):
        decode = _translation_loop(task, preprocessor, options, strategy, jit_compile)
        if jit_compile:  # tokenization (strings) stays outside: XLA compiles the int loop only
            decode = tf.function(decode, jit_compile=True, autograph=False,
                                 input_signature=[tf.TensorSpec([None, None], tf.int32)])

        def translate_text(text):
            source = preprocessor.inputs(text)["encoder_token_ids"]
            if jit_compile:  # XLA compiles each new batch size: run a few sizes, as `generate` does
                rows = tf.shape(source)[0]
                ids = decode(repeat_last_row(source, batch_bucket(rows)))[:rows]
            else:  # drop all-padding columns (XLA would compile each new width)
                ids = decode(trim_width(source))
            return {"translation": preprocessor.detokenize_tensor(ids, text)}  # numbers from the source
        return translate_text
    return make


def translate_from_ids(strategy):
    """`source_ids` int32 `(batch, length)` -> `translation`, `translation_ids`: for a translator whose
    tokenizer runs outside TensorFlow (a Marian checkpoint's SentencePiece).

    Each row is a source's token ids right-padded with the model's padding
    id, as transformers' `MarianTokenizer(texts, padding=True)` or
    `preprocessor.encode(texts)` gives them. A row with no token, a token
    after padding or an id outside the vocabulary is INVALID_ARGUMENT naming
    the row. The translations are detokenized in the graph (core ops).
    """
    def make(task, preprocessor, options):
        decode = _translation_loop(task, preprocessor, options, strategy)
        vocabulary_size, padding = task.encoder_embedding.vocabulary_size, task.padding_id

        def translate_ids(source_ids):
            with tf.control_dependencies([_check_token_ids(source_ids, vocabulary_size, padding, "source_ids")]):
                ids = decode(trim_width(tf.identity(source_ids), padding))
            return {"translation": preprocessor.detokenize_tensor(ids), "translation_ids": ids}
        return translate_ids
    return make


def _continue(task, preprocessor, options, strategy):
    """`fn(ids, seed=None) -> (tokens, generated)`: the decoding loop both generation endpoints run.

    `ids` int `(batch, width)` right-padded prompts; with a `seed`, the
    sampling loop reads one stateless uniform per row and step. `generated` is
    `tokens` with each row's prompt positions set to 0.
    """
    from kformer.generation.search import decode_function

    max_length = options["max_length"]
    decode = decode_function(task, signature_config(options, strategy))

    def run(ids, seed=None):
        noise = None
        if seed is not None:
            noise = tf.random.stateless_uniform([tf.shape(ids)[0], max_length],
                                                seed=tf.stack([tf.cast(seed, tf.int64), 0]))
        tokens = decode(ids, noise)
        return tokens, strip_prompt(tokens, ids)
    return run


def generate_text(strategy):
    """`prompt` string `(batch,)` (+ `seed` int64 scalar when sampling) -> `completion`, `text`."""
    def make(task, preprocessor, options):
        run = _continue(task, preprocessor, options, strategy)

        def complete(prompt, seed=None):
            ids = preprocessor.prompt_tensor(prompt, options["max_length"] - 1)  # room for one new token at least
            tokens, generated = run(ids, seed)
            detokenize = preprocessor.tokenizer.detokenize
            return {"completion": detokenize(generated), "text": detokenize(tokens)}
        return complete
    return make


def generate_from_ids(strategy):
    """`prompt_ids` int32 `(batch, length)` (+ `seed` when sampling) -> `completion`, `text`, `completion_ids`,
    `token_ids`: for a preprocessor whose tokenizer needs ops a stock TF Serving lacks (GPT-2's BPE).

    Each row of `prompt_ids` is a prompt's token ids, right-padded with 0 (as
    `preprocessor.prompt_ids` gives them); at most `max_length - 1` are kept,
    the beginning. A row with no token, a token after padding or an id outside
    the vocabulary is INVALID_ARGUMENT naming the row. The texts are
    detokenized in the graph (core ops).
    """
    def make(task, preprocessor, options):
        run = _continue(task, preprocessor, options, strategy)
        vocabulary_size = preprocessor.tokenizer.vocabulary_size

        def complete(prompt_ids, seed=None):
            with tf.control_dependencies([_check_prompt_ids(prompt_ids, vocabulary_size)]):
                ids = trim_width(tf.identity(prompt_ids)[:, :options["max_length"] - 1])
            tokens, generated = run(ids, seed)
            return {"completion": preprocessor.detokenize_tensor(generated),
                    "text": preprocessor.detokenize_tensor(tokens), "completion_ids": generated, "token_ids": tokens}
        return complete
    return make


def _bad_rows(ids, vocabulary_size, padding):
    """(bool `(batch,)`: rows with no token, a token after padding or an id outside the vocabulary, the first such row)."""
    real = tf.not_equal(ids, padding)
    bad = (tf.reduce_any(tf.logical_not(real[:, :-1]) & real[:, 1:], axis=1)  # a token after padding
           | tf.logical_not(tf.reduce_any(real, axis=1))  # empty
           | tf.reduce_any((ids < 0) | (ids >= vocabulary_size), axis=1))
    return bad, tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32)


def _check_token_ids(ids, vocabulary_size, padding, name):
    """An assert op: each row of `ids` holds at least one token, no token after its padding, ids in the vocabulary."""
    bad, row = _bad_rows(ids, vocabulary_size, padding)
    message = tf.strings.format(
        "`%s`[{}] = {} is not a token sequence: expected ids in [0, %d) followed only by the padding id %d, at "
        "least one token." % (name, vocabulary_size, padding), (row, tf.gather(ids, row)), summarize=16)
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [message])


def _check_prompt_ids(prompt_ids, vocabulary_size):
    """`_check_token_ids` for GPT-2's prompts (padding id 0), with a message that says id 0 is GPT-2's `!`."""
    bad, row = _bad_rows(prompt_ids, vocabulary_size, 0)
    message = tf.strings.format(
        "`prompt_ids`[{}] = {} is not a prompt: expected token ids in [1, %d) followed only by 0 (padding), at "
        "least one token. Token id 0 is padding in kformer (GPT-2's `!`)." % vocabulary_size,
        (row, tf.gather(prompt_ids, row)), summarize=16)
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [message])


def fill_mask(task, preprocessor, options):
    """Text with [MASK] tokens -> top-k `tokens` / `scores` / `token_ids` `(batch, masks, k)`, `num_masks`.

    A text with a `[MASK]` past the preprocessor's `sequence_length` (cut off
    with the tokens after it) is refused: INVALID_ARGUMENT naming the text,
    not an answer that silently leaves that mask out.
    """
    top_k = options["top_k"]
    tokenizer = preprocessor.tokenizer
    mask_id = tokenizer.token_to_id(MASK)

    def fill(text):
        inputs = preprocessor.inputs(text)
        if "mask_positions" not in inputs:
            inputs["mask_positions"] = preprocessor.find_masks(inputs["token_ids"])
        with tf.control_dependencies([_check_masks_fit(text, inputs["token_ids"], tokenizer, mask_id,
                                                       preprocessor.sequence_length)]):
            mask_positions = tf.identity(inputs["mask_positions"])
        inputs["mask_positions"] = mask_positions
        logits = task(inputs, training=False)["mlm_logits"]
        out = top_masked_tokens(logits, inputs["token_ids"], mask_positions, mask_id, top_k)  # as `fill_mask`
        tokens = tf.where(out["valid"][:, :, None], tokenizer.id_to_token(tf.maximum(out["token_ids"], 0)), "")
        return {"tokens": tokens, "scores": out["scores"], "token_ids": out["token_ids"],
                "num_masks": out["num_masks"]}
    return fill


def _check_masks_fit(text, token_ids, tokenizer, mask_id, sequence_length):
    """An assert op: every `[MASK]` of each text is among its packed `token_ids` (none was truncated away)."""
    def count(ids):
        return tf.reduce_sum(tf.cast(tf.equal(ids, mask_id), tf.int32), axis=1)

    written, kept = count(tokenizer.tokenize(text)), count(token_ids)
    lost = written > kept
    row = tf.argmax(tf.cast(lost, tf.int32), output_type=tf.int32)
    message = tf.strings.format(
        "`text`[{}] has {} [MASK] tokens, but only {} fit in sequence_length=%d (special tokens included): "
        "a [MASK] lies past sequence_length %d and would get no answer. Shorten the text or put the "
        "[MASK] earlier." % (sequence_length, sequence_length),
        (row, tf.gather(written, row), tf.gather(kept, row)))
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(lost)), [message])


def classify_images(task, preprocessor, options):
    def classify(images):
        return _labelled(task(preprocessor.inputs(images), training=False), options["class_names"])
    return classify


def classify_image_bytes(task, preprocessor, options):
    """Encoded images `(batch,)` -> labels. An image over `max_image_pixels` is INVALID_ARGUMENT, refused
    from its header before decoding (PNG, JPEG, GIF, BMP, WebP), or after it (JPEG XL, a GIF frame wider
    than its screen)."""
    shape = [preprocessor.image_size, preprocessor.image_size, preprocessor.channels]
    limit = options.get("max_image_pixels", DEFAULT_MAX_IMAGE_PIXELS)

    def decode(args):
        image_bytes, index = args
        width, height = claimed_size(image_bytes)
        with tf.control_dependencies([_check_pixels(width, height, index, limit, "its header says")]):
            image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
        size = tf.cast(tf.shape(image), tf.int64)
        with tf.control_dependencies([_check_pixels(size[1], size[0], index, limit, "decoded")]):
            return preprocessor.inputs(tf.identity(image)[None])[0]

    def classify(image_bytes):
        index = tf.range(tf.shape(image_bytes, out_type=tf.int64)[0])
        images = tf.map_fn(decode, (image_bytes, index), fn_output_signature=tf.TensorSpec(shape, tf.float32))
        return _labelled(task(images, training=False), options["class_names"])
    return classify


DEFAULT_MAX_IMAGE_PIXELS = 4096 * 4096  # 16.8 megapixels (48 MiB decoded as RGB): a phone photo fits
MAX_IMAGE_PIXELS_LIMIT = 2**31 - 1  # the largest `max_image_pixels`: width * height stays exact in int64


def _check_pixels(width, height, index, limit, how):
    too_big = (width > limit) | (height > limit) | (width * height > limit)  # the product: both <= limit
    message = tf.strings.format("`image_bytes`[{}] is a {}x{} image (%s): more than this model's "
                                "max_image_pixels=%d (set at export). Send a smaller image." % (how, limit),
                                (index, width, height))
    return tf.debugging.Assert(tf.logical_not(too_big), [message])


def claimed_size(image_bytes):
    """`(width, height)` int64 scalars that an encoded image's header claims, read without decoding it.

    PNG (IHDR), JPEG (its SOFn marker, `tf.io.extract_jpeg_shape`), GIF
    (the logical screen), BMP and WebP (VP8, VP8L, VP8X); `(0, 0)` for
    another format or too few bytes (`tf.io.decode_image` then refuses it or
    decodes it first).
    """
    head = tf.strings.substr(tf.strings.join([tf.strings.substr(image_bytes, 0, 32), b"\0" * 32]), 0, 32)
    byte = tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)

    def little(start, count):
        return sum(byte[start + i] * 256**i for i in range(count))

    def big(start, count):
        return sum(byte[start + i] * 256**(count - 1 - i) for i in range(count))

    def starts(prefix, at=0):
        return tf.equal(tf.strings.substr(head, at, len(prefix)), prefix)

    def signed32(value):
        return tf.abs(tf.where(value >= 2**31, value - 2**32, value))  # BMP: a negative height is top-down

    vp8l = little(21, 4)
    webp = starts(b"RIFF") & starts(b"WEBP", 8)
    candidates = [  # (is this format, width, height)
        (starts(b"\x89PNG\r\n\x1a\n"), big(16, 4), big(20, 4)),
        (starts(b"GIF8"), little(6, 2), little(8, 2)),
        (starts(b"BM"), signed32(little(18, 4)), signed32(little(22, 4))),
        (webp & starts(b"VP8X", 12), little(24, 3) + 1, little(27, 3) + 1),
        (webp & starts(b"VP8L", 12), vp8l % 2**14 + 1, vp8l // 2**14 % 2**14 + 1),
        (webp & starts(b"VP8 ", 12), little(26, 2) % 2**14, little(28, 2) % 2**14),
    ]
    width = height = tf.constant(0, tf.int64)
    for match, w, h in reversed(candidates):
        width, height = tf.where(match, w, width), tf.where(match, h, height)

    def jpeg():
        shape = tf.cast(tf.io.extract_jpeg_shape(image_bytes), tf.int64)
        return shape[1], shape[0]
    return tf.cond(starts(b"\xff\xd8\xff"), jpeg, lambda: (width, height))


def speech_to_text(task, preprocessor, options):
    """WAV bytes `(batch,)` -> `transcript` `(batch,)` and `token_ids` `(batch, frames)` (0: none emitted).

    The task's `AudioPreprocessor` (decode, resample, log-mel), the model, then
    greedy CTC decoding (`kformer.models.speech_recognizer.greedy_ctc_decode`,
    as `SpeechRecognizer.transcribe`) and the vocabulary's tokens joined, all in
    the graph. Bytes that are not a WAV file, or empty audio, are INVALID_ARGUMENT.
    """
    table = tf.constant([""] + list(task.vocabulary))

    def answer(wav_bytes):
        inputs = preprocessor.inputs(wav_bytes)
        ids = tf.cast(task.decode_ids(task(inputs, training=False), inputs["padding_mask"]), tf.int32)
        return tf.strings.reduce_join(tf.gather(table, ids), axis=1), ids

    def transcribe(wav_bytes):  # an empty batch answers an empty batch, as the text and image signatures do
        transcript, ids = tf.cond(tf.size(wav_bytes) > 0, lambda: answer(wav_bytes),
                                  lambda: (tf.zeros([0], tf.string), tf.zeros([0, 0], tf.int32)))
        return {"transcript": transcript, "token_ids": ids}
    return transcribe


def transcribe_speech(strategy):
    """WAV bytes `(batch,)` -> `transcript` `(batch,)` and `token_ids` `(batch, length)`: a `SpeechToText`
    (a Whisper checkpoint). The preprocessor's `inputs` (decode, resample to 16 kHz, pad to the window),
    the model's log-mel features and the decoding loop with the export's `GenerationConfig` (the forced
    prompt and suppressed tokens of the checkpoint), then its byte-level detokenizing: core TensorFlow
    ops, which a stock TF Serving runs. `token_ids` start with the forced prompt; bytes that are not a
    WAV file, empty audio and audio over the window are INVALID_ARGUMENT."""
    def make(task, preprocessor, options):
        from kformer.generation.search import decode_function

        decode = decode_function(task, signature_config(options, strategy))

        def answer(wav_bytes):
            ids = decode(preprocessor.inputs(wav_bytes)["audio"])
            return preprocessor.detokenize_tensor(ids), ids

        def transcribe(wav_bytes):  # an empty batch answers an empty batch
            transcript, ids = tf.cond(tf.size(wav_bytes) > 0, lambda: answer(wav_bytes),
                                      lambda: (tf.zeros([0], tf.string), tf.zeros([0, 0], tf.int32)))
            return {"transcript": transcript, "token_ids": ids}
        return transcribe
    return make


def _wav():
    noise = np.random.default_rng(0).normal(0, 0.01, (4000, 1)).astype(np.float32)  # 0.5 s at 8 kHz
    return np.array([tf.audio.encode_wav(noise, 8000).numpy()], dtype=object)


def _png():
    return np.array([tf.io.encode_png(np.zeros((32, 32, 3), np.uint8)).numpy()], dtype=object)


TEXT = {"text": (tf.string, [None])}
WAV = {"wav_bytes": (tf.string, [None])}
TEXT_WARMUP = lambda: {"text": np.array([t.encode() for t in WARMUP_TEXTS], dtype=object)}  # noqa: E731
PROMPT_WARMUP = lambda: {"prompt": np.array([b"The movie was", b""], dtype=object)}  # noqa: E731
IDS_OUTPUTS = ("completion", "text", "completion_ids", "token_ids")
IDS_WARMUP = lambda: {"prompt_ids": np.array([[1, 2, 3], [4, 0, 0]], np.int32)}  # noqa: E731
SOURCE_IDS = {"source_ids": (tf.int32, [None, None])}
# Marian's `<unk>` (1) and `</s>` (0), in every such vocabulary; one row, no padding (its id is the model's)
SOURCE_IDS_WARMUP = lambda: {"source_ids": np.array([[1, 1, 0]], np.int32)}  # noqa: E731
# XLA compiles the loop per batch size (`batch_bucket`): one sentence and two, compiled at load.
XLA_TEXT_WARMUP = lambda: [{"text": np.array([WARMUP_TEXTS[0].encode()], dtype=object)}, TEXT_WARMUP()]  # noqa: E731
SIGNATURES = {
    "text_classification": (
        Signature("serving_default", TEXT, LABEL_OUTPUTS, classify_text, TEXT_WARMUP),),
    "translation": (
        Signature("serving_default", TEXT, ("translation",), translate("greedy"), TEXT_WARMUP),
        Signature("translate_beam", TEXT, ("translation",), translate("beam"), TEXT_WARMUP),
        Signature("translate_xla", TEXT, ("translation",), translate("greedy", jit_compile=True), XLA_TEXT_WARMUP,
                  option="xla")),
    "translation_ids": (  # a tokenizer outside TensorFlow (Marian's SentencePiece): source token ids in
        Signature("serving_default", SOURCE_IDS, ("translation", "translation_ids"), translate_from_ids("greedy"),
                  SOURCE_IDS_WARMUP),
        Signature("translate_beam", SOURCE_IDS, ("translation", "translation_ids"), translate_from_ids("beam"),
                  SOURCE_IDS_WARMUP)),
    "text_generation": (
        Signature("serving_default", {"prompt": (tf.string, [None])}, ("completion", "text"),
                  generate_text("greedy"), PROMPT_WARMUP),
        Signature("generate_sample", {"prompt": (tf.string, [None]), "seed": (tf.int64, [])},
                  ("completion", "text"), generate_text("top_p"),
                  lambda: {**PROMPT_WARMUP(), "seed": np.int64(1)})),
    "text_generation_ids": (  # a tokenizer stock TF Serving cannot run (GPT-2's BPE): token ids in
        Signature("serving_default", {"prompt_ids": (tf.int32, [None, None])}, IDS_OUTPUTS,
                  generate_from_ids("greedy"), IDS_WARMUP),
        Signature("generate_sample", {"prompt_ids": (tf.int32, [None, None]), "seed": (tf.int64, [])},
                  IDS_OUTPUTS, generate_from_ids("top_p"), lambda: {**IDS_WARMUP(), "seed": np.int64(1)})),
    "fill_mask": (
        Signature("serving_default", TEXT, ("tokens", "scores", "token_ids", "num_masks"), fill_mask, TEXT_WARMUP),
        Signature("fill_mask", TEXT, ("tokens", "scores", "token_ids", "num_masks"), fill_mask, TEXT_WARMUP)),
    "image_classification": (
        Signature("serving_default", {"image_bytes": (tf.string, [None])}, LABEL_OUTPUTS,
                  classify_image_bytes, lambda: {"image_bytes": _png()}),
        Signature("classify_images", {"images": (tf.uint8, [None, None, None, 3])}, LABEL_OUTPUTS,
                  classify_images, lambda: {"images": np.zeros((1, 32, 32, 3), np.uint8)})),
    "speech_to_text": (
        Signature("serving_default", WAV, ("transcript", "token_ids"), transcribe_speech("greedy"),
                  lambda: {"wav_bytes": _wav()}),
        Signature("transcribe_beam", WAV, ("transcript", "token_ids"), transcribe_speech("beam"),
                  lambda: {"wav_bytes": _wav()})),
    "speech_recognition": (
        Signature("serving_default", WAV, ("transcript", "token_ids"), speech_to_text, lambda: {"wav_bytes": _wav()}),
        Signature("speech_to_text", WAV, ("transcript", "token_ids"), speech_to_text,
                  lambda: {"wav_bytes": _wav()})),
}


def signatures_of(task_type, options=None):
    """The `Signature`s of `task_type` that `options` turn on; a ValueError names an unknown type.

    Args:
        task_type: str. A task class's `task_type` (`"text_classification"`, ...).
        options: dict of export options (`None`: none). A signature with an
            `option` is included only when `options[option]` is true.

    Example:

    >>> [s.name for s in signatures_of("image_classification")]
    ['serving_default', 'classify_images']
    >>> [s.name for s in signatures_of("translation", {"xla": True})]
    ['serving_default', 'translate_beam', 'translate_xla']
    """
    if task_type not in SIGNATURES:
        raise ValueError(f"No serving signatures for task type {task_type!r}; known: {sorted(SIGNATURES)}.")
    options = options or {}
    task_type = options.get("signatures", task_type)  # `text_generation_ids`: set by `signature_set`
    return tuple(s for s in SIGNATURES[task_type] if s.option is None or options.get(s.option))


def signature_set(task_type, preprocessor):
    """The key of `SIGNATURES` a task with this preprocessor is served with.

    `task_type`, except for a tokenizer that needs ops a stock TF Serving
    lacks or runs outside TensorFlow (`preprocessor.tokenizes_in_core_tensorflow`
    false): `"text_generation_ids"` (GPT-2's BPE) and `"translation_ids"`
    (Marian's SentencePiece), token ids in, text and ids out.

    Example:

    >>> signature_set("translation", None)
    'translation'
    """
    if task_type in ("text_generation", "translation") and \
            not getattr(preprocessor, "tokenizes_in_core_tensorflow", True):
        return task_type + "_ids"
    return task_type


def write_saved_model(task, preprocessor, options, directory):
    """Trace the task's endpoints and write the SavedModel into `directory` (TF backend only)."""
    import keras

    archive = keras.export.ExportArchive()
    archive.track(task)
    archive.track(preprocessor)
    _store_each_weight_once(archive)
    for signature in signatures_of(task.task_type, options):
        specs = [tf.TensorSpec(shape, dtype, name=name) for name, (dtype, shape) in signature.inputs.items()]
        archive.add_endpoint(signature.name, signature.endpoint(task, preprocessor, options),
                             input_signature=specs)
    save_options = tf.saved_model.SaveOptions()
    _trace_once(archive, save_options)
    archive.write_out(str(directory), options=save_options, verbose=False)


def _trace_once(archive, save_options):
    """Trace each endpoint once, as `tf.saved_model.save` will see it, and keep the concrete function.

    A `tf.function`'s trace cache is keyed by the save context's variable
    policy, so the endpoints Keras's `write_out` traces (to list the variables
    they use) were traced again inside `tf.saved_model.save`: every signature's
    graph, decoding loops included, was built twice. Traced here under the same
    save options, the concrete functions serve both. `save_context` is private
    to TensorFlow, `_endpoint_names` to Keras (both pinned in constraints.txt);
    `test_each_signature_is_traced_once` catches a version that changes them.
    """
    from tensorflow.python.saved_model import save_context

    trackable = archive._tf_trackable
    with save_context.save_context(save_options):
        for name in archive._endpoint_names:
            setattr(trackable, name, getattr(trackable, name).get_concrete_function())


def _store_each_weight_once(archive):
    """Track the `tf.Variable`s, not their `keras.Variable` wrappers.

    Keras 3.15 saves every weight twice in a SavedModel: `track()` keeps the
    wrappers and the traced endpoints capture the `tf.Variable`s inside them,
    two objects that TensorFlow's checkpoint cannot merge (keras-team/keras
    #23553: twice the size on disk and twice the memory in TF Serving). With
    the wrapped variables tracked, each weight is written once. `_tf_trackable`
    is private to Keras (pinned in constraints.txt); `test_each_weight_is_stored_once`
    catches a Keras that changes it.
    """
    trackable = archive._tf_trackable
    for name in ("variables", "trainable_variables", "non_trainable_variables"):
        unwrapped = [v.value if isinstance(getattr(v, "value", None), tf.Variable) else v
                     for v in getattr(trackable, name)]
        setattr(trackable, name, unwrapped)
