"""The IMDB recipe's settings on full reviews and on short texts: how the main job's defaults were chosen.

    python -m benchmarks.imdb_short_text                                   # every setting, bundled sample
    python -m benchmarks.imdb_short_text --settings before,mask_windows_0.3 --data-dir DATA   # full data
    python -m benchmarks.imdb_short_text --output-dir runs --reuse         # score finished runs again

Each setting is `python -m recipes.train_imdb --no-export --no-plots` with its flags (`SETTINGS`),
trained in its own folder `<output-dir>/<setting>/`. The rows give validation accuracy (what a default
is chosen on) and test accuracy, each on the full reviews, on their first sentences and on 10-30-word
crops (the recipe's `ood_` proxies for the one-sentence reviews users type), and the seconds of fit.
`--reuse` reads a setting's finished `metrics.json` instead of training it again. The setting
`naive_bayes` is an anchor, not a recipe run: a naive Bayes classifier over the sets of lower-cased words
and word bigrams of each review (add-one smoothing), fit on the same training reviews in seconds; it
shows how much of the short-text gap the proxies themselves leave (many first sentences and crops
carry no sentiment). Rows are appended to `benchmarks/results/imdb_short_text.csv` (`--results`).
"""

import argparse
import collections
import json
import math
import pathlib
import re
import subprocess
import sys
import time

try:
    from benchmarks import provenance
except ImportError:  # run as a script from benchmarks/
    import provenance

SETTINGS = {
    "before": ["--no-mask-padding", "--window-augmentation=0"],  # imdb_bigram as the Keras example pads
    "mask": ["--mask-padding", "--window-augmentation=0"],
    "mask_crops": ["--mask-padding", "--window-augmentation=0", "--crop-augmentation"],
    "windows_0.5": ["--no-mask-padding", "--window-augmentation=0.5"],
    "mask_windows_0.3": ["--mask-padding", "--window-augmentation=0.3"],  # the main job's default
    "mask_windows_0.5": ["--mask-padding", "--window-augmentation=0.5"],
    "mask_windows_0.5_4_epochs": ["--mask-padding", "--window-augmentation=0.5", "--epochs=4"],
    "naive_bayes": [],  # the anchor (`naive_bayes`), not the recipe
}
HEADER = ["setting", "flags", "data", "val_accuracy", "val_first_sentence", "val_crop_10_30", "test_accuracy",
          "test_first_sentence", "test_crop_10_30", "fit_s"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", default=",".join(SETTINGS),
                   help=f"comma-separated names of {', '.join(SETTINGS)} (default: all)")
    p.add_argument("--data-dir", default=None, help="full data (default: the bundled sample)")
    p.add_argument("--output-dir", default="imdb_short_text_runs")
    p.add_argument("--reuse", action="store_true", help="read finished runs' metrics.json instead of training")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--results", default=None, help="CSV to append to (default: benchmarks/results/imdb_short_text.csv)")
    args = p.parse_args(argv)
    args.settings = args.settings.split(",")
    unknown = [s for s in args.settings if s not in SETTINGS]
    if unknown:
        p.error(f"--settings: unknown {unknown}; expected names from {list(SETTINGS)}")
    return args


def naive_bayes(args):
    """The anchor's metrics, keyed as the recipe's metrics.json: fit on the recipe's training split."""
    from kformer.data import imdb
    from recipes import common, train_imdb

    def features(text):
        words = re.findall(r"[a-z0-9']+|[!?]", imdb.clean_text(text).lower())
        return set(words) | {f"{a} {b}" for a, b in zip(words, words[1:])}

    splits = common.load_imdb(argparse.Namespace(tfds=False, data_dir=args.data_dir, max_examples=None,
                                                  seed=args.seed))
    (train, train_y), (val, val_y), (test, test_y) = (splits[k] for k in ("train", "validation", "test"))
    start, counts = time.time(), [collections.Counter(), collections.Counter()]
    for text, label in zip(train, train_y):
        counts[label].update(features(text))
    vocabulary = set(counts[0]) | set(counts[1])
    totals = [sum(c.values()) + len(vocabulary) for c in counts]
    weight = {w: math.log((counts[1][w] + 1) / totals[1]) - math.log((counts[0][w] + 1) / totals[0])
              for w in vocabulary}
    seconds = time.time() - start

    def accuracy(texts, labels):
        hits = [(sum(weight.get(w, 0.0) for w in features(t)) > 0) == bool(y) for t, y in zip(texts, labels)]
        return sum(hits) / len(hits)

    m = {"train_examples": len(train), "val_examples": len(val), "test_examples": len(test),
         "train_seconds": round(seconds, 1), "backend": None}  # no Keras: the row names the process's
    for prefix, texts, labels in (("val_", val, val_y), ("", test, test_y)):
        m[f"{prefix}accuracy" if prefix else "test_accuracy"] = accuracy(texts, labels)
        for name, proxy in train_imdb.short_text_proxies(texts, labels).items():  # the recipe's own proxies
            m[f"{prefix}{name}"] = accuracy(*proxy)
    return m


def run(name, args):
    """metrics.json of `name`'s newest version folder, training it first unless `--reuse` finds one."""
    folder = pathlib.Path(args.output_dir) / name
    newest = lambda: max(folder.glob("imdb_bigram/*/metrics.json"), key=lambda p: int(p.parent.name),  # noqa: E731
                         default=None)
    if not (args.reuse and newest()):
        data = ["--data-dir", args.data_dir] if args.data_dir else []
        subprocess.run([sys.executable, "-m", "recipes.train_imdb", "--no-export", "--no-plots", "--verbose=2",
                        f"--output-dir={folder}", f"--seed={args.seed}", *data, *SETTINGS[name]], check=True)
    return json.loads(newest().read_text())


def main(argv=None):
    args = parse_args(argv)
    for name in args.settings:
        m = naive_bayes(args) if name == "naive_bayes" else run(name, args)
        pct = lambda key: round(100 * m[key], 2)  # noqa: E731
        data = (f"{'full IMDB' if args.data_dir else 'bundled sample'}: {m['train_examples']:,} train, "
                f"{m['val_examples']:,} validation, {m['test_examples']:,} test reviews")
        row = [name, " ".join(SETTINGS[name]) or "-", data, pct("val_accuracy"), pct("val_ood_first_sentence_accuracy"),
               pct("val_ood_crop_10_30_accuracy"), pct("test_accuracy"), pct("ood_first_sentence_accuracy"),
               pct("ood_crop_10_30_accuracy"), m["train_seconds"]]
        print(" | ".join(map(str, row)), flush=True)
        provenance.write_csv(args.results or provenance.results_file("imdb_short_text.csv"), HEADER, [row],
                             backend=m["backend"], append=True)


if __name__ == "__main__":
    main()
