"""Decoding speed of a Marian (OPUS-MT) checkpoint: kformer's `generate` against transformers' `generate`.

    python -m benchmarks.marian_decode                          # every backend, batch 1 and 16, greedy and beam 4
    python -m benchmarks.marian_decode --backends torch --batch-sizes 1 --new-tokens 16 --size tiny

A random-weight `MarianMTModel` of the OPUS-MT shape (`--size base`: 6 + 6 layers, width 512, 8 heads,
feed-forward 2048, vocabulary 58,101; `tiny`: 2 + 2 layers, width 64, vocabulary 1,000) is saved once
and loaded by `kformer.models.from_pretrained` in one subprocess per Keras backend. Its
`final_logits_bias` holds `</s>` far down, so every call decodes exactly `--new-tokens` tokens from
32 source tokens, as transformers does with `min_new_tokens` equal to `max_new_tokens` (same
work on both sides: no early stop). Seconds are the median of `--repeats` whole calls after one
warm-up call (compiling, on TensorFlow and JAX); kformer and transformers alternate on the torch row.
The ratio is transformers' seconds over kformer's (above 1: kformer is faster). transformers runs
on torch on this CPU with its default threads.

Appends one row per backend, batch size and strategy to benchmarks/results/marian_decode.csv
(`--results`), with the command, commit, date and machine.
"""

import argparse
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402
from backend_runs import report, run_worker, timed  # noqa: E402

SIZES = {"base": dict(d_model=512, layers=6, heads=8, ffn=2048, vocab=58101),
         "tiny": dict(d_model=64, layers=2, heads=4, ffn=128, vocab=1000)}
SOURCE_TOKENS = 32
HEADER = ["size", "batch", "strategy", "new_tokens", "kformer_seconds", "transformers_seconds", "ratio", "repeats"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="tensorflow,jax,torch")
    p.add_argument("--batch-sizes", default="1,16")
    p.add_argument("--strategies", default="greedy,beam")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--size", choices=sorted(SIZES), default="base")
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("marian_decode.csv"))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: run one backend on a checkpoint
    args = p.parse_args(argv)
    for name in ("new_tokens", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def make_checkpoint(folder, size):
    """A random MarianMTModel whose `</s>` (id 0) is never the best token, saved to `folder`."""
    import torch
    import transformers

    s = SIZES[size]
    pad = s["vocab"] - 1
    config = transformers.MarianConfig(
        vocab_size=s["vocab"], decoder_vocab_size=s["vocab"], d_model=s["d_model"], encoder_layers=s["layers"],
        decoder_layers=s["layers"], encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"],
        encoder_ffn_dim=s["ffn"], decoder_ffn_dim=s["ffn"], max_position_embeddings=512, activation_function="swish",
        scale_embedding=True, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=None)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, 0] = -1e4  # no `</s>`: every call decodes all its tokens
    model.generation_config.bad_words_ids = [[pad]]
    model.save_pretrained(folder, safe_serialization=True)
    return model


def sources(batch, vocab):
    import numpy as np

    ids = np.random.default_rng(batch).integers(2, vocab - 1, (batch, SOURCE_TOKENS)).astype("int32")
    ids[:, -1] = 0  # `</s>` ends each source, as the tokenizer writes it
    return ids


def worker(args):
    """One backend: kformer's seconds for every (batch, strategy), as JSON on stdout."""
    from kformer.models.pretrained import from_pretrained

    model = from_pretrained(args.worker)
    vocab = model.decoder_embedding.vocabulary_size
    out = {}
    for batch in map(int, args.batch_sizes.split(",")):
        for strategy in args.strategies.split(","):
            ids = sources(batch, vocab)
            out[f"{batch},{strategy}"] = timed(lambda: model.generate(
                ids, max_length=args.new_tokens, strategy=strategy, num_beams=4, start_token_id=model.padding_id,
                end_token_id=0), args.repeats)
    report(out)


def transformers_seconds(model, args):
    import torch

    out = {}
    for batch in map(int, args.batch_sizes.split(",")):
        for strategy in args.strategies.split(","):
            ids = torch.tensor(sources(batch, model.config.vocab_size), dtype=torch.long)
            beams = 4 if strategy == "beam" else 1

            def call():
                with torch.no_grad():
                    model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=beams,
                                   do_sample=False, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                   length_penalty=1.0)
            out[f"{batch},{strategy}"] = timed(call, args.repeats)
    return out


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    with tempfile.TemporaryDirectory() as folder:
        reference = make_checkpoint(folder, args.size)
        theirs = transformers_seconds(reference, args)
        rows = []
        for backend in args.backends.split(","):
            mine = run_worker("benchmarks.marian_decode", backend, [
                "--worker", folder, "--batch-sizes", args.batch_sizes, "--strategies", args.strategies,
                "--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats)])
            for key, seconds in mine.items():
                batch, strategy = key.split(",")
                ratio = theirs[key] / seconds
                rows.append((backend, [args.size, int(batch), strategy, args.new_tokens, round(seconds, 3),
                                       round(theirs[key], 3), round(ratio, 2), args.repeats]))
                print(f"{backend:10} batch {batch:>2} {strategy:6} kformer {seconds:7.3f} s, transformers "
                      f"{theirs[key]:7.3f} s: {ratio:.2f}x", flush=True)
    for backend in args.backends.split(","):
        provenance.write_csv(args.results, HEADER, [row for b, row in rows if b == backend], backend=backend,
                             append=True)
    print(f"appended {len(rows)} rows to {args.results}")
    return rows


if __name__ == "__main__":
    main()
