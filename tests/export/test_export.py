"""Exports for TF Serving, checked by a client process that has only TensorFlow."""

import os
import pathlib
import pickle
import struct
import subprocess
import sys
import time
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from kformer import export, models
from kformer.data import imdb
from kformer.data.preprocessors import (BertPreprocessor, CausalLMPreprocessor, TextClassifierPreprocessor,
                                        TranslatorPreprocessor)
from kformer.data.wordpiece import WordPieceTokenizer

TEXTS = ["An absolutely wonderful film.", "", "terrible " * 400, "The acting was [MASK] and the [MASK] too."]
PROMPTS = ["The movie was", "", "terrible " * 40]  # the last is cut to max_length - 1 tokens
CLASSES = ["negative", "positive"]
DIGITS = [str(i) for i in range(10)]
MAX_PIXELS = 32 * 32  # the ViT export's max_image_pixels: its warmup image has as many
# The expected answer of a request the served graph must refuse: INVALID_ARGUMENT, and why.
REFUSED = {"too many pixels": "max_image_pixels=1024 (set at export)",
           "mask past the end": "lies past sequence_length 32"}
# On JAX and torch every export goes through the same TensorFlow worker (kformer.export.worker),
# which writes the same signatures as on TensorFlow. There the classifier and one decoding
# export check that path (the translator on JAX, the language model on torch); TensorFlow
# checks every task's signatures.
BACKEND = keras.backend.backend()
EVERY_TASK = BACKEND == "tensorflow"
DECODING = {"tensorflow": {"translator", "gpt"}, "jax": {"translator"}, "torch": {"gpt"}}[BACKEND]
tf_exports_only = pytest.mark.skipif(not EVERY_TASK, reason="checked on TensorFlow (JAX and torch "
                                     "exports run the same TensorFlow code in a subprocess)")


def exported(kind):
    return pytest.mark.skipif(kind not in DECODING, reason=f"the {kind} export is checked on another backend")


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer.learn(imdb.load_split("train", max_examples=300)[0], 600)


@pytest.fixture(scope="module")
def served(exported_and_answered):
    """(requests, expected, results from the client)."""
    return exported_and_answered[0]


@pytest.fixture(scope="module")
def warmup_replies(exported_and_answered):
    """{export dir: [(signature, error or None)]}: its warmup records, replayed as TF Serving loads it."""
    return exported_and_answered[1]


