"""Each recipe's training step on each backend: milliseconds, model FLOP/s and MFU.

    python -m benchmarks.recipe_steps                                  # every recipe, every backend
    python -m benchmarks.recipe_steps --backends tensorflow --jit-compile auto,true
    python -m benchmarks.recipe_steps --recipes imdb,gpt --steps 5
    python -m benchmarks.recipe_steps --recipes gpt --malloc default,keep   # glibc's malloc as is, and tuned
    python -m benchmarks.recipe_steps --dtype-policy float32,mixed_bfloat16  # the recipes' --mixed-precision on a CPU

For every recipe the model is its default preset, built and compiled as the
recipe does (same optimizer class, loss and metrics, sizes read from the
recipe's own parser), and trained with `fit` on one synthetic batch of the
recipe's default shape, repeated (so the input pipeline costs nothing). The
step time is the median of the measured steps after the warm-up steps. Each
worker first sets glibc's malloc as the recipes do (`--malloc keep`:
`kformer.runtime.keep_freed_memory`) or leaves it (`default`), draws JAX's
random bits as the recipes do (`kformer.runtime.faster_jax_random`;
`JAX_THREEFRY_PARTITIONABLE=1` keeps JAX's default), and sets
the Keras dtype policy (`--dtype-policy`; the recipes' `--mixed-precision`
is `mixed_bfloat16` on a CPU).

FLOPs are the matmul and convolution FLOPs of one training step, counted
once (JAX traces the forward pass; `dot_general` and `conv_general_dilated`
only) and multiplied by 3 (forward + backward). MFU is model FLOP/s over the
best float32 1024x1024 matmul GFLOP/s measured in the run (each worker
measures its backend's own matmul first; one common figure keeps the rows
comparable, as these peaks move by tens of percent between processes).
Each backend runs in its own subprocess; one table comes out, and one row per
recipe and worker is appended to benchmarks/results/recipe_steps.csv (`--results`),
each with the command, commit, date, machine and backend.
"""

import argparse
import json
import math
import pathlib
import sys
import time

from benchmarks import encoder_throughput, provenance

RECIPES = ("imdb", "translator", "vit_mnist", "vit_cifar10", "mini_bert", "gpt")
# Each recipe's defaults that shape a step (the benchmark imports no recipe; tests/benchmarks/
# test_recipe_steps.py checks them against the recipes' own parsers).
RECIPE_DEFAULTS = {
    "imdb": dict(preset="imdb_bigram", batch_size=32, learning_rate=1e-3, vocabulary_size=20000,
                 sequence_length=256, ema=0.99),
    "translator": dict(preset="transformer_small", batch_size=64, learning_rate=1e-3, vocabulary_size=8000,
                       sequence_length=40),
    "vit_mnist": dict(preset="vit_tiny", batch_size=128, learning_rate=1e-3, weight_decay=0.05),
    "vit_cifar10": dict(preset="vit_hybrid_cifar", batch_size=128, learning_rate=1e-3, weight_decay=0.05),
    "mini_bert": dict(preset="bert_tiny", batch_size=32, learning_rate=1e-3, vocabulary_size=8000,
                      sequence_length=128),
    "gpt": dict(preset="gpt_tiny", batch_size=32, learning_rate=1e-3, vocabulary_size=8000, sequence_length=128),
}
BACKENDS = ("tensorflow", "jax", "torch")
JIT = {"auto": "auto", "true": True, "false": False}
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def recipe_args(recipe):
    """The recipe's default arguments that shape a step (`RECIPE_DEFAULTS`) as a namespace."""
    import types

    return types.SimpleNamespace(**RECIPE_DEFAULTS[recipe])


