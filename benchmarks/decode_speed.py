"""Greedy decoding speed: kformer with its key/value cache, kformer recomputing, keras-hub.

    python benchmarks/decode_speed.py                    # every backend, 64/128 tokens, batch 1/16
    python benchmarks/decode_speed.py --backends jax --new-tokens 16 --batch-sizes 1
    python benchmarks/decode_speed.py --family causal_lm --new-tokens 128   # GPT-shaped models

`--family causal_lm` compares decoder-only models instead: a kformer
`CausalLM` and keras-hub's `GPT2CausalLM` with its `GreedySampler` (both
random weights, vocabulary 8000, hidden 256, 4 heads, ff 1024, 2 layers, 256
positions), N new tokens after a 32-token prompt (the prompt processed in one
pass, then one token a step); no stop token.

One subprocess per backend (the Keras backend is fixed per process). Each
implementation decodes exactly N new tokens (no end token is ever emitted:
its id is masked) from 32 source tokens with an equivalent random-weight
encoder-decoder (vocabulary 8000, hidden 256, 4 heads, ff 1024, 2 + 2
layers); tokens/s = batch * N / median time of a whole call after one
warm-up call that compiles, the kformer and keras-hub calls alternating
(recomputing is timed on its own: `generate` keeps one compiled loop). All
three loops are `ops.while_loop`s run through a Keras model's
`predict_on_batch` with `jit_compile=True` on TensorFlow and JAX (eager on
torch):
- kformer cache: `kformer.models.generate` (encoder and cross-attention
  keys/values once, one token a step through self-attention caches);
- kformer readable / kformer plain: the same cached loop with every step
  through the task's readable `call_with_cache` (`kformer.kernels.decoding.PAYS`
  emptied) / through the plain-matrix step (`PlainDecoder`, for every family):
  the measurement that sets `PAYS` (kformer cache is what `generate` does);
- kformer no cache: `generate(..., use_cache=False)`, the decoder re-run over
  the whole output buffer every step;
- keras-hub: `TokenAndPositionEmbedding` + `TransformerEncoder` /
  `TransformerDecoder` with their caches, decoded by `keras_hub.samplers.GreedySampler`.

Appends one row per backend, batch, length and implementation to
benchmarks/results/decode_speed.csv (`--results`), each with the command, commit,
date, machine and backend.
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

SIZES = dict(vocab=8000, hidden=256, heads=4, ff=1024, layers=2, source=32, positions=256)
IMPLS = ("kformer_cache", "kformer_plain", "kformer_readable", "kformer_no_cache", "keras_hub")
HEADER = ["family", "batch", "new_tokens", "impl", "tokens_per_s", "repeats", "error"]


def stepping(run, plain):
    """`run` with every decoding step through the plain-matrix step (`plain`) or the task's readable
    `call_with_cache` (not `plain`), whatever `PAYS` says."""
    from kformer.kernels import decoding

    pays = {backend: ("translator", "causal") for backend in ("tensorflow", "jax", "torch")} if plain else {}

    def run_stepping(*args):
        saved, decoding.PAYS = decoding.PAYS, pays
        try:
            return run(*args)
        finally:
            decoding.PAYS = saved

    return run_stepping


def kformer_runner(n):
    from kformer import models

    s = SIZES
    model = models.build("transformer_small", vocabulary_size=s["vocab"], hidden_dim=s["hidden"],
                         num_heads=s["heads"], intermediate_dim=s["ff"],
                         num_encoder_layers=s["layers"], num_decoder_layers=s["layers"],
                         sequence_length=s["positions"])

    def run(source, use_cache):
        return models.generate(model, source, max_length=n, start_token_id=1,
                               end_token_id=s["vocab"] - 1, use_cache=use_cache)

    return run


def keras_hub_runner(n):
    import keras
    import keras_hub
    from keras import ops

    s = SIZES
    head_dim = s["hidden"] // s["heads"]
    src_embed = keras_hub.layers.TokenAndPositionEmbedding(s["vocab"], s["positions"], s["hidden"])
    tgt_embed = keras_hub.layers.TokenAndPositionEmbedding(s["vocab"], s["positions"], s["hidden"])
    encoders = [keras_hub.layers.TransformerEncoder(s["ff"], s["heads"]) for _ in range(s["layers"])]
    decoders = [keras_hub.layers.TransformerDecoder(s["ff"], s["heads"]) for _ in range(s["layers"])]
    project = keras.layers.Dense(s["vocab"])

    class HubGreedy(keras.Model):
        def call(self, source):
            batch = ops.shape(source)[0]
            memory = src_embed(source)
            for layer in encoders:
                memory = layer(memory, padding_mask=ops.not_equal(source, 0))
            prompt = ops.concatenate([ops.ones((batch, 1), "int32"), ops.zeros((batch, n), "int32")], 1)
            empty_self = ops.zeros((batch, 2, n + 1, s["heads"], head_dim))
            empty_cross = ops.zeros((batch, 2, s["source"], s["heads"], head_dim))
            self_caches, cross_caches = [], []
            h = tgt_embed(prompt[:, :1])
            for layer in decoders:  # prefill: start token, cross keys/values computed once
                h, sc, cc = layer(h, memory, self_attention_cache=empty_self,
                                  self_attention_cache_update_index=0,
                                  cross_attention_cache=empty_cross,
                                  cross_attention_cache_update_index=0)
                self_caches.append(sc)
                cross_caches.append(cc)

            def next_fn(prompt, cache, index):
                self_c, cross_c = cache
                token = ops.slice(prompt, [0, index - 1], [batch, 1])
                h = tgt_embed(token, start_index=index - 1)
                updated = []
                for i, layer in enumerate(decoders):
                    h, sc, _ = layer(h, memory, self_attention_cache=self_c[i],
                                     self_attention_cache_update_index=index - 1,
                                     cross_attention_cache=cross_c[i],
                                     cross_attention_cache_update_index=None)
                    updated.append(sc)
                logits = project(h)[:, 0]
                logits = ops.where(ops.arange(s["vocab"]) >= s["vocab"] - 1, -1e9, logits)
                return logits, h, (ops.stack(updated), cross_c)

            sampler = keras_hub.samplers.GreedySampler()
            return sampler(next_fn, prompt, cache=(ops.stack(self_caches), ops.stack(cross_caches)),
                           index=1)

    model = HubGreedy()
    model.compile(jit_compile=keras.backend.backend() != "torch")

    def run(source, use_cache=True):
        return keras.ops.convert_to_numpy(model.predict_on_batch(source))[:, 1:]

    return run


def kformer_lm_runner(n):
    from kformer import models

    s = SIZES
    model = models.causal_lm(vocabulary_size=s["vocab"], sequence_length=s["positions"], hidden_dim=s["hidden"],
                             num_heads=s["heads"], intermediate_dim=s["ff"], num_layers=s["layers"])

    def run(prompt, use_cache):
        out = models.generate(model, prompt, max_length=s["source"] + n, end_token_id=None, use_cache=use_cache)
        return out[:, s["source"]:]

    return run


def keras_hub_lm_runner(n):
    import keras
    import keras_hub
    import numpy as np

    s = SIZES
    backbone = keras_hub.models.GPT2Backbone(s["vocab"], s["layers"], s["heads"], s["hidden"], s["ff"],
                                             max_sequence_length=s["positions"])
    lm = keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)
    lm.compile(sampler="greedy")

    def run(prompt, use_cache=True):
        batch = len(prompt)
        token_ids = np.concatenate([prompt, np.zeros((batch, n), "int32")], 1)
        mask = np.concatenate([np.ones_like(prompt, bool), np.zeros((batch, n), bool)], 1)
        out = lm.generate({"token_ids": token_ids, "padding_mask": mask}, stop_token_ids=None)
        return keras.ops.convert_to_numpy(out["token_ids"])[:, s["source"]:]

    return run


RUNNERS = {"translator": (kformer_runner, keras_hub_runner), "causal_lm": (kformer_lm_runner, keras_hub_lm_runner)}


def _timed(run, source, use_cache):
    start = time.perf_counter()
    run(source, use_cache)
    return time.perf_counter() - start


def worker(args):
    """Per cell: no-cache timed alone (`generate` keeps one compiled loop, so switching `use_cache`
    recompiles); then kformer-cache and keras-hub calls alternate, so load drift hits both alike."""
    import keras
    import numpy as np

    rows = []
    for n in args.new_tokens:
        make_kformer, make_hub = RUNNERS[args.family]
        kformer, hub = make_kformer(n), make_hub(n)
        plain = stepping(make_kformer(n), plain=True) if "kformer_plain" in args.impls else None  # own models,
        readable = stepping(make_kformer(n), plain=False) if "kformer_readable" in args.impls else None  # own loops
        for batch in args.batch_sizes:
            source = np.random.default_rng(0).integers(3, SIZES["vocab"] - 1,
                                                       (batch, SIZES["source"])).astype("int32")
            plan = [tuple(i for i in group if i in args.impls) for group in
                    (("kformer_no_cache",), ("kformer_cache", "kformer_plain", "kformer_readable", "keras_hub"))]
            plan = [group for group in plan if group]
            runners = {"kformer_cache": (kformer, True), "kformer_plain": (plain, True),
                       "kformer_readable": (readable, True), "kformer_no_cache": (kformer, False),
                       "keras_hub": (hub, True)}
            for group in plan:
                times, generated, errors = {i: [] for i in group}, {}, {}
                for impl in group:
                    run, use_cache = runners[impl]
                    try:  # warm-up: compiles
                        generated[impl] = int((np.asarray(run(source, use_cache)) > 0).sum())
                    except Exception as err:  # reported in the table, never a fake number
                        errors[impl] = f"{type(err).__name__}: {str(err)[:120]}"
                for _ in range(args.repeats):
                    for impl in generated:
                        run, use_cache = runners[impl]
                        times[impl].append(_timed(run, source, use_cache))
                for impl in group:
                    row = {"n": n, "batch": batch, "impl": impl}
                    row.update({"error": errors[impl]} if impl in errors else
                               {"generated": generated[impl],
                                "tokens_per_s": generated[impl] / float(np.median(times[impl]))})
                    rows.append(row)
                    print(f"  {keras.backend.backend():10s} n={n} batch={batch} {impl:16s} "
                          f"{row.get('tokens_per_s', row.get('error'))}", file=sys.stderr, flush=True)
    print("RESULT " + json.dumps({"backend": keras.backend.backend(), "family": args.family, "rows": rows}),
          flush=True)


def table(results):
    lines = ["| backend | batch | new tokens | kformer cache tok/s | plain step tok/s | readable step tok/s | "
             "kformer no-cache tok/s | keras-hub tok/s | plain / readable | cache / no-cache | kformer / keras-hub |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        keys = sorted({(r["batch"], r["n"]) for r in res["rows"]})
        for batch, n in keys:
            cell = {r["impl"]: r for r in res["rows"] if (r["batch"], r["n"]) == (batch, n)}
            speed = {k: cell.get(k, {}).get("tokens_per_s") for k in IMPLS}
            fmt = lambda k: f"{speed[k]:.0f}" if speed[k] else (  # noqa: E731
                f"failed ({cell[k]['error']})" if k in cell else "not run")
            ratio = lambda a, b: f"{speed[a] / speed[b]:.1f}x" if speed[a] and speed[b] else "-"  # noqa: E731
            lines.append(f"| {res['backend']} | {batch} | {n} | {fmt('kformer_cache')} | {fmt('kformer_plain')} | "
                         f"{fmt('kformer_readable')} | {fmt('kformer_no_cache')} | {fmt('keras_hub')} | "
                         f"{ratio('kformer_plain', 'kformer_readable')} | "
                         f"{ratio('kformer_cache', 'kformer_no_cache')} | {ratio('kformer_cache', 'keras_hub')} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--new-tokens", default="64,128")
    parser.add_argument("--batch-sizes", default="1,16")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--impls", default=",".join(IMPLS),
                        help=f"comma-separated implementations to time (default: all of {', '.join(IMPLS)})")
    parser.add_argument("--family", choices=sorted(RUNNERS), default="translator",
                        help="encoder-decoder translator or decoder-only causal LM")
    parser.add_argument("--results", type=pathlib.Path, default=provenance.results_file("decode_speed.csv"),
                        help="the CSV the rows are appended to")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.backends = args.backends.split(",")
    args.impls = args.impls.split(",")
    if set(args.impls) - set(IMPLS):
        parser.error(f"--impls: unknown {sorted(set(args.impls) - set(IMPLS))}; expected some of {', '.join(IMPLS)}")
    bad = set(args.backends) - {"tensorflow", "jax", "torch"}
    if bad:
        parser.error(f"--backends: unknown {sorted(bad)}; expected tensorflow, jax, torch")
    try:
        args.new_tokens = [int(v) for v in args.new_tokens.split(",")]
        args.batch_sizes = [int(v) for v in args.batch_sizes.split(",")]
    except ValueError:
        parser.error("--new-tokens and --batch-sizes take comma-separated integers")
    if min(args.new_tokens + args.batch_sizes + [args.repeats]) < 1:
        parser.error("--new-tokens, --batch-sizes and --repeats must be >= 1")
    if args.new_tokens and max(args.new_tokens) > SIZES["positions"] - SIZES["source"]:
        parser.error(f"--new-tokens must be at most {SIZES['positions'] - SIZES['source']}")
    if args.worker:
        return worker(args)
    results = []
    for backend in args.backends:
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        cmd = [sys.executable, __file__, "--worker", "--new-tokens",
               ",".join(map(str, args.new_tokens)), "--batch-sizes",
               ",".join(map(str, args.batch_sizes)), "--repeats", str(args.repeats), "--family", args.family,
               "--impls", ",".join(args.impls)]
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
        line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
        if out.returncode or not line:
            sys.exit(f"{backend} worker failed with exit code {out.returncode}")
        results.append(json.loads(line[-1][7:]))
    print(f"{args.family}: median of {args.repeats} calls after a compiling warm-up call "
          "(the kformer and keras-hub calls alternating)")
    print(table(results))
    for res in results:
        provenance.write_csv(args.results, HEADER, [
            (res["family"], r["batch"], r["n"], r["impl"],
             f"{r['tokens_per_s']:.1f}" if "tokens_per_s" in r else "", args.repeats, r.get("error", ""))
            for r in res["rows"]], backend=res["backend"], append=True)
    print(f"appended {sum(len(res['rows']) for res in results)} rows to {args.results}")


if __name__ == "__main__":
    main()
