"""Transcription speed of a Whisper checkpoint: kformer's `SpeechToText.generate` against transformers'.

    python -m benchmarks.whisper_decode                        # every backend, 1 and 8 recordings of 5 s
    python -m benchmarks.whisper_decode --backends torch --batch-sizes 1 --new-tokens 8 --size tiny

A random-weight `WhisperForConditionalGeneration` of whisper-tiny's shape (`--size tiny-published`: 4 + 4
layers, width 384, 6 heads, feed-forward 1,536, vocabulary 51,865, 80 mel bins; `tiny`: 2 + 2 layers, width
64, vocabulary 1,000) is saved once and loaded by `kformer.models.from_pretrained` in one subprocess per
Keras backend. Each call transcribes 16 kHz waveforms of 5 s (noise), greedy, from the forced prompt
`<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>`: transformers from its feature extractor's
log-mel (timed with it) through `generate(min_new_tokens=max_new_tokens)`, kformer from the waveforms
(its first layer computes the features) with a stop id that never comes, so both decode exactly
`--new-tokens` tokens. Seconds are the median of `--repeats` whole calls after one warm-up call
(compiling, on TensorFlow and JAX). The ratio is transformers' seconds over kformer's (above 1: kformer
is faster); transformers runs on torch on this CPU with its default threads.

Appends one row per backend and batch size to benchmarks/results/whisper_decode.csv (`--results`), with
the command, commit, date and machine.
"""

import argparse
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402
from backend_runs import report, run_worker, timed  # noqa: E402

SIZES = {"tiny-published": dict(d_model=384, layers=4, heads=6, ffn=1536, vocab=51865),
         "tiny": dict(d_model=64, layers=2, heads=4, ffn=128, vocab=1000)}
SECONDS = 5.0
RATE = 16000
WINDOW = 30 * RATE
HEADER = ["size", "batch", "seconds_of_audio", "new_tokens", "kformer_seconds", "transformers_seconds", "ratio",
          "repeats"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="tensorflow,jax,torch")
    p.add_argument("--batch-sizes", default="1,8")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--size", choices=sorted(SIZES), default="tiny-published")
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("whisper_decode.csv"))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: run one backend on a checkpoint
    args = p.parse_args(argv)
    for name in ("new_tokens", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def special_ids(vocab):
    """`<|endoftext|>`, `<|startoftranscript|>`, `<|en|>`, `<|transcribe|>`, `<|notimestamps|>`: the last ids."""
    return {"end": vocab - 5, "start": vocab - 4, "en": vocab - 3, "transcribe": vocab - 2, "notimestamps": vocab - 1}


def make_checkpoint(folder, size):
    import torch
    import transformers

    s = SIZES[size]
    ids = special_ids(s["vocab"])
    config = transformers.WhisperConfig(
        vocab_size=s["vocab"], num_mel_bins=80, d_model=s["d_model"], encoder_layers=s["layers"],
        decoder_layers=s["layers"], encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"],
        encoder_ffn_dim=s["ffn"], decoder_ffn_dim=s["ffn"], max_source_positions=1500, max_target_positions=448,
        pad_token_id=ids["end"], bos_token_id=ids["end"], eos_token_id=ids["end"],
        decoder_start_token_id=ids["start"], suppress_tokens=None, begin_suppress_tokens=None)
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    return model


def waveforms(batch):
    import numpy as np

    audio = np.random.default_rng(batch).normal(0.0, 0.1, (batch, int(SECONDS * RATE))).astype("float32")
    return np.clip(audio, -1.0, 1.0)


def worker(args):
    """One backend: kformer's seconds for every batch size, as JSON on stdout."""
    import numpy as np

    from kformer.models.pretrained import from_pretrained

    model = from_pretrained(args.worker)
    ids = special_ids(model.vocabulary_size)
    # a stop id that is never generated (the padding-free greedy argmax never picks a suppressed id)
    config = model.generation_config.replace(
        start_token_id=ids["start"], forced_prompt_ids=(ids["en"], ids["transcribe"], ids["notimestamps"]),
        stop_token_ids=ids["end"], suppress_token_ids=(ids["end"],), max_length=3 + args.new_tokens)
    out = {}
    for batch in map(int, args.batch_sizes.split(",")):
        audio = np.pad(waveforms(batch), [(0, 0), (0, WINDOW - int(SECONDS * RATE))])  # the preprocessor's window
        out[str(batch)] = timed(lambda: model.generate(audio, config), args.repeats)
    report(out)


def transformers_seconds(model, args):
    import torch
    import transformers

    extractor = transformers.WhisperFeatureExtractor(feature_size=80)
    ids = special_ids(model.config.vocab_size)
    prompt = [ids["start"], ids["en"], ids["transcribe"], ids["notimestamps"]]
    out = {}
    for batch in map(int, args.batch_sizes.split(",")):
        audio = list(waveforms(batch))

        def call():
            features = extractor(audio, sampling_rate=RATE, return_tensors="pt").input_features
            with torch.no_grad():  # the base class's `generate`: Whisper's own needs a multilingual config
                transformers.GenerationMixin.generate(
                    model, input_features=features, decoder_input_ids=torch.tensor([prompt] * batch),
                    do_sample=False, num_beams=1, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens)
        out[str(batch)] = timed(call, args.repeats)
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
            mine = run_worker("benchmarks.whisper_decode", backend, [
                "--worker", folder, "--batch-sizes", args.batch_sizes, "--new-tokens", str(args.new_tokens),
                "--repeats", str(args.repeats)])
            for batch, seconds in mine.items():
                ratio = theirs[batch] / seconds
                rows.append((backend, [args.size, int(batch), SECONDS, args.new_tokens, round(seconds, 3),
                                       round(theirs[batch], 3), round(ratio, 2), args.repeats]))
                print(f"{backend:10} {batch:>2} recordings: kformer {seconds:7.3f} s, transformers "
                      f"{theirs[batch]:7.3f} s: {ratio:.2f}x", flush=True)
    for backend in args.backends.split(","):
        provenance.write_csv(args.results, HEADER, [row for b, row in rows if b == backend], backend=backend,
                             append=True)
    print(f"appended {len(rows)} rows to {args.results}")
    return rows


if __name__ == "__main__":
    main()