def build(recipe, jit_compile="auto"):
    """-> (compiled model, one batch `(x, y[, sample_weight])` of numpy arrays, args)."""
    import keras
    import numpy as np

    from kformer import models

    args = recipe_args(recipe)
    rng = np.random.default_rng(0)
    batch = args.batch_size

    def ids(*shape, high=None):
        return rng.integers(1, high or args.vocabulary_size, shape).astype("int32")

    scce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if recipe == "imdb":
        model = models.build(args.preset, vocabulary_size=args.vocabulary_size,
                             sequence_length=args.sequence_length, class_names=["negative", "positive"])
        optimizer = keras.optimizers.AdamW(args.learning_rate, weight_decay=0.01, use_ema=True,  # the recipe's
                                           ema_momentum=args.ema)  # (constant --schedule, --ema 0.99)
        model.compile(optimizer, scce,
                      metrics=["accuracy"], jit_compile=jit_compile)
        data = (ids(batch, args.sequence_length), ids(batch, high=2) - 1)
    elif recipe == "translator":
        length = max(args.sequence_length, models.get_preset(args.preset)["sequence_length"])
        model = models.build(args.preset, encoder_vocabulary_size=args.vocabulary_size,
                             decoder_vocabulary_size=args.vocabulary_size, sequence_length=length)
        model.compile(keras.optimizers.Adam(args.learning_rate, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
                      models.LabelSmoothedCrossEntropy(0.1), jit_compile=jit_compile)
        n = args.sequence_length
        data = ({"encoder_token_ids": ids(batch, n), "decoder_token_ids": ids(batch, n)}, ids(batch, n))
    elif recipe.startswith("vit"):
        preset = models.get_preset(args.preset)
        model = models.build(args.preset, class_names=[str(i) for i in range(10)])
        model.compile(keras.optimizers.AdamW(args.learning_rate, weight_decay=args.weight_decay), scce,
                      metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
                               keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5")],
                      jit_compile=jit_compile)
        shape = (batch, preset["image_size"], preset["image_size"], preset["channels"])
        data = (rng.uniform(0, 255, shape).astype("float32"), ids(batch, high=11) - 1)
    elif recipe == "mini_bert":
        from kformer.data import mlm
        from kformer.data.wordpiece import MASK, SPECIAL_TOKENS

        backbone = models.build(args.preset, vocabulary_size=args.vocabulary_size,
                                sequence_length=args.sequence_length)
        model = models.bert_pretrainer(backbone)
        model.compile(keras.optimizers.AdamW(args.learning_rate, weight_decay=0.01),
                      loss={"mlm_logits": keras.losses.SparseCategoricalCrossentropy(
                                from_logits=True, reduction="mean_with_sample_weight"), "nsp_logits": scce},
                      weighted_metrics={"mlm_logits": ["sparse_categorical_accuracy"],
                                        "nsp_logits": ["sparse_categorical_accuracy"]},
                      jit_compile=jit_compile)
        arrays = {"token_ids": ids(batch, args.sequence_length),
                  "segment_ids": np.zeros((batch, args.sequence_length), "int32"),
                  "nsp_labels": ids(batch, high=2) - 1}
        dataset = mlm.make_pretraining_dataset(
            arrays, batch, vocabulary_size=args.vocabulary_size, num_special=len(SPECIAL_TOKENS),
            mask_id=SPECIAL_TOKENS.index(MASK), dynamic_masking=False)
        data = keras.tree.map_structure(lambda t: t.numpy(), next(iter(dataset)))
    elif recipe == "gpt":
        model = models.build(args.preset, vocabulary_size=args.vocabulary_size)
        model.compile(keras.optimizers.AdamW(args.learning_rate, weight_decay=0.1, beta_2=0.95, clipnorm=1.0),
                      models.SparseCrossEntropy(), metrics=[models.SparseAccuracy()], jit_compile=jit_compile)
        window = ids(batch, args.sequence_length + 1)
        data = (window[:, :-1], window[:, 1:])
    else:
        raise ValueError(f"`recipe` must be one of {RECIPES}. Received: recipe={recipe!r}")
    return model, data, args


def forward_flops(model, x):
    """Matmul + convolution FLOPs of `model(x)` (JAX backend): `dot_general` and `conv_general_dilated`."""
    import jax

    return _count(jax.make_jaxpr(lambda inputs: model(inputs, training=False))(x).jaxpr)


def _count(jaxpr):
    total = 0
    for eqn in jaxpr.eqns:
        out = math.prod(eqn.outvars[0].aval.shape)
        if eqn.primitive.name == "dot_general":
            (contracting, _), _ = eqn.params["dimension_numbers"]
            total += 2 * out * math.prod(eqn.invars[0].aval.shape[i] for i in contracting)
        elif eqn.primitive.name == "conv_general_dilated":
            kernel = eqn.invars[1].aval.shape  # FLOPs per output: 2 x the kernel's size per output channel
            total += 2 * out * math.prod(kernel) // kernel[eqn.params["dimension_numbers"].rhs_spec[0]]
        for value in eqn.params.values():  # nested calls (pjit, custom_jvp, ...)
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += _count(inner)
    return total


def step_seconds(model, data, warmup, steps):
    """Median seconds of `steps` fit steps on `data` repeated, after `warmup` steps."""
    import keras
    import numpy as np
    import tensorflow as tf

    stamps = []
    timer = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: stamps.append(time.perf_counter()))
    dataset = tf.data.Dataset.from_tensors(tuple(data)).repeat(warmup + steps)
    start = time.perf_counter()
    model.fit(dataset, epochs=1, verbose=0, callbacks=[timer])
    return float(np.median(np.diff([start] + stamps)[warmup:]))


def worker(args):
    encoder_throughput.set_process(args.malloc_mode)
    import keras
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # one fit per model: its retracing warnings say nothing here

    if args.count_flops:
        rows = {}
        for recipe in args.recipes:
            model, data, _ = build(recipe)
            rows[recipe] = {"train_flops": 3 * forward_flops(model, data[0]), "params": model.count_params()}
            keras.backend.clear_session()
        print("RESULT " + json.dumps(rows), flush=True)
        return
    result = {"backend": keras.backend.backend(), "jit_compile": args.jit, "malloc": args.malloc_mode,
              "policy": args.policy, "peak_gflops": encoder_throughput.matmul_peak(), "rows": {}}
    for recipe in args.recipes:
        keras.mixed_precision.set_global_policy(args.policy)  # again each time: clear_session resets it
        model, data, recipe_defaults = build(recipe, JIT[args.jit])
        seconds = step_seconds(model, data, args.warmup, args.steps)
        result["rows"][recipe] = {"seconds": seconds, "preset": recipe_defaults.preset,
                                  "shape": _shape(data[0])}
        print(f"  {result['backend']:10s} jit={args.jit:5s} malloc={args.malloc_mode:7s} {args.policy:14s} "
              f"{recipe:12s} {1000 * seconds:8.1f} ms",
              file=sys.stderr, flush=True)
        keras.backend.clear_session()
    print("RESULT " + json.dumps(result), flush=True)


