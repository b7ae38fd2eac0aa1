"""Mixture of experts vs dense: `gpt_moe_tiny` against `gpt_tiny` at the same FLOPs per token and wall budget.

    KERAS_BACKEND=jax python benchmarks/moe_vs_dense.py --budget 300        # IMDB unlabeled, JAX
    python benchmarks/moe_vs_dense.py --budget 20 --max-examples 400       # quick look
    python benchmarks/moe_vs_dense.py --simulate-devices 8 --steps 6       # expert parallelism, 8 CPU devices

Both models are trained from the same seed on the same windows of the IMDB
unlabeled reviews (`--data-dir`, default the full 50k set in
/work/shared/data when present, else the bundled sample; the first
`--max-examples` reviews, a seeded 5 % held out, a WordPiece vocabulary
learned on the rest), with the same AdamW, batch and sequence length, for
`--budget` seconds of training each (or `--max-steps` steps, if sooner). The
two models take turns of `--chunk` steps, so a busy shared machine slows both
alike; the first step of each (compilation) is not counted. The default
20,000 reviews hold more windows than a 300-second budget trains on, so
neither model sees a window
twice (the run prints how many passes it made). Every `--eval-every` steps
both are scored on the held-out windows (outside the budget): the curve goes
to benchmarks/results/moe_vs_dense_curve.csv and, with `--figure`, to a plot
of validation perplexity against training tokens (the quality a token buys)
and against training seconds (what the wall budget buys). At the end each is
scored on the held-out windows: validation perplexity, training (per wall and per CPU second of
this process: the machine is shared) and evaluation tokens per second,
parameters (all, and active per token), FLOPs per token (nominal: the
matmuls a token needs; as computed: this MoE's dense dispatch computes every
expert's `capacity` slots and the dispatch and combine einsums too).

FLOPs matching: `gpt_moe_tiny` keeps `gpt_tiny`'s first block; its second
feed-forward (128 -> 512 -> 128) becomes 8 experts 128 -> 256 -> 128 with a
top-2 router: each token passes through two experts half as wide, the dense
feed-forward's multiply-adds (plus the router's 128 x 8).

`--simulate-devices N` instead runs a child process with N simulated CPU
devices on JAX (`XLA_FLAGS=--xla_force_host_platform_device_count=N`):
`gpt_moe_tiny` (8 heads, so that attention also splits 8 ways) built under
`keras.distribution.ModelParallel` with `kformer.models.layout_map` on a
(1, N) mesh, checked to hold one expert per device, trained `--steps` steps
next to an unsharded copy from the same weights (losses compared), both timed.

Writes (appends to) benchmarks/results/moe_vs_dense.csv, one row per model
(and per simulated run), and moe_vs_dense_curve.csv, one row per model and
score, each with the command, commit, date, machine and backend.
"""

import argparse
import math
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FULL_DATA = pathlib.Path("/work/shared/data")
HEADER = ["model", "budget_s", "train_steps", "train_tokens", "train_s", "train_cpu_s", "train_tokens_per_s",
          "train_tokens_per_cpu_s",
          "eval_tokens_per_s", "validation_perplexity", "validation_tokens", "params", "active_params_per_token",
          "flops_per_token_nominal", "flops_per_token_computed", "moe_balancing_loss", "moe_dropped_fraction",
          "compile_s", "setup"]
