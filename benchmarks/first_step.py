"""TensorFlow: seconds to a recipe model's first trained batch, `Task.fit` against `keras.Model.fit`.

    KERAS_BACKEND=tensorflow python -m benchmarks.first_step
    KERAS_BACKEND=tensorflow python -m benchmarks.first_step --recipes imdb,gpt --repeats 3

Keras's TensorFlow trainer, with no distribution strategy, creates the
optimizer, loss and metric variables inside the first trace of the train
step, and a `tf.function` that creates variables is traced twice. `Task.fit`
creates them from the input's spec first, so the step is traced once. Each
recipe's default preset is built and compiled as `benchmarks.recipe_steps`
builds it (the recipe's optimizer, loss and metrics) and fit for one batch,
once through each path, on fresh models in alternating order; the table
gives the median seconds from the `fit` call to the end of the first batch.
JAX and torch do not trace this way (JAX builds all state before compiling).
Appends one row per recipe to benchmarks/results/first_step.csv (`--results`),
each with the command, commit, date, machine and backend.
"""

import argparse
import pathlib
import statistics
import sys
import time

from benchmarks import encoder_throughput, provenance, recipe_steps

HEADER = ["recipe", "preset", "keras_model_fit_s", "task_fit_s", "ratio", "repeats"]


def first_batch_seconds(recipe, fit):
    """Seconds from `fit(model, ...)` to the end of its first batch, on a freshly built model."""
    import keras

    model, data, args = recipe_steps.build(recipe)
    done = []
    stamp = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: done.append(time.perf_counter()))
    x, y, *weights = data
    start = time.perf_counter()
    fit(model, x, y, sample_weight=weights[0] if weights else None, batch_size=args.batch_size,
        epochs=1, verbose=0, callbacks=[stamp])
    keras.backend.clear_session()
    return done[0] - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default=",".join(recipe_steps.RECIPES),
                        help=f"comma-separated, of {', '.join(recipe_steps.RECIPES)} (default: all)")
    parser.add_argument("--repeats", type=int, default=2, help="fits per path and recipe (median)")
    parser.add_argument("--results", type=pathlib.Path, default=provenance.results_file("first_step.csv"),
                        help="the CSV the rows are appended to")
    args = parser.parse_args(argv)
    recipes = encoder_throughput.comma_choices(parser, "recipes", args.recipes, recipe_steps.RECIPES)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1. Received: --repeats {args.repeats}")
    import keras
    import tensorflow as tf

    from kformer import models

    if keras.backend.backend() != "tensorflow":
        parser.error(f"run with KERAS_BACKEND=tensorflow (only its trainer traces twice). "
                     f"Received: backend {keras.backend.backend()!r}")
    tf.get_logger().setLevel("ERROR")
    print("| recipe | preset | keras.Model.fit s | Task.fit s | ratio |\n|---|---|---|---|---|")
    rows = []
    for recipe in recipes:
        seconds = {"keras": [], "kformer": []}
        for i in range(2 * args.repeats):
            path = ("keras", "kformer")[i % 2]
            seconds[path].append(first_batch_seconds(recipe, keras.Model.fit if path == "keras" else models.Task.fit))
        plain, ours = statistics.median(seconds["keras"]), statistics.median(seconds["kformer"])
        preset = recipe_steps.recipe_args(recipe).preset
        print(f"| {recipe} | {preset} | {plain:.1f} | {ours:.1f} | {plain / ours:.2f}x |", flush=True)
        rows.append((recipe, preset, f"{plain:.2f}", f"{ours:.2f}", f"{plain / ours:.2f}", args.repeats))
    provenance.write_csv(args.results, HEADER, rows, backend="tensorflow", append=True)
    print(f"appended {len(rows)} rows to {args.results}", file=sys.stderr)  # the table stays the last stdout line


if __name__ == "__main__":
    main()