def _shape(x):
    first = next(iter(x.values())) if isinstance(x, dict) else x
    return "x".join(str(d) for d in first.shape)


def run_worker(backend, argv):
    return encoder_throughput.run_worker([sys.executable, "-m", "benchmarks.recipe_steps", "--worker", *argv], backend)


def report(flops, results):
    """One markdown table; MFU against the best float32 matmul GFLOP/s any worker measured (one figure for all)."""
    peak = max(res["peak_gflops"] for res in results)
    lines = ["matmul peaks measured: " + ", ".join(f"{res['backend']} (jit_compile {res['jit_compile']}) "
                                                   f"{res['peak_gflops']:.0f}" for res in results)
             + f" GFLOP/s; MFU is against the best, {peak:.0f}", "",
             "| recipe | preset | batch x shape | params | GFLOP / step | backend | jit_compile | malloc | policy | "
             "ms / step | GFLOP/s | MFU |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for recipe in flops:
        for res in results:
            row = res["rows"].get(recipe)
            if row is None:
                continue
            gflop = flops[recipe]["train_flops"] / 1e9
            rate = gflop / row["seconds"]
            lines.append(f"| {recipe} | {row['preset']} | {row['shape']} | {flops[recipe]['params'] / 1e6:.2f}M | "
                         f"{gflop:.2f} | {res['backend']} | {res['jit_compile']} | {res['malloc']} | {res['policy']} | "
                         f"{1000 * row['seconds']:.0f} | "
                         f"{rate:.1f} | {100 * rate / peak:.0f} % |")
    return "\n".join(lines)


HEADER = ["recipe", "preset", "shape", "params", "gflop_per_step", "jit_compile", "malloc", "policy", "ms_per_step",
          "gflop_s", "mfu_percent", "matmul_peak_gflop_s"]


def csv_rows(flops, result, peak):
    """One worker's result -> a row of `HEADER` per recipe; MFU against `peak`, as in `report`."""
    rows = []
    for recipe, row in result["rows"].items():
        gflop = flops[recipe]["train_flops"] / 1e9
        rate = gflop / row["seconds"]
        rows.append((recipe, row["preset"], row["shape"], flops[recipe]["params"], f"{gflop:.3f}",
                     result["jit_compile"], result["malloc"], result["policy"], f"{1000 * row['seconds']:.1f}",
                     f"{rate:.1f}", f"{100 * rate / peak:.1f}", f"{peak:.0f}"))
    return rows


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--jit-compile", default="auto",
                        help="TensorFlow only (JAX always compiles, torch runs eager): comma-separated auto, true, "
                             "false, one row each")
    encoder_throughput.add_malloc_flags(parser)
    parser.add_argument("--dtype-policy", default="float32",
                        help="comma-separated Keras dtype policies (%s), one row each" % ", ".join(POLICIES))
    parser.add_argument("--steps", type=int, default=10, help="measured steps")
    parser.add_argument("--warmup", type=int, default=3, help="steps dropped first (compilation)")
    parser.add_argument("--results", type=pathlib.Path, default=provenance.results_file("recipe_steps.csv"),
                        help="the CSV the rows are appended to")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--count-flops", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--jit", default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--policy", default="float32", choices=POLICIES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag, known in (("backends", BACKENDS), ("recipes", RECIPES), ("jit_compile", tuple(JIT)),
                        ("malloc", encoder_throughput.MALLOC), ("dtype_policy", POLICIES)):
        setattr(args, flag, encoder_throughput.comma_choices(parser, flag, getattr(args, flag), known))
    if args.steps < 1 or args.warmup < 1:
        parser.error(f"--steps and --warmup must be >= 1. Received: --steps {args.steps}, --warmup {args.warmup}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    common = ["--recipes", ",".join(args.recipes), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    flops = run_worker("jax", [*common, "--count-flops"])
    results = [run_worker(backend, [*common, "--jit", jit, "--malloc-mode", malloc, "--policy", policy])
               for backend in args.backends for jit in (args.jit_compile if backend == "tensorflow" else ["auto"])
               for malloc in args.malloc for policy in args.dtype_policy]
    print(f"median of {args.steps} steps after {args.warmup} warm-up steps; FLOPs = 3 x forward matmuls")
    print(report(flops, results))
    peak = max(res["peak_gflops"] for res in results)
    for res in results:
        provenance.write_csv(args.results, HEADER, csv_rows(flops, res, peak), backend=res["backend"], append=True)
    print(f"appended {sum(len(res['rows']) for res in results)} rows to {args.results}")


if __name__ == "__main__":
    main()
