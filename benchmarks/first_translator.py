"""The first translator a user trains, at full size: the README's five lines and the quickstart notebook.

    python -m benchmarks.first_translator                          # both, one epoch over the 20,000 pairs
    python -m benchmarks.first_translator --what five_lines --epochs 3

Each trains the tiny translator on the bundled English-Spanish pairs as its
user would (the README's five lines as written, or the notebook top to
bottom in a kernel with its `EPOCHS` and `TRANSLATION_PAIRS` parameters set),
then prints its validation loss (label-smoothed cross-entropy on the 500
bundled validation pairs) and the translations it printed. After one epoch
over all 20,000 pairs the loss must be below `BOUNDS` (uniform guessing over
the 4,000-piece vocabulary scores ln(4000) = 8.3); the script exits 1 when it
is not. Other settings are reported without a bound. Runs on the backend
`KERAS_BACKEND` names (the notebook: TensorFlow, its own default). Appends one row
per run to benchmarks/results/first_translator.csv (`--results`), with the
command, commit, date, machine and backend. The test suite runs the five
lines on 4,000 pairs (and the notebook on 1,000), where only the translations
are checked.
"""

import argparse
import contextlib
import io
import math
import pathlib
import re
import sys
import time

from benchmarks import encoder_throughput, notebooks, provenance

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
ALL_PAIRS = 20_000  # the bundled train split
# The most validation loss one epoch over all pairs may leave (measured: benchmarks/results/first_translator.csv).
BOUNDS = {"five_lines": 5.6, "quickstart": 5.5}
HEADER = ["what", "pairs", "epochs", "val_loss", "bound", "seconds"]


def five_lines():
    """The README's "Five lines" block, as a user copies it."""
    readme = README.read_text(encoding="utf-8")
    section = readme[readme.index("## Five lines"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run_five_lines(epochs, pairs):
    """Run the five lines with `epochs` over the first `pairs` pairs: (translations printed, validation loss)."""
    from kformer.data import translation

    code = five_lines()
    assert "epochs=3" in code and 'load_split("train")' in code, code
    code = code.replace("epochs=3", f"epochs={epochs}").replace(
        'load_split("train")', f'load_split("train", max_examples={pairs})')
    printed, namespace = io.StringIO(), {}
    with contextlib.redirect_stdout(printed):
        exec(code, namespace)  # noqa: S102
    translations = eval(printed.getvalue().strip().splitlines()[-1])  # noqa: S307  (the printed list of str)
    val_loss = namespace["translator"].evaluate(*translation.load_split("validation"), batch_size=64, verbose=0)
    return translations, float(val_loss)


def run_notebook(parameters, timeout=900):
    """Run the quickstart top to bottom, `parameters` (name: value) set after its tagged cell.

    Returns the executed cells' outputs as one text (printed text and plain results) and the number of
    PNG images they show. The kernel inherits this environment and runs in notebooks/.
    """
    return notebooks.printed(notebooks.execute(NOTEBOOK, parameters, timeout=timeout))


def notebook_val_loss(outputs):
    """The validation loss the notebook prints after its last epoch."""
    return float(re.search(r"validation loss after epoch \d+: ([0-9.]+)", outputs).group(1))


def notebook_translations(outputs):
    """The translations of the notebook's three example sentences (`'source' -> 'translation'`)."""
    return re.findall(r"-> '([^']*)'", outputs)


def measure(what, epochs, pairs):
    """{what, pairs, epochs, val_loss, bound, seconds, translations} for one run."""
    start = time.perf_counter()
    if what == "five_lines":
        translations, val_loss = run_five_lines(epochs, pairs)
    else:
        outputs, _ = run_notebook({"EPOCHS": epochs, "TRANSLATION_PAIRS": pairs})
        translations, val_loss = notebook_translations(outputs), notebook_val_loss(outputs)
    bound = BOUNDS[what] if (epochs, pairs) == (1, ALL_PAIRS) else None
    return {"what": what, "pairs": pairs, "epochs": epochs, "val_loss": val_loss, "bound": bound,
            "seconds": time.perf_counter() - start, "translations": translations}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--what", default=",".join(BOUNDS), help=f"comma-separated, of {', '.join(BOUNDS)}")
    parser.add_argument("--epochs", type=int, default=1, help="training epochs (the bounds hold for 1)")
    parser.add_argument("--pairs", type=int, default=ALL_PAIRS,
                        help=f"train on the first N bundled pairs (default and bound: all {ALL_PAIRS:,})")
    parser.add_argument("--results", type=pathlib.Path, default=provenance.results_file("first_translator.csv"),
                        help="the CSV the rows are appended to")
    args = parser.parse_args(argv)
    whats = encoder_throughput.comma_choices(parser, "what", args.what, BOUNDS)
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1. Received: --epochs {args.epochs}")
    if not 64 <= args.pairs <= ALL_PAIRS:
        parser.error(f"--pairs must be between 64 and {ALL_PAIRS}. Received: --pairs {args.pairs}")

    runs = [measure(what, args.epochs, args.pairs) for what in whats]
    print("| what | pairs | epochs | validation loss | bound | seconds |\n|---|---|---|---|---|---|")
    rows = []
    for run in runs:
        bound = "-" if run["bound"] is None else f"< {run['bound']}"
        print(f"| {run['what']} | {run['pairs']} | {run['epochs']} | {run['val_loss']:.3f} | {bound} | "
              f"{run['seconds']:.0f} |")
        print(f"  translations: {run['translations']}")
        rows.append([run["what"], run["pairs"], run["epochs"], round(run["val_loss"], 4),
                     "" if run["bound"] is None else run["bound"], round(run["seconds"], 1)])
    provenance.write_csv(args.results, HEADER, rows, append=True)
    over = [run for run in runs if run["bound"] is not None and not run["val_loss"] < run["bound"]]
    for run in over:
        print(f"{run['what']}: validation loss {run['val_loss']:.3f} is not below {run['bound']}", file=sys.stderr)
    if over or not all(math.isfinite(run["val_loss"]) for run in runs):
        raise SystemExit(1)
    return runs


if __name__ == "__main__":
    main()