@pytest.fixture(scope="module")
def exported_and_answered(tokenizer, tmp_path_factory):
    """Export one task per task type; return ((requests, expected, results), warmup replies) from the client."""
    base = tmp_path_factory.mktemp("exports")
    keras.utils.set_random_seed(0)
    vocab = tokenizer.vocabulary_size
    requests, expected, xla = [], [], []

    def add(path, signature, inputs, want, with_xla=False):
        requests.append((str(path), signature, inputs))
        expected.append(want)
        xla.append(with_xla)  # the client turns XLA compilation off, as the stock TF Serving does

    text = {"text": np.array(TEXTS, dtype=object)}
    clf = models.text_classifier(preset="imdb_tiny", vocabulary_size=vocab, sequence_length=32,
                                 class_names=CLASSES,  # head_tail: the served graph keeps both ends too
                                 preprocessor=TextClassifierPreprocessor(tokenizer, 32, truncation="head_tail"))
    path = export.export_for_serving(clf, base / "imdb")
    add(path, "serving_default", text, {"probabilities": clf.predict(TEXTS, verbose=0)})
    quantized = models.text_classifier(preset="imdb_tiny", vocabulary_size=vocab, sequence_length=32,
                                       class_names=CLASSES, preprocessor=TextClassifierPreprocessor(tokenizer, 32))
    quantized.quantize("int8")  # on JAX and torch the TensorFlow worker rebuilds it from its .keras file
    path = export.export_for_serving(quantized, base / "imdb_int8")
    add(path, "serving_default", text, {"probabilities": quantized.predict(TEXTS, verbose=0)})
    adapted = models.text_classifier(preset="imdb_tiny", vocabulary_size=vocab, sequence_length=32,
                                     class_names=CLASSES, preprocessor=TextClassifierPreprocessor(tokenizer, 32))
    adapted.enable_lora(4, target_names=("query", "value", "mlp_in"))
    for variable in adapted.trainable_weights:  # as after training: adapters and head moved
        variable.assign(np.asarray(variable) + np.random.default_rng(0).normal(0, 0.3, variable.shape))
    path = export.export_for_serving(adapted, base / "imdb_lora")  # served merged
    add(path, "serving_default", text, {"probabilities": adapted.predict(TEXTS, verbose=0)})

    if "translator" in DECODING:
        _export_translator(tokenizer, base, text, add)
    if "gpt" in DECODING:
        _export_gpt(tokenizer, base, add)
    if EVERY_TASK:
        _export_bert_and_vit(tokenizer, base, text, add)

    folder = tmp_path_factory.mktemp("client")
    with open(folder / "requests.pkl", "wb") as f:
        pickle.dump([(*request, with_xla) for request, with_xla in zip(requests, xla)], f)
    client = pathlib.Path(__file__).with_name("serving_client.py")
    run = subprocess.run([sys.executable, str(client), str(folder / "requests.pkl"),
                          str(folder / "results.pkl")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    with open(folder / "results.pkl", "rb") as f:
        answer = pickle.load(f)
    assert not answer["kformer_imported"]
    for (path, signature, _), want, got in zip(requests, expected, answer["results"]):
        assert want == "error" or _refused(want) or "error" not in got, (path, signature, got.get("error"))
    return (requests, expected, answer["results"]), answer["warmup"]


def _refused(want):
    return isinstance(want, str) and want in REFUSED


def _export_translator(tokenizer, base, text, add):
    translator = models.translator(preset="transformer_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                   preprocessor=TranslatorPreprocessor(tokenizer, tokenizer, 16))
    limit = dict(max_length_ratio=0.5, max_length_offset=2)  # binds: the untrained model rarely ends
    path = export.export_for_serving(translator, base / "translator", max_length=10, num_beams=3,
                                     no_repeat_ngram_size=2, xla=True, **limit)
    for signature, strategy in (("serving_default", "greedy"), ("translate_beam", "beam"), ("translate_xla", "greedy")):
        want = translator.translate(TEXTS, strategy=strategy, num_beams=3, max_length=10, no_repeat_ngram_size=2,
                                    **limit)
        add(path, signature, text, {"translation": np.array([t.encode() for t in want], dtype=object)},
            with_xla=signature == "translate_xla")
    # Three texts: XLA's loop runs four rows (`batch_bucket`), the last repeated, and answers three.
    add(path, "translate_xla", {"text": text["text"][:3]},
        {"translation": np.array([t.encode() for t in want[:3]], dtype=object)}, with_xla=True)


def _export_gpt(tokenizer, base, add):
    lm_preprocessor = CausalLMPreprocessor(tokenizer, 16)
    lm = models.causal_lm(preset="gpt_tiny", sequence_length=16, preprocessor=lm_preprocessor)
    path = export.export_for_serving(lm, base / "gpt", max_length=12)
    prompt_ids = lm_preprocessor.prompt_ids(PROMPTS[:2])
    ids = lm.generate(prompt_ids, max_length=12)
    generated = np.where(np.arange(12) >= (prompt_ids != 0).sum(1)[:, None], ids, 0)
    want = {"text": lm.generate(PROMPTS[:2], max_length=12), "completion": lm_preprocessor.detokenize(generated)}
    prompts = {"prompt": np.array(PROMPTS, dtype=object)}
    add(path, "serving_default", prompts, want)
    for seed in (1, 1, 2):
        add(path, "generate_sample", {**prompts, "seed": np.int64(seed)}, "sample")


def _export_bert_and_vit(tokenizer, base, text, add):
    vocab = tokenizer.vocabulary_size
    backbone = models.bert(preset="bert_tiny", vocabulary_size=vocab, sequence_length=32,
                                hidden_dim=32, intermediate_dim=64)
    bert_clf = models.bert_text_classifier(backbone, 2, class_names=CLASSES,
                                           preprocessor=BertPreprocessor(tokenizer, 32))
    path = export.export_for_serving(bert_clf, base / "bert_clf")
    add(path, "serving_default", text, {"probabilities": bert_clf.predict(TEXTS, verbose=0)})

    mlm = models.bert_pretrainer(backbone, preprocessor=BertPreprocessor(tokenizer, 32, mask_positions=True))
    path = export.export_for_serving(mlm, base / "bert_mlm", top_k=3)
    probs = keras.ops.convert_to_numpy(keras.ops.softmax(mlm.predict(TEXTS, verbose=0)["mlm_logits"]))
    answers = mlm.fill_mask(TEXTS, top_k=3)
    add(path, "fill_mask", text, {"top_ids": np.argsort(-probs, axis=-1)[..., :3], "probs": probs,
                                  "answers": answers})
    # 32 tokens hold [CLS], [SEP] and 30 masks: the 31st, or a mask after 40 words, would get no answer
    for texts in (["[MASK] " * 30, "[MASK] " * 31], ["good " * 40 + "[MASK]"]):
        add(path, "fill_mask", {"text": np.array(texts, dtype=object)}, "mask past the end")

    vit = models.vit(preset="vit_tiny")  # no preprocessor: export resizes to its input size
    path = export.export_for_serving(vit, base / "vit", class_names=DIGITS, max_image_pixels=MAX_PIXELS)
    gray = np.random.default_rng(0).integers(0, 256, (3, 28, 28, 1), dtype=np.uint8)
    rgb = np.repeat(gray, 3, axis=-1)  # equal channels: grayscale conversion returns `gray` (+-1)
    pngs = np.array([tf.io.encode_png(image).numpy() for image in rgb], dtype=object)
    gray_seen = tf.image.rgb_to_grayscale(tf.cast(rgb, tf.float32)).numpy()
    want = {"probabilities": vit.predict(gray_seen, verbose=0)}
    add(path, "classify_images", {"images": rgb}, want)
    add(path, "serving_default", {"image_bytes": pngs}, want)
    add(path, "serving_default", {"image_bytes": np.array([b"not an image"], dtype=object)}, "error")
    for image in (tf.io.encode_png(np.zeros((32, 33, 3), np.uint8)).numpy(), *OVERSIZED_HEADERS):
        add(path, "serving_default", {"image_bytes": np.array([pngs[0], image], dtype=object)}, "too many pixels")


def _png_header(width, height):
    """The first 33 bytes of a PNG: its signature and an IHDR chunk claiming `width` x `height`."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))


def _jpeg_claiming(width, height):
    """A small real JPEG whose SOF0 marker says `width` x `height`."""
    data = bytearray(tf.io.encode_jpeg(np.zeros((16, 16, 3), np.uint8)).numpy())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


# Headers claiming 20000x20000 pixels (400 MB decoded; seconds to decode), each a few bytes long.
OVERSIZED_HEADERS = (_png_header(20000, 20000), _jpeg_claiming(20000, 20000),
                     b"GIF89a" + struct.pack("<HH", 20000, 20000) + bytes(3),
                     b"BM" + bytes(12) + struct.pack("<Iii", 40, 20000, -20000) + bytes(28),
                     b"RIFF" + bytes(4) + b"WEBPVP8X" + bytes(8) + (19999).to_bytes(3, "little") * 2)


def test_classifiers_answer_like_keras(served):
    for (path, signature, _), want, got in zip(*served):
        if "probabilities" not in (want if isinstance(want, dict) else {}):
            continue
        np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-5, err_msg=path)
        classes = DIGITS if "vit" in path else CLASSES
        label_id = want["probabilities"].argmax(-1)
        np.testing.assert_array_equal(got["label_id"], label_id)
        assert [x.decode() for x in got["label"]] == [classes[i] for i in label_id]
    assert np.isfinite(served[2][0]["probabilities"]).all()  # empty and over-long texts: defined


def test_each_weight_is_stored_once(served):
    # Keras 3.15 writes every weight twice (keras-team/keras#23553); kformer's export must not.
    for path in sorted({p for p, _, _ in served[0]}):
        reader = tf.train.load_checkpoint(str(pathlib.Path(path) / "variables" / "variables"))
        seen = {}
        for key in reader.get_variable_to_shape_map():
            value = reader.get_tensor(key) if key.endswith("VARIABLE_VALUE") else None
            if value is not None and value.size > 64 and value.min() != value.max():  # random: a twin is a copy
                assert seen.setdefault(value.tobytes(), key) == key, (path, key, seen[value.tobytes()])
        assert seen, path


def test_a_lora_export_serves_merged_kernels_without_the_adapters(served):
    paths = {pathlib.Path(p).parent.name: pathlib.Path(p) for p, _, _ in served[0]}

    def stored(name):
        reader = tf.train.load_checkpoint(str(paths[name] / "variables" / "variables"))
        return sorted(shape for key, shape in reader.get_variable_to_shape_map().items()
                      if key.endswith("VARIABLE_VALUE"))

    assert stored("imdb_lora") == stored("imdb")  # the same variables as the plain classifier: no factors


@tf_exports_only
def test_each_signature_is_traced_once(tokenizer, tmp_path, monkeypatch):
    # tf.saved_model.save retraced every endpoint Keras had traced (the save context keys the cache).
    from kformer.export import signatures as signature_table

    traced, signatures_of = [], signature_table.signatures_of

    def counting(signature):
        def make(task, preprocessor, options):
            endpoint = signature.endpoint(task, preprocessor, options)
            return lambda *inputs: traced.append(signature.name) or endpoint(*inputs)
        return signature._replace(endpoint=make)

    monkeypatch.setattr(signature_table, "signatures_of", lambda *a, **k: tuple(map(counting, signatures_of(*a, **k))))
    model = models.translator(preset="transformer_tiny", vocabulary_size=tokenizer.vocabulary_size,
                              preprocessor=TranslatorPreprocessor(tokenizer, tokenizer, 8))
    export.export_for_serving(model, tmp_path / "translator", max_length=4, xla=True, warmup_requests=False)
    assert sorted(traced) == ["serving_default", "translate_beam", "translate_xla"]  # what they answer: below


@exported("translator")
def test_translations_equal_generate(served):
    pairs = [(w, g) for (p, _, _), w, g in zip(*served) if "translator" in p]
    assert len(pairs) == 4  # greedy, beam (both without XLA), greedy compiled by XLA, and of three texts
    for want, got in pairs:
        assert got["translation"].tolist() == want["translation"].tolist()


@exported("gpt")
def test_text_generation_equals_generate_and_samples_by_seed(served):
    results = [(w, g) for (p, _, _), w, g in zip(*served) if p.endswith("gpt/1")]
    (want, greedy), samples = results[0], [g for _, g in results[1:]]
    assert [t.decode() for t in greedy["text"][:2]] == want["text"]
    assert [t.decode() for t in greedy["completion"][:2]] == want["completion"]
    assert want["completion"][0] and want["text"][0].startswith("the movie was")
    assert greedy["text"][2].decode().startswith("terrible terrible")  # a long prompt is cut, not refused
    assert samples[0]["text"].tolist() == samples[1]["text"].tolist()  # same seed, same tokens
    assert samples[0]["text"].tolist() != samples[2]["text"].tolist()
    assert all(t.decode().startswith("the movie was") for t in (s["text"][0] for s in samples))


@tf_exports_only
def test_fill_mask_returns_top_k_per_mask(served, tokenizer):
    (want, got), = [(w, g) for (p, _, _), w, g in zip(*served) if "bert_mlm" in p and not _refused(w)]
    assert got["num_masks"].tolist() == [0, 0, 0, 2]
    assert [len(a) for a in want["answers"]] == [0, 0, 0, 2]  # BertPretrainer.fill_mask agrees
    assert [[c["token"] for c in m] for m in want["answers"][3]] == [
        [t.decode() for t in row] for row in got["tokens"][3]]
    assert got["tokens"].shape == (4, 2, 3) and got["scores"].shape == (4, 2, 3)
    np.testing.assert_array_equal(got["token_ids"][3], want["top_ids"][3])
    np.testing.assert_allclose(got["scores"][3], np.sort(want["probs"][3], -1)[:, ::-1][:, :3], atol=1e-5)
    assert [[t.decode() for t in row] for row in got["tokens"][3]] == [
        [tokenizer.vocabulary[i] for i in row] for row in want["top_ids"][3]]
    assert (got["tokens"][:3] == b"").all() and (got["token_ids"][:3] == -1).all()  # no mask: empty


@tf_exports_only
def test_requests_the_graph_cannot_answer_in_full_are_refused_with_the_reason(served):
    """Images over `max_image_pixels` (refused from the header: a 33-byte PNG claiming 20000x20000 is
    not decoded), and fill-mask texts with a [MASK] that the packing would cut off."""
    refused = [(w, g, inputs) for (_, _, inputs), w, g in zip(*served) if _refused(w)]
    assert [w for w, _, _ in refused] == ["mask past the end"] * 2 + ["too many pixels"] * 6
    for want, got, inputs in refused:
        assert got.get("error", "").startswith("InvalidArgumentError"), got
        assert REFUSED[want] in got["error"], got["error"]
        assert "[1]" in got["error"] or len(next(iter(inputs.values()))) == 1, got["error"]  # the row
    assert "`text`[1] has 31 [MASK] tokens, but only 30 fit" in refused[0][1]["error"]
    assert "`image_bytes`[1] is a 33x32 image (its header says)" in refused[2][1]["error"]  # over by a column
    assert "`image_bytes`[1] is a 20000x20000 image (its header says)" in refused[3][1]["error"]


@tf_exports_only
def test_non_image_bytes_give_a_clear_error(served):
    errors = [g for w, g in zip(served[1], served[2]) if w == "error"]
    assert len(errors) == 1 and "error" in errors[0]
    assert "image" in errors[0]["error"].lower()


CLI_SEPARATOR = "\n=== saved_model_cli show --all ===\n"
# What the installed script does (`.venv/bin/saved_model_cli`: `sys.exit(main())`), for each folder in turn.
CLI_PER_EXPORT = f"""
import sys
from tensorflow.python.tools.saved_model_cli import main
for folder in sys.argv[1:]:
    print({CLI_SEPARATOR!r}, end="", flush=True)
    sys.argv = ["saved_model_cli", "show", "--dir", folder, "--all"]
    try:
        main()
    except SystemExit as ended:  # the script's `sys.exit(main())`: absl's app.run exits
        if ended.code not in (0, None):
            raise
    sys.stdout.flush()
"""


@tf_exports_only  # the signatures are written by the same TensorFlow code from every backend
def test_saved_model_cli_lists_signatures(served):
    paths = sorted({p for p, _, _ in served[0]})
    # One process runs the installed `saved_model_cli` script once per export: the script's entry point, `main`,
    # with the script's command line (each run of the script would import TensorFlow again).
    run = subprocess.run([sys.executable, "-c", CLI_PER_EXPORT, *paths], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    shown = dict(zip(paths, run.stdout.split(CLI_SEPARATOR)[1:]))
    assert len(shown) == len(paths), run.stdout[-3000:]
    translator = next(s for p, s in shown.items() if "translator" in p)
    gpt = next(s for p, s in shown.items() if p.endswith("gpt/1"))
    assert "signature_def['generate_sample']" in gpt and "inputs['seed'] tensor_info:\n        dtype: DT_INT64\n        shape: ()" in gpt
    assert "outputs['completion'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in gpt
    assert "signature_def['translate_beam']" in translator and "signature_def['serving_default']" in translator
    assert "outputs['translation'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in translator
    imdb_export = next(s for p, s in shown.items() if "imdb" in p)
    assert "inputs['text'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in imdb_export
    assert "outputs['probabilities'] tensor_info:\n        dtype: DT_FLOAT\n        shape: (-1, 2)" in imdb_export
    assert "outputs['label_id'] tensor_info:\n        dtype: DT_INT32" in imdb_export
    if not EVERY_TASK:
        return
    vit_export = next(s for p, s in shown.items() if "vit" in p)
    assert "inputs['images'] tensor_info:\n        dtype: DT_UINT8\n        shape: (-1, -1, -1, 3)" in vit_export
    assert "inputs['image_bytes'] tensor_info:\n        dtype: DT_STRING" in vit_export


@exported("translator")
def test_only_translate_xla_is_compiled_by_xla(served):
    """And the plain signatures hold no XLA-only op (`ops.slice_update` is `XlaDynamicUpdateSlice` on TensorFlow)."""
    path = next(p for p, _, _ in served[0] if "translator" in p)
    signatures = tf.saved_model.load(path).signatures
    library = {name: signatures[name].graph.as_graph_def().library.function
               for name in ("serving_default", "translate_beam", "translate_xla")}

    def must_compile(name):
        return any(f.attr["_XlaMustCompile"].b for f in library[name])

    assert must_compile("translate_xla")
    assert not must_compile("serving_default") and not must_compile("translate_beam")
    for name in ("serving_default", "translate_beam"):
        xla_ops = {n.op for f in library[name] for n in f.node_def if n.op.startswith("Xla")}
        assert not xla_ops, (name, xla_ops)


@pytest.mark.once("`kformer check-serving` loads the SavedModel with TensorFlow alone, and the TensorFlow run checks "
                  "the same exports (the classifier and the translator)")
def test_check_serving_says_whether_a_stock_server_loads_a_version(served, tmp_path):
    import shutil

    paths = {p for p, _, _ in served[0]}
    imdb = next(p for p in paths if "imdb" in p)
    damaged = shutil.copytree(imdb, tmp_path / "damaged" / "1")  # a truncated saved_model.pb: a traceback before
    graph = (damaged / "saved_model.pb").read_bytes()
    (damaged / "saved_model.pb").write_bytes(graph[:len(graph) // 2])
    runs = [(imdb, [], 0), (str(damaged), [], 1)]
    translator = next((p for p in paths if "translator" in p), None)
    if translator:  # a stock server fails translate_xla; one with XLA turned on loads it all
        runs += [(translator, [], 1), (translator, ["--xla"], 0)]
    checks = [(subprocess.Popen([sys.executable, "-m", "kformer.cli", "check-serving", path, *flags],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True), path, flags, code)
              for path, flags, code in runs]  # side by side: each one imports TensorFlow
    for check, path, flags, code in checks:
        out = check.communicate()[0]
        assert check.returncode == code, (path, flags, out)
        lines = out.splitlines()
        assert len({line.partition(":")[0] for line in lines}) == len(lines), out  # one line a signature
        if path == str(damaged):
            assert lines == [lines[0]] and lines[0].startswith(f"{damaged}: would not load in a stock TF Serving "
                                                               "(XLA compilation off): "), out
        elif code:  # translate_xla has two warmup requests (1 and 2 texts: two batch buckets)
            assert "translate_xla: FAILED 2 of 2 warmup requests: InternalError: XLA compilation disabled" in out
            assert "serving_default: ok" in lines and "translate_beam: ok" in lines
            assert out.strip().endswith("would not load in a stock TF Serving (XLA compilation off): "
                                        "['translate_xla'] failed")
        else:
            assert "serving_default: ok" in lines and ("translate_xla: ok (2 warmup requests)" in lines) == bool(flags)
            assert out.strip().endswith("loads in " + (
                "TF Serving started with --xla_cpu_compilation_enabled=true" if flags
                else "a stock TF Serving (XLA compilation off)"))


def test_a_stock_server_loads_every_export(warmup_replies):
    """TF Serving replays a version's warmup records when it loads it, with XLA compilation off
    unless started with `--xla_cpu_compilation_enabled`, and does not load the version if one
    fails: every record passes there but the opt-in `translate_xla`'s (the README's caveat)."""
    assert warmup_replies
    for path, replies in warmup_replies.items():
        assert replies, path
        for signature, error in replies:
            if signature == "translate_xla":
                assert "XLA compilation disabled" in error, error
            else:
                assert error is None, (path, signature, error)


@tf_exports_only
def test_plain_translation_signatures_drop_all_padding_columns():
    from kformer.generation.batching import used_width  # what `translate` runs in the graph (`trim_width`)

    for ids, width in [([[0, 0, 0]], 1), ([[5, 0, 0], [0, 0, 0]], 1), ([[5, 6, 0, 0], [7, 0, 0, 0]], 2),
                       ([[1, 2, 3]], 3)]:
        assert int(used_width(tf.constant(ids, tf.int32))) == width, ids


def test_warmup_requests_cover_every_signature(served):
    from tensorflow_serving.apis import prediction_log_pb2

    for path in {p for p, _, _ in served[0]}:
        records = tf.data.TFRecordDataset(str(pathlib.Path(path) / "assets.extra" / "tf_serving_warmup_requests"))
        logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in records]
        signatures = {log.predict_log.request.model_spec.signature_name for log in logs}
        assert signatures == set(tf.saved_model.load(path).signatures.keys()), path


worker_exports = pytest.mark.skipif(EVERY_TASK, reason="TensorFlow exports in this process, without the worker")


@worker_exports
def test_one_tensorflow_worker_writes_every_export_and_names_a_failure(served, tmp_path):
    from kformer.export import worker

    pid = worker._WORKER["process"].pid  # the fixture's exports started it
    with pytest.raises(RuntimeError, match="(?s)Traceback.*model.keras does not exist"):
        worker.write_in_tensorflow(tmp_path, tmp_path / "out")
    path = export.export_for_serving(models.vit(preset="vit_tiny"), tmp_path / "vit", warmup_requests=False)
    assert (path / "saved_model.pb").is_file() and not (tmp_path / "out").exists()
    assert worker._WORKER["process"].pid == pid


@pytest.mark.only_backend("torch")
def test_a_dead_worker_is_reported_with_its_log_then_replaced(tmp_path, monkeypatch):
    from kformer.export import worker

    process, log = worker._running_worker()
    process.stdin.write("not a request\n")
    process.stdin.flush()
    assert process.wait(timeout=120) == 1
    monkeypatch.setattr(worker, "_running_worker", lambda: (process, log))  # as if it died in a request
    with pytest.raises(RuntimeError, match=r"(?s)process exited \(1\).*JSONDecodeError"):
        worker.write_in_tensorflow(tmp_path, tmp_path / "out")
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="model.keras does not exist"):  # answered by a new worker
        worker.write_in_tensorflow(tmp_path, tmp_path / "out")
    assert worker._WORKER["process"].pid != process.pid


WORKER_FILE = pathlib.Path(__file__).parents[2] / "kformer" / "export" / "worker.py"


@pytest.mark.only_backend("jax")
@pytest.mark.skipif(not pathlib.Path("/proc/self").exists(), reason="reads /proc")
@pytest.mark.parametrize("kill_signal", [True, False], ids=["prctl", "polling thread"])
def test_the_workers_watch_ends_a_process_whose_starter_died(kill_signal):
    """Both watches of `watch_parent`: Linux's parent-death signal, and the portable thread that polls."""
    watch = ("import importlib.util, sys, time; spec = importlib.util.spec_from_file_location('w', sys.argv[1]); "
             "w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w); "
             f"w.watch_parent(int(sys.argv[2]), kill_signal={kill_signal}); print('watching', flush=True); "
             "time.sleep(600)")
    starter = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time; child = subprocess.Popen("
                                f"[sys.executable, '-c', {watch!r}, {str(WORKER_FILE)!r}, str(os.getpid())], "
                                "stdout=subprocess.PIPE, text=True); print(child.pid, flush=True); "
                                "print(child.stdout.readline().strip() or 'the child ended', flush=True); "
                                "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    child = int(starter.stdout.readline())
    try:
        assert starter.stdout.readline().strip() == "watching"
        starter.kill()
        starter.wait()
        assert _gone_within(child, 2), "the watched process outlived the process that started it"
    finally:
        if _alive(child):
            os.kill(child, 9)


@pytest.mark.only_backend("jax")
@pytest.mark.skipif(not pathlib.Path("/proc/self").exists(), reason="reads /proc")
def test_the_worker_ends_when_its_parent_is_killed_mid_export(tmp_path):
    """SIGKILL a process while its first export waits on the TensorFlow worker: the worker goes too.

    The request then waits in the pipe while the worker imports TensorFlow (about 8 s). A worker that
    looked up its parent only after that import took `init` for its parent and ran the export to its end.
    The parent here runs `write_in_tensorflow` (the worker's half of `export_for_serving` on JAX and
    torch) from `worker.py` loaded by its path, to start in a moment without Keras.
    """
    stage = tmp_path / "stage"
    stage.mkdir()
    models.vit(preset="vit_tiny", num_layers=1).save(stage / "model.keras")
    (stage / "options.json").write_text('{"model_name": "vit", "class_names": %s}' % str(DIGITS).replace("'", '"'))
    script = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('w', sys.argv[1]); "
              "worker = importlib.util.module_from_spec(spec); spec.loader.exec_module(worker)\n"
              "started = worker._running_worker\n"
              "def announce():\n    process, log = started()\n    print(process.pid, flush=True)\n"
              "    return process, log\n"
              "worker._running_worker = announce\n"
              "worker.write_in_tensorflow(sys.argv[2], sys.argv[3])\n")
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the worker's log, left by the kill
    parent = subprocess.Popen([sys.executable, "-c", script, str(WORKER_FILE), str(stage), str(tmp_path / "out")],
                              stdout=subprocess.PIPE, text=True, env=env, cwd=pathlib.Path(__file__).parents[2])
    line = parent.stdout.readline()
    try:
        worker_pid = int(line)
        time.sleep(0.5)  # the request is in the worker's stdin; the worker is importing TensorFlow
        assert _alive(worker_pid)
        parent.kill()
        parent.wait()
        assert _gone_within(worker_pid, 2), "the export worker outlived the process that started it"
        assert not (tmp_path / "out").exists()
    finally:
        parent.kill()
        if line.strip().isdigit() and _alive(int(line)):
            os.kill(int(line), 9)


def _gone_within(pid, seconds):
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _alive(pid):
    """Running: neither gone nor a zombie."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@tf_exports_only  # versioning is backend-independent (tests/reliability covers its edge cases)
def test_versions_are_new_and_never_overwritten(tmp_path):
    model = models.vit(preset="vit_tiny")
    first = export.export_for_serving(model, tmp_path, warmup_requests=False)
    second = export.export_for_serving(model, tmp_path, warmup_requests=False)
    assert (first.name, second.name) == ("1", "2")
    before = sorted(p.name for p in first.rglob("*"))
    with pytest.raises(ValueError, match="already exists"):
        export.export_for_serving(model, tmp_path, version=1)
    assert sorted(p.name for p in first.rglob("*")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2"]  # no temporary left behind


def test_bad_arguments_name_the_argument(tokenizer):
    bare = models.text_classifier(preset="imdb_tiny", vocabulary_size=600, sequence_length=16)
    with pytest.raises(ValueError, match="needs its preprocessor"):
        export.save_for_serving(bare, "unused")
    with pytest.raises(ValueError, match="`task` must be a kformer task"):
        export.save_for_serving(keras.Sequential([keras.layers.Dense(2)]), "unused")
    fitting = models.text_classifier(preset="imdb_tiny", vocabulary_size=600, sequence_length=16,
                                     preprocessor=TextClassifierPreprocessor(tokenizer, 16))
    with pytest.raises(ValueError, match="`class_names` must be 2 strings"):
        export.save_for_serving(fitting, "unused", class_names=["only one"])
    too_big = r"`tokenizer` has \d+ tokens, but the model's vocabulary holds 100"
    with pytest.raises(ValueError, match=too_big):  # at construction
        models.text_classifier(preset="imdb_tiny", vocabulary_size=100, sequence_length=16,
                               preprocessor=TextClassifierPreprocessor(tokenizer, 16))
    small = models.text_classifier(preset="imdb_tiny", vocabulary_size=100, sequence_length=16)
    small.preprocessor = TextClassifierPreprocessor(tokenizer, 16)  # attached later: export checks again
    with pytest.raises(ValueError, match=too_big):
        export.save_for_serving(small, "unused")
    longer = models.text_classifier(preset="imdb_tiny", vocabulary_size=600, sequence_length=16)
    longer.preprocessor = TextClassifierPreprocessor(tokenizer, 32)
    with pytest.raises(ValueError, match="sequence_length=16.*Received: sequence_length=32"):
        export.save_for_serving(longer, "unused")
    with pytest.raises(ValueError, match="`xla` must be a bool, and True only for translation.*"
                                         "Received: xla=True for a text_classification task"):
        export.save_for_serving(fitting, "unused", xla=True)
    with pytest.raises(ValueError, match="`max_length_ratio` is for translation.*for a text_classification"):
        export.save_for_serving(fitting, "unused", max_length_ratio=1.5)
    with pytest.raises(ValueError, match="`max_image_pixels` is for image classification.*max_image_pixels=100 "
                                         "for a text_classification"):
        export.save_for_serving(fitting, "unused", max_image_pixels=100)
    vit = models.vit(preset="vit_tiny", num_layers=1)
    for pixels in (0, 2**31, 1e6, True):
        with pytest.raises(ValueError, match=rf"`max_image_pixels` must be an int in \[1, 2\*\*31 - 1\].*"
                                             rf"Received: max_image_pixels={pixels!r}"):
            export.save_for_serving(vit, "unused", max_image_pixels=pixels)
    translator = models.translator(preset="transformer_tiny", vocabulary_size=tokenizer.vocabulary_size,
                                   preprocessor=TranslatorPreprocessor(tokenizer, tokenizer, 16))
    with pytest.raises(ValueError, match="`max_length_ratio` must be a finite number > 0.*max_length_ratio=-1"):
        export.save_for_serving(translator, "unused", max_length_ratio=-1)
    with pytest.raises(ValueError, match="`max_length_offset` must be an int >= 0.*max_length_offset=1.5"):
        export.save_for_serving(translator, "unused", max_length_ratio=2, max_length_offset=1.5)
    lm = models.causal_lm(preset="gpt_tiny", sequence_length=16, preprocessor=CausalLMPreprocessor(tokenizer, 16))
    with pytest.raises(ValueError, match=r"`max_length` must be an int in \[2, 16\].*max_length=40"):
        export.save_for_serving(lm, "unused", max_length=40)
    with pytest.raises(ValueError, match=r"`top_p` must be a float in \(0, 1\]. Received: top_p=1.5"):
        export.save_for_serving(lm, "unused", top_p=1.5)
    with pytest.raises(ValueError, match="`temperature` must be a finite float > 0"):
        export.save_for_serving(lm, "unused", temperature=float("nan"))
