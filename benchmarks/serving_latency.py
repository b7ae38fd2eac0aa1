"""Serving latency: exported SavedModels (plain TensorFlow) against the in-process Keras model.

    KERAS_BACKEND=tensorflow python benchmarks/serving_latency.py
    KERAS_BACKEND=jax python benchmarks/serving_latency.py --single 100

Models: an `imdb_small` classifier (sequence 256) and a `transformer_small`
translator (greedy, at most 40 tokens), with WordPiece vocabularies learned
from the bundled IMDB reviews (8000 / 4000 tokens); random weights (speed does
not depend on them, except the translator stops at the end token: both sides
decode the same tokens, checked). Requests are real bundled test reviews
(the translator gets their first 12 words).
- export: `kformer.export.export_for_serving`, loaded back with
  `tf.saved_model.load` and called through `signatures["serving_default"]`
  on raw strings (tokenization and decoding in the graph); for the
  translator also `signatures["translate_xla"]` (`xla=True`: the same greedy
  loop compiled by XLA, opt-in);
- keras predict: tokenize in Python (`tokenizer.encode`), then
  `model.predict(ids)` (classifier) / `kformer.models.generate` (translator);
- keras predict_on_batch: the same with `predict_on_batch` (classifier).
p50/p99 over `--single` one-review requests after 5 warm-ups; throughput =
64 / median time of `--batches` batch-64 requests. The exports go to a
temporary folder, removed at the end unless `--keep-exports`. Appends one row
per line printed to benchmarks/results/serving_latency.csv (`--results`), each
with the command, commit, date, machine and backend.
"""

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kformer import export, models  # noqa: E402
from kformer.data import imdb  # noqa: E402
from kformer.data.preprocessors import TextClassifierPreprocessor, TranslatorPreprocessor  # noqa: E402
from kformer.data.wordpiece import WordPieceTokenizer  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402

HEADER = ["what", "p50_ms", "p99_ms", "batch64_requests_per_s", "single_requests"]


def timed(fn, requests, warmup=5):
    for r in requests[:warmup]:
        fn(r)
    times = []
    for r in requests:
        start = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - start)
    return np.array(times)


def report(rows, name, single, batch):
    p50, p99 = np.percentile(single, 50) * 1e3, np.percentile(single, 99) * 1e3
    rows.append((name, p50, p99, 64 / np.median(batch)))
    print(f"{name:<40} p50 {p50:8.2f} ms  p99 {p99:8.2f} ms  batch-64 {64 / np.median(batch):8.1f} req/s",
          flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--single", type=int, default=200)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--keep-exports", action="store_true", help="keep the two SavedModels (removed by default)")
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("serving_latency.csv"),
                   help="the CSV the rows are appended to")
    args = p.parse_args(argv)
    if min(args.single, args.batches) < 1:
        p.error(f"--single and --batches must be >= 1. Received: {args.single}, {args.batches}")
    keras.utils.set_random_seed(0)
    train_texts = imdb.load_split("train", max_examples=2000)[0]
    texts = imdb.load_split("test")[0]
    singles = [[t] for t in texts[: args.single]]
    batches = [texts[i * 64:(i + 1) * 64] for i in range(args.batches)]
    out = tempfile.mkdtemp(prefix="serving-latency-")
    print(f"backend={keras.backend.backend()} exports in {out}", flush=True)
    try:
        rows = measure(out, train_texts, singles, batches)
    finally:
        if not args.keep_exports:
            shutil.rmtree(out, ignore_errors=True)
    provenance.write_csv(args.results, HEADER, [  # the translator's single requests are the first 40 at most
        (name, f"{p50:.2f}", f"{p99:.2f}", f"{rate:.1f}", min(len(singles), 40) if "translator" in name else len(singles))
        for name, p50, p99, rate in rows], backend=keras.backend.backend(), append=True)
    print(f"appended {len(rows)} rows to {args.results}")


def measure(out, train_texts, singles, batches):
    """Export both models under `out`, then print each row and the ratios."""
    rows = []

    tokenizer = WordPieceTokenizer.learn(train_texts, 8000)
    clf = models.build("imdb_small", vocabulary_size=tokenizer.vocabulary_size, sequence_length=256,
                       class_names=["negative", "positive"], preprocessor=TextClassifierPreprocessor(tokenizer, 256))
    path = export.export_for_serving(clf, f"{out}/imdb")
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    call = lambda batch: serve(text=tf.constant(batch))  # noqa: E731
    report(rows, "classifier export (plain TF)", timed(call, singles), timed(call, batches, 2))
    predict = lambda batch: clf.predict(tokenizer.encode(batch, 256), verbose=0)  # noqa: E731
    report(rows, "classifier keras predict", timed(predict, singles), timed(predict, batches, 2))
    on_batch = lambda batch: clf.predict_on_batch(tokenizer.encode(batch, 256))  # noqa: E731
    report(rows, "classifier keras predict_on_batch", timed(on_batch, singles), timed(on_batch, batches, 2))

    short = lambda group: [" ".join(t.split()[:12]) for t in group]  # noqa: E731
    target = WordPieceTokenizer.learn(train_texts[:1000], 4000)
    translator = models.build("transformer_small", sequence_length=64,
                              preprocessor=TranslatorPreprocessor(tokenizer, target, 40))
    path = export.export_for_serving(translator, f"{out}/translator", max_length=40, xla=True)
    served = tf.saved_model.load(str(path)).signatures
    serve_tr, serve_xla = served["serving_default"], served["translate_xla"]
    tr_singles, tr_batches = [short(s) for s in singles[:40]], [short(b) for b in batches[:3]]

    def generate(batch):  # translate: generate with the export's defaults (guards, number slots) + detokenize
        return [t.encode() for t in translator.translate(batch, max_length=40)]

    for serve in (serve_tr, serve_xla):
        exported = serve(text=tf.constant(tr_batches[0]))["translation"].numpy()
        assert exported.tolist() == generate(tr_batches[0]).tolist(), "export and keras disagree"
    call_tr = lambda batch: serve_tr(text=tf.constant(batch))  # noqa: E731
    call_xla = lambda batch: serve_xla(text=tf.constant(batch))  # noqa: E731
    report(rows, "translator export greedy (plain TF)", timed(call_tr, tr_singles), timed(call_tr, tr_batches, 1))
    report(rows, "translator keras translate greedy", timed(generate, tr_singles), timed(generate, tr_batches, 1))
    report(rows, "translator export translate_xla (XLA)", timed(call_xla, tr_singles),
           timed(call_xla, tr_batches, 1))

    ratio = rows[0][1] / rows[1][1]
    print(f"\nclassifier single-request p50: export / keras predict = {ratio:.2f}x "
          f"(target <= 1.5x); export / predict_on_batch = {rows[0][1] / rows[2][1]:.2f}x")
    print(f"translator single-request p50: export / keras generate = {rows[3][1] / rows[4][1]:.2f}x "
          f"(plain TF), {rows[5][1] / rows[4][1]:.2f}x (translate_xla; target <= 1.2x)")
    return rows


if __name__ == "__main__":
    main()
