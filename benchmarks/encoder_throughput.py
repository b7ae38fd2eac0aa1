"""Training throughput of an encoder classifier: kformer vs plain Keras vs keras-hub.

    python benchmarks/encoder_throughput.py                       # every backend, both configs
    python benchmarks/encoder_throughput.py --backends jax --configs small --steps 10
    python benchmarks/encoder_throughput.py --configs medium --malloc default,keep

Each backend runs in its own subprocess (the Keras backend is fixed per
process); the parent prints one table with examples/s (median step after
warm-up), ratios against plain Keras and keras-hub, and model FLOP/s as a
fraction of a float32 matmul peak measured in the same process.

The three models share sizes, data and head (the Keras "Text classification
with Transformer" example): token + learned position embedding, encoder
block(s), mean pooling, Dropout(0.1), Dense(20, relu), Dropout(0.1), Dense(2).
Residual dropout is 0.1 everywhere; keras-hub's `TransformerEncoder(dropout=0.1)`
also drops attention probabilities (its only setting), the other two do not.
Per-head size is `dim // heads` in all three. Each worker first sets glibc's
malloc as the recipes do (`--malloc keep`: `kformer.runtime.keep_freed_memory`,
no page faults on each step's large buffers) or leaves it (`default`), and on
JAX draws random bits as the recipes do (`kformer.runtime.faster_jax_random`;
`JAX_THREEFRY_PARTITIONABLE=1` in the environment keeps JAX's default).

Appends one row per backend, malloc setting and config to
benchmarks/results/encoder_throughput.csv (`--results`), each with the
command, commit, date, machine and backend; a row measured with glibc's
default malloc names it in its config (`medium, malloc default`).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402

CONFIGS = {
    "small": dict(vocab=20000, seq=200, dim=32, heads=2, ff=32, blocks=1, batch=32),
    "medium": dict(vocab=20000, seq=256, dim=256, heads=4, ff=1024, blocks=4, batch=32),
}
IMPLS = ("kformer", "plain_keras", "keras_hub")
MALLOC = ("keep", "default")  # glibc's malloc keeps freed memory (as the recipes run), or its defaults
HEADER = ["config", "kformer_ex_s", "plain_keras_ex_s", "keras_hub_ex_s", "kformer_vs_plain", "kformer_vs_keras_hub",
          "kformer_gflop_s", "matmul_peak_gflop_s"]


def train_flops(c):
    """Matmul FLOPs of one training step (forward x 3), embeddings excluded."""
    per_token = c["blocks"] * (
        2 * 4 * c["dim"] ** 2  # q, k, v, output projections
        + 2 * 2 * c["dim"] * c["ff"]  # feed-forward
        + 2 * 2 * c["seq"] * c["dim"]  # scores and weighted sum
    )
    return 3 * per_token * c["seq"] * c["batch"]


def example_embedding(c):
    """The Keras example's TokenAndPositionEmbedding layer."""
    import keras

    class TokenAndPositionEmbedding(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.token_emb = keras.layers.Embedding(c["vocab"], c["dim"])
            self.pos_emb = keras.layers.Embedding(c["seq"], c["dim"])

        def call(self, x):
            positions = self.pos_emb(keras.ops.arange(0, keras.ops.shape(x)[-1]))
            return self.token_emb(x) + positions

    return TokenAndPositionEmbedding()


def build(impl, c):
    import keras

    ids = keras.Input((c["seq"],), dtype="int32")
    if impl == "kformer":
        from kformer import blocks, layers

        x = layers.TokenAndPositionEmbedding(c["vocab"], c["seq"], c["dim"])(ids)
        for _ in range(c["blocks"]):
            x = blocks.TransformerEncoderBlock(c["heads"], c["ff"], dropout=0.1)(x)
    elif impl == "keras_hub":
        import keras_hub

        x = keras_hub.layers.TokenAndPositionEmbedding(c["vocab"], c["seq"], c["dim"])(ids)
        for _ in range(c["blocks"]):
            x = keras_hub.layers.TransformerEncoder(c["ff"], c["heads"], dropout=0.1)(x)
    else:  # the block of the Keras example, written with keras.layers only
        x = example_embedding(c)(ids)
        for _ in range(c["blocks"]):
            attn = keras.layers.MultiHeadAttention(c["heads"], c["dim"] // c["heads"])(x, x)
            x = keras.layers.LayerNormalization(epsilon=1e-6)(x + keras.layers.Dropout(0.1)(attn))
            ffn = keras.layers.Dense(c["ff"], activation="relu")(x)
            ffn = keras.layers.Dense(c["dim"])(ffn)
            x = keras.layers.LayerNormalization(epsilon=1e-6)(x + keras.layers.Dropout(0.1)(ffn))
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dropout(0.1)(x)
    x = keras.layers.Dense(20, activation="relu")(x)
    x = keras.layers.Dropout(0.1)(x)
    return keras.Model(ids, keras.layers.Dense(2)(x))


def matmul_peak(size=1024, repeats=10):
    """Median float32 GFLOP/s of the backend's own jitted matmul."""
    import keras
    import numpy as np

    a = keras.ops.convert_to_tensor(np.random.rand(size, size).astype("float32"))
    fn = keras.ops.matmul
    if keras.backend.backend() == "jax":
        import jax

        fn = jax.jit(fn)
    times = []
    for _ in range(repeats + 2):
        start = time.perf_counter()
        keras.ops.convert_to_numpy(fn(a, a))
        times.append(time.perf_counter() - start)
    return 2 * size**3 / sorted(times[2:])[len(times[2:]) // 2] / 1e9


def worker(args):
    set_process(args.malloc_mode)
    import keras
    import numpy as np

    results = {"backend": keras.backend.backend(), "malloc": args.malloc_mode, "peak_gflops": matmul_peak(),
               "rows": []}
    for name in args.configs:
        c = CONFIGS[name]
        rng = np.random.default_rng(0)
        n = c["batch"] * (args.warmup + args.steps)
        x = rng.integers(1, c["vocab"], (n, c["seq"])).astype("int32")
        y = rng.integers(0, 2, (n,))
        models, steps = {}, {impl: [] for impl in args.impls}
        for impl in args.impls:
            keras.utils.set_random_seed(0)
            models[impl] = build(impl, c)
            models[impl].compile(keras.optimizers.Adam(1e-3),
                                 keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        # Interleave the models round by round so machine noise hits all alike.
        for round_ in range(args.rounds):
            for impl in args.impls:
                stamps = []
                cb = keras.callbacks.LambdaCallback(
                    on_train_batch_end=lambda batch, logs: stamps.append(time.perf_counter()))
                start = time.perf_counter()
                models[impl].fit(x, y, batch_size=c["batch"], epochs=1, shuffle=False,
                                 verbose=0, callbacks=[cb])
                steps[impl] += list(np.diff([start] + stamps)[args.warmup:])
        for impl in args.impls:
            median = float(np.median(steps[impl]))
            results["rows"].append({
                "config": name, "impl": impl, "examples_per_s": c["batch"] / median,
                "gflops": train_flops(c) / median / 1e9, "params": models[impl].count_params(),
            })
            print(f"  {results['backend']:10s} {name:6s} {impl:11s} "
                  f"{c['batch'] / median:8.1f} ex/s", file=sys.stderr, flush=True)
    print("RESULT " + json.dumps(results), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--configs", default="small,medium")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--steps", type=int, default=10, help="measured steps per round")
    parser.add_argument("--warmup", type=int, default=2, help="steps dropped per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per model")
    add_malloc_flags(parser)
    parser.add_argument("--results", type=pathlib.Path, default=provenance.results_file("encoder_throughput.csv"),
                        help="the CSV the rows are appended to")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag, known in (("configs", CONFIGS), ("impls", IMPLS), ("backends", ("tensorflow", "jax", "torch")),
                        ("malloc", MALLOC)):
        setattr(args, flag, comma_choices(parser, flag, getattr(args, flag), known))
    if min(args.steps, args.warmup, args.rounds) < 1:
        parser.error("--steps, --warmup and --rounds must be >= 1. Received: "
                     f"{args.steps}, {args.warmup}, {args.rounds}")
    if args.worker:
        return worker(args)

    argv = ["--worker", "--configs", ",".join(args.configs), "--impls", ",".join(args.impls),
            "--steps", str(args.steps), "--warmup", str(args.warmup), "--rounds", str(args.rounds)]
    all_results = [run_worker([sys.executable, __file__, *argv, "--malloc-mode", malloc], backend)
                   for backend in args.backends for malloc in args.malloc]
    print(report(all_results, args))
    for res in all_results:
        provenance.write_csv(args.results, HEADER, csv_rows(res, args.configs), backend=res["backend"], append=True)
    print(f"appended {len(all_results) * len(args.configs)} rows to {args.results}")


def csv_rows(res, configs):
    """One worker's result -> a row of `HEADER` per config (blank where an implementation was not run)."""
    rows = []
    for name in configs:
        by_impl = {r["impl"]: r for r in res["rows"] if r["config"] == name}
        k, p, h = (by_impl.get(i, {}).get("examples_per_s") for i in IMPLS)
        flops = by_impl.get("kformer", {}).get("gflops")
        rows.append((name if res["malloc"] == "keep" else f"{name}, malloc {res['malloc']}",
                     *(f"{v:.1f}" if v else "" for v in (k, p, h)),
                     *(f"{a / b:.2f}" if a and b else "" for a, b in ((k, p), (k, h))),
                     f"{flops:.1f}" if flops else "", f"{res['peak_gflops']:.0f}"))
    return rows


def add_malloc_flags(parser):
    """`--malloc keep,default` (one row each) and the worker's hidden `--malloc-mode`."""
    parser.add_argument("--malloc", default="keep",
                        help="comma-separated keep (glibc's malloc keeps freed memory, as the recipes run), "
                             "default (the C library's settings); one row each")
    parser.add_argument("--malloc-mode", default="keep", choices=MALLOC, help=argparse.SUPPRESS)


def set_process(mode):
    """A worker's first calls, as the recipes make them before any model or op: `keep` ->
    `keep_freed_memory()`; and `faster_jax_random()` (JAX's default layout stays where the
    environment sets `JAX_THREEFRY_PARTITIONABLE`)."""
    from kformer import runtime

    if mode == "keep":
        runtime.keep_freed_memory()
    runtime.faster_jax_random()


def comma_choices(parser, flag, value, known):
    """`value` ("a,b") -> ["a", "b"]; a parser error names `--flag` and every item not in `known`."""
    values = value.split(",")
    bad = [v for v in values if v not in known]
    if bad:
        parser.error(f"--{flag.replace('_', '-')}: unknown {bad}; expected a comma-separated subset of "
                     f"{list(known)}. Received: {value!r}")
    return values


def run_worker(command, backend):
    """Run a benchmark's worker `command` under `backend`; returns the JSON of its last `RESULT ` line."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    if out.returncode or not line:
        sys.exit(f"the {backend} worker ({' '.join(command[1:])}) failed with exit code {out.returncode}")
    return json.loads(line[-1][len("RESULT "):])


def report(all_results, args):
    lines = [
        f"median step of {args.rounds} interleaved rounds x {args.steps} steps (after {args.warmup} "
        "warm-up steps each); Keras default jit_compile",
        "",
        "| backend | malloc | config | kformer ex/s | plain Keras ex/s | keras-hub ex/s | "
        "kformer / plain | kformer / keras-hub | kformer GFLOP/s (% of matmul peak) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for res in all_results:
        for name in args.configs:
            rows = {r["impl"]: r for r in res["rows"] if r["config"] == name}
            k, p, h = (rows.get(i, {}).get("examples_per_s") for i in IMPLS)
            ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "-"  # noqa: E731
            fmt = lambda v: f"{v:.1f}" if v else "-"  # noqa: E731
            flops = rows.get("kformer", {}).get("gflops")
            util = f"{flops:.1f} ({100 * flops / res['peak_gflops']:.0f}% of {res['peak_gflops']:.0f})" \
                if flops else "-"
            lines.append(f"| {res['backend']} | {res['malloc']} | {name} | {fmt(k)} | {fmt(p)} | {fmt(h)} | "
                         f"{ratio(k, p)} | {ratio(k, h)} | {util} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