CURVE_HEADER = ["model", "train_steps", "train_tokens", "train_s", "validation_perplexity"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=150.0, help="training seconds per model (after compiling)")
    p.add_argument("--chunk", type=int, default=10, help="steps per turn before the other model trains")
    p.add_argument("--max-steps", type=int, default=None,
                   help="also stop each model at this many training steps (the first included), if sooner")
    p.add_argument("--max-examples", type=int, default=20000, help="reviews read (then 5 %% held out)")
    p.add_argument("--data-dir", default=str(FULL_DATA) if (FULL_DATA / "imdb" / "unsup.jsonl.gz").is_file()
                   else None)
    p.add_argument("--vocabulary-size", type=int, default=8000)
    p.add_argument("--sequence-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--max-validation-windows", type=int, default=256)
    p.add_argument("--eval-every", type=int, default=100, help="training steps between validation scores")
    p.add_argument("--figure", type=pathlib.Path, default=None,
                   help="write the validation curves here (PNG), e.g. docs/results/moe_vs_dense_curves.png")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--simulate-devices", type=int, default=0, help="run the expert-parallel check on N devices")
    p.add_argument("--steps", type=int, default=6, help="training steps of the simulated-device run")
    p.add_argument("--no-write", action="store_true", help="print the rows, do not append them to the CSV")
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("budget", "chunk", "max_examples", "batch_size", "steps", "eval_every", "max_steps"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    return args


def flops_per_token(config, moe_capacity_factor=None):
    """(nominal, as computed) forward FLOPs per token: 2 x multiply-adds of every matmul, causal
    attention over a full window counted at its average length (seq + 1) / 2."""
    d, seq, vocab = config["hidden_dim"], config["sequence_length"], config["vocabulary_size"]
    attention = 2 * (4 * d * d) + 2 * 2 * d * (seq + 1) / 2  # q, k, v, out; scores and weighted sum
    nominal = computed = 2 * d * vocab  # the tied output projection
    for i in range(config["num_layers"]):
        nominal += attention
        computed += attention
        experts = config.get("num_experts", 0)
        if experts and (i + 1) % config.get("moe_every", 2) == 0:
            k, width = config.get("top_k", 2), config.get("expert_intermediate_dim") or config["intermediate_dim"]
            nominal += 2 * d * experts + k * 2 * 2 * d * width
            capacity = min(seq, math.ceil(moe_capacity_factor * k * seq / experts))
            slots_per_token = experts * capacity / seq  # every slot is computed, filled or not
            dispatch_and_combine = 2 * 2 * experts * capacity * d  # each token against every slot, twice
            computed += 2 * d * experts + slots_per_token * 2 * 2 * d * width + dispatch_and_combine
        else:
            nominal += 2 * 2 * d * config["intermediate_dim"]
            computed += 2 * 2 * d * config["intermediate_dim"]
    return round(nominal), round(computed)


def active_params(model):
    """Parameters a token uses: all, less the experts it does not visit (`num_experts - top_k` of each layer)."""
    total = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    for layer in model.experts:
        per_expert = sum(int(np.prod(w.shape[1:])) for w in
                         (layer.inner_kernel, layer.inner_bias, layer.outer_kernel, layer.outer_bias))
        total -= (layer.num_experts - layer.top_k) * per_expert
    return total


def load_windows(args):
    """(train windows, validation windows, tokenizer) from the IMDB unlabeled reviews."""
    from kformer.data import imdb, lm
    from kformer.data.preprocessors import CausalLMPreprocessor
    from kformer.data.wordpiece import WordPieceTokenizer
    from recipes.train_gpt import split_reviews

    texts, _ = imdb.load_split("unsup", args.data_dir, args.max_examples)
    train_texts, val_texts = split_reviews(texts, args.seed)
    start = time.time()
    tokenizer = WordPieceTokenizer.learn(train_texts, args.vocabulary_size)
    preprocessor = CausalLMPreprocessor(tokenizer, args.sequence_length)
    train, val = lm.packed_windows(preprocessor, train_texts), lm.packed_windows(preprocessor, val_texts)
    print(f"{len(train_texts)} training reviews -> {len(train)} windows, {len(val_texts)} held out -> "
          f"{len(val)} windows; vocabulary {tokenizer.vocabulary_size} ({time.time() - start:.0f} s)", flush=True)
    return train, val[:args.max_validation_windows], tokenizer


def build(name, vocabulary_size, args):
    import keras

    from kformer import models

    keras.utils.set_random_seed(args.seed)
    model = models.build(name, vocabulary_size=vocabulary_size, sequence_length=args.sequence_length)
    model.compile(keras.optimizers.AdamW(args.learning_rate, weight_decay=0.1, beta_2=0.95, clipnorm=1.0),
                  models.SparseCrossEntropy(), metrics=[models.SparseAccuracy()])
    return model


def compare(args):
    import keras

    train, val, tokenizer = load_windows(args)
    names = ("gpt_tiny", "gpt_moe_tiny")
    runs = {name: {"model": build(name, tokenizer.vocabulary_size, args), "steps": 0, "seconds": 0.0,
                   "cpu": 0.0, "logs": {}, "curve": []} for name in names}
    order = np.random.default_rng(args.seed).permutation(len(train))
    batches = len(order) // args.batch_size
    tokens_per_step = args.batch_size * args.sequence_length

    def batch(step):  # both models see the same batches in the same order
        rows = train[order[(step % batches) * args.batch_size:(step % batches + 1) * args.batch_size]]
        return rows[:, :-1], rows[:, 1:]

    def validation_loss(model):
        return model.evaluate(val[:, :-1], val[:, 1:], batch_size=args.batch_size, verbose=0)[0]

    for run in runs.values():  # the first step compiles: timed apart, trained on like any other
        start = time.time()
        run["model"].train_on_batch(*batch(0))
        run["compile_s"], run["steps"] = time.time() - start, 1
        run["model"].evaluate(val[:args.batch_size, :-1], val[:args.batch_size, 1:], verbose=0)  # compiles
    max_steps = args.max_steps or math.inf

    def training(run):
        return run["seconds"] < args.budget and run["steps"] < max_steps

    while any(training(run) for run in runs.values()):
        for name, run in runs.items():
            if not training(run):
                continue
            run["model"].reset_metrics()
            start, cpu = time.time(), time.process_time()  # CPU: what this process got of a shared machine
            for _ in range(min(args.chunk, max_steps - run["steps"])):
                logs = run["model"].train_on_batch(*batch(run["steps"]), return_dict=True)
                run["steps"] += 1
            float(logs["loss"])  # the step has finished (asynchronous dispatch)
            run["seconds"] += time.time() - start
            run["cpu"] += time.process_time() - cpu
            run["logs"] = {k: float(v) for k, v in logs.items()}
            if run["steps"] // args.eval_every > len(run["curve"]):  # outside the budget's clock
                run["curve"].append((run["steps"], run["seconds"], math.exp(validation_loss(run["model"]))))
        print("  ".join(f"{n}: {r['steps']} steps, {r['seconds']:.0f} s, loss {r['logs'].get('loss', 0):.3f}"
                        for n, r in runs.items()), flush=True)
    rows = []
    for name, run in runs.items():
        model = run["model"]
        start = time.time()
        val_loss = validation_loss(model)
        eval_s = time.time() - start
        if run["curve"] and run["curve"][-1][0] == run["steps"]:  # scored in the loop at this very step
            run["curve"].pop()
        run["curve"].append((run["steps"], run["seconds"], math.exp(val_loss)))
        config = {**model.get_config(), "vocabulary_size": tokenizer.vocabulary_size}
        nominal, computed = flops_per_token(config, moe_capacity_factor=config["capacity_factor"])
        timed_steps = run["steps"] - 1
        passes = run["steps"] / batches
        print(f"{name}: {run['steps']} steps = {passes:.2f} passes over the {len(train)} training windows")
        rows.append([
            name, args.budget, run["steps"], run["steps"] * tokens_per_step, round(run["seconds"], 1),
            round(run["cpu"], 1), round(timed_steps * tokens_per_step / run["seconds"]),
            round(timed_steps * tokens_per_step / run["cpu"]), round(val.shape[0] * args.sequence_length / eval_s),
            round(math.exp(val_loss), 2), val.shape[0] * args.sequence_length,
            sum(int(np.prod(w.shape)) for w in model.trainable_weights), active_params(model), nominal, computed,
            round(run["logs"]["moe_balancing_loss"], 4) if model.experts else "",
            round(run["logs"]["moe_dropped_fraction"], 4) if model.experts else "",
            round(run["compile_s"], 1),
            f"IMDB unsup first {args.max_examples} reviews ({'full set' if args.data_dir else 'bundled'}), "
            f"vocab {tokenizer.vocabulary_size}, seq {args.sequence_length}, batch {args.batch_size}, "
            f"AdamW {args.learning_rate}, turns of {args.chunk} steps, {passes:.2f} passes over "
            f"{len(train)} windows, seed {args.seed}, "
            f"{os.cpu_count()} cores shared (load {os.getloadavg()[0]:.1f} at the end)",
        ])
    curve = [[name, steps, steps * tokens_per_step, round(seconds, 1), round(perplexity, 2)]
             for name, run in runs.items() for steps, seconds, perplexity in run["curve"]]
    print(equal_steps_summary(curve))
    return rows, curve, keras.backend.backend()


def equal_steps_summary(curve):
    """'at step S (the last both reached): gpt_tiny P, gpt_moe_tiny Q' from the curve rows."""
    by_model = {}
    for name, steps, _, _, perplexity in curve:
        by_model.setdefault(name, {})[steps] = perplexity
    common = set.intersection(*(set(points) for points in by_model.values()))
    if not common:
        return "no step count both models were scored at"
    step = max(common)
    return f"at step {step} (the last both were scored at): " + ", ".join(
        f"{name} {points[step]:.2f}" for name, points in by_model.items())


def plot_curve(curve, path):
    """Validation perplexity against training tokens and against training seconds, one line per model."""
    from kformer.viz._common import pyplot

    plt = pyplot()
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(row[0] for row in curve):
        points = [row for row in curve if row[0] == name]
        for ax, x in zip(axes, (2, 3)):
            ax.plot([p[x] for p in points], [p[4] for p in points], marker="o", label=name)
    axes[0].set(xlabel="training tokens", ylabel="validation perplexity", title="at equal tokens (steps)")
    axes[1].set(xlabel="training seconds (this CPU)", title="at equal wall time")
    for ax in axes:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
        ax.grid(alpha=0.3, which="both")
        ax.legend()
    fig.suptitle("gpt_moe_tiny (top-2 of 8 experts) against dense gpt_tiny, same multiply-adds per token")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def simulate(args):
    """Expert parallelism on `args.simulate_devices` simulated devices (this process has them)."""
    import jax
    import keras

    from kformer import models

    n = args.simulate_devices
    devices = jax.devices()
    if len(devices) != n:
        raise SystemExit(f"expected {n} devices, found {len(devices)} (XLA_FLAGS not applied?)")
    sizes = dict(vocabulary_size=args.vocabulary_size, sequence_length=args.sequence_length, num_heads=8,
                 dropout=0.0)  # 8 heads of 16: attention splits over the 8 devices too; no dropout masks
    rng = np.random.default_rng(args.seed)
    data = rng.integers(1, args.vocabulary_size, (args.steps, args.batch_size, args.sequence_length + 1))

    def step(model, window):
        return float(model.train_on_batch(window[:, :-1], window[:, 1:], return_dict=True)["loss"])

    def train(model):
        model.compile(keras.optimizers.AdamW(args.learning_rate), models.SparseCrossEntropy())
        start = time.time()
        losses = [step(model, d) for d in data[:1]]  # compiles
        compile_s, start = time.time() - start, time.time()
        losses += [step(model, d) for d in data[1:]]
        return losses, compile_s, time.time() - start

    keras.distribution.set_distribution(None)
    keras.utils.set_random_seed(args.seed)
    plain = models.build("gpt_moe_tiny", **sizes)
    weights = plain.get_weights()
    plain_losses, plain_compile, plain_s = train(plain)
    mesh = keras.distribution.DeviceMesh((1, n), ["batch", "model"], devices)
    keras.distribution.set_distribution(keras.distribution.ModelParallel(
        layout_map=models.layout_map("gpt_moe_tiny", mesh, **sizes), batch_dim_name="batch"))
    sharded = models.build("gpt_moe_tiny", **sizes)
    sharded.set_weights(weights)
    kernel = sharded.experts[0].inner_kernel.value
    shards = sorted({tuple(s.data.shape) for s in kernel.addressable_shards})
    holders = len({s.device for s in kernel.addressable_shards})
    sharded_losses, sharded_compile, sharded_s = train(sharded)
    keras.distribution.set_distribution(None)
    gap = max(abs(a - b) for a, b in zip(plain_losses, sharded_losses))
    print(f"expert inner kernel {tuple(kernel.shape)} -> shards {shards} on {holders} devices; "
          f"losses 1 device {np.round(plain_losses, 4).tolist()} vs {n} devices "
          f"{np.round(sharded_losses, 4).tolist()} (max gap {gap:.2e})", flush=True)
    tokens = (args.steps - 1) * args.batch_size * args.sequence_length
    note = (f"random tokens, vocab {args.vocabulary_size}, seq {args.sequence_length}, batch {args.batch_size}, "
            f"{args.steps} steps; gpt_moe_tiny with 8 heads, mesh (1, {n}); expert kernel shards {shards} on "
            f"{holders} devices; max loss gap vs 1 device {gap:.1e}; {os.cpu_count()} real cores")
    row = lambda name, seconds, compile_s, losses: [  # noqa: E731
        name, "", args.steps, args.steps * args.batch_size * args.sequence_length, round(seconds, 1), "",
        round(tokens / seconds), "", "", "", "", sum(int(np.prod(w.shape)) for w in plain.trainable_weights),
        active_params(plain), "", "", "", "", round(compile_s, 1), note]
    return [row("gpt_moe_tiny_1_device", plain_s, plain_compile, plain_losses),
            row(f"gpt_moe_tiny_{n}_simulated_devices", sharded_s, sharded_compile, sharded_losses)], "jax"


def main(argv=None):
    args = parse_args(argv)
    if args.simulate_devices and not args._child:  # devices are fixed when JAX starts: a fresh process
        env = {**os.environ, "KERAS_BACKEND": "jax",
               "XLA_FLAGS": f"--xla_force_host_platform_device_count={args.simulate_devices}"}
        command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--_child"]
        return subprocess.run(command, env=env, check=True).returncode
    if args.simulate_devices:
        (rows, backend), curve = simulate(args), []
    else:
        rows, curve, backend = compare(args)
        if args.figure:
            print(f"figure: {plot_curve(curve, args.figure)}")
    for row in rows:
        print(dict(zip(HEADER, row)))
    if not args.no_write:
        from benchmarks import provenance

        if args._child:  # the row's command is the one a user types, without the child flag
            sys.argv = [a for a in sys.argv if a != "--_child"]
        results = provenance.results_file("moe_vs_dense.csv")
        provenance.write_csv(results, HEADER, rows, backend=backend, append=True)
        print(f"appended {len(rows)} rows to {results}")
        if curve:
            curve_file = provenance.results_file("moe_vs_dense_curve.csv")
            provenance.write_csv(curve_file, CURVE_HEADER, curve, backend=backend, append=True)
            print(f"appended {len(curve)} rows to {curve_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
