"""Quantized against float: a trained text classifier's test accuracy, file sizes and served latency.

    python -m recipes.train_imdb                                       # the main job: saved_models/imdb_bigram/1
    python benchmarks/quantization.py saved_models/imdb_bigram/1       # float, int8 and int4 side by side

For the float task and each `--modes` entry (`task.quantize(mode)` on a fresh
load of the same file):
- test accuracy on the IMDB test split (`--data-dir` for the full one, else
  the bundled 2,000 reviews; `--max-test-examples` to cut it), predicted in
  process from raw text;
- the `.keras` file's size, after checking that it loads back with the same
  probabilities;
- the TF Serving SavedModel (`export_for_serving`): its size, the largest
  difference between its probabilities and the in-process ones on the first
  32 test reviews, and the p50 of `--single` one-review requests through
  `signatures["serving_default"]` loaded with `tf.saved_model.load` (the
  graph a stock TF Serving runs; no server process or network in the time).

Appends one row per mode to benchmarks/results/quantization.csv (`--results`), each with the command,
commit, date, machine and backend.

A language model (`python -m recipes.train_gpt`, then this script on its version folder) gets its
rows in benchmarks/results/quantization_lm.csv instead: the validation perplexity on the recipe's own
held-out reviews (the same split and windows as the recipe), the `.keras` file and the SavedModel sizes.
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(1, str(pathlib.Path(__file__).resolve().parents[1]))  # `recipes` (a language model's split)
import provenance  # noqa: E402

HEADER = ["mode", "test_accuracy", "test_examples", "keras_mb", "saved_model_mb", "served_max_abs_diff",
          "served_p50_ms", "single_requests"]


def size_mb(path):
    path = pathlib.Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def measure(path, mode, texts, labels, single, work):
    """One row: the task at `path`, quantized as `mode` (None: float)."""
    from kformer import export, models

    task = models.load(path)
    if mode is not None:
        task.quantize(mode)
    probabilities = task.predict(texts, batch_size=64, verbose=0)
    accuracy = float((probabilities.argmax(-1) == labels).mean())
    name = mode or "float"
    task.save(work / f"{name}.keras")
    reloaded = models.load(work / f"{name}.keras").predict(texts[:32], verbose=0)
    np.testing.assert_allclose(reloaded, probabilities[:32], atol=1e-5, err_msg=f"{name}: .keras reload")
    version = export.export_for_serving(task, work / name)
    served = tf.saved_model.load(str(version)).signatures["serving_default"]
    answer = served(text=tf.constant(texts[:32]))["probabilities"].numpy()
    times = []
    for i in range(5 + single):  # 5 warm-ups
        start = time.perf_counter()
        served(text=tf.constant(texts[i % len(texts): i % len(texts) + 1]))
        times.append(time.perf_counter() - start)
    return [name, round(accuracy, 4), len(texts), round(size_mb(work / f"{name}.keras"), 3),
            round(size_mb(version), 3), f"{float(np.abs(answer - probabilities[:32]).max()):.1e}",
            round(float(np.median(times[5:])) * 1000, 2), single]


LM_HEADER = ["mode", "validation_perplexity", "validation_windows", "keras_mb", "saved_model_mb"]


def measure_lm(path, mode, dataset, windows, work, saved_model=True):
    """One row for a `CausalLM`: its validation perplexity, quantized as `mode` (None: float), and its sizes
    (`saved_model=False`: no SavedModel written, its size left empty)."""
    import math

    from kformer import export, models

    task = models.load(path)
    if mode is not None:
        task.quantize(mode)
    task.compile(loss=models.SparseCrossEntropy())
    loss = task.evaluate(dataset, verbose=0)
    name = mode or "float"
    task.save(work / f"{name}.keras")
    version = export.export_for_serving(task, work / name) if saved_model else None
    return [name, round(math.exp(loss), 2), windows, round(size_mb(work / f"{name}.keras"), 3),
            "" if version is None else round(size_mb(version), 3)]


def lm_rows(path, modes, data_dir, seed, work, saved_model=True):
    """The rows of a `recipes.train_gpt` language model, on the validation reviews its `--seed` held out."""
    from kformer import models
    from kformer.data import imdb, lm
    from recipes.train_gpt import split_reviews

    texts, _ = imdb.load_split("unsup", data_dir)
    _, validation = split_reviews(texts, seed)
    windows = lm.packed_windows(models.load(path).preprocessor, validation)
    dataset = lm.windows_dataset(windows, 32)
    return [measure_lm(path, mode, dataset, len(windows), work, saved_model) for mode in modes]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a trained text classifier: a recipe's version folder or a .keras file")
    parser.add_argument("--modes", default="int8,int4", help="comma-separated quantization modes")
    parser.add_argument("--data-dir", default=None, help="full data sets (default: the bundled sample)")
    parser.add_argument("--max-test-examples", type=int, default=None)
    parser.add_argument("--single", type=int, default=50, help="one-review requests timed per mode")
    parser.add_argument("--results", type=pathlib.Path, default=provenance.results_file("quantization.csv"))
    parser.add_argument("--no-saved-model", action="store_true", help="a language model's: sizes of .keras only")
    parser.add_argument("--seed", type=int, default=1337, help="a language model's: the recipe's --seed (its split)")
    parser.add_argument("--lm-results", type=pathlib.Path, default=provenance.results_file("quantization_lm.csv"))
    args = parser.parse_args(argv)
    from kformer import models
    from kformer.data import imdb

    modes = [None, *(m for m in args.modes.split(",") if m)]
    if type(models.load(args.path)).__name__ == "CausalLM":
        with tempfile.TemporaryDirectory() as tmp:
            rows = lm_rows(args.path, modes, args.data_dir, args.seed, pathlib.Path(tmp), not args.no_saved_model)
        for row in rows:
            print(dict(zip(LM_HEADER, row)), flush=True)
        provenance.write_csv(args.lm_results, LM_HEADER, rows, append=True)
        return rows

    texts, labels = imdb.load_split("test", data_dir=args.data_dir, max_examples=args.max_test_examples)
    texts, labels = np.array(texts, dtype=object), np.asarray(labels)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            rows.append(measure(args.path, mode, texts, labels, args.single, pathlib.Path(tmp)))
            print(dict(zip(HEADER, rows[-1])), flush=True)
    provenance.write_csv(args.results, HEADER, rows, append=True)
    return rows


if __name__ == "__main__":
    main()
