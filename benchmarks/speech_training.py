"""The speech recipe's two training settings, measured: length-sorted batches and gradient clipping.

    python -m benchmarks.speech_training --data-dir DATA steps       # seconds a step, sort_window 1 vs 16
    python -m benchmarks.speech_training --data-dir DATA plateau     # CTC loss every 25 steps, clip-norm 0 vs 1

`steps`: `conformer_speech_tiny` trained on 640 utterances of the FSDD
training recordings (batch 32, SpecAugment, the recipe's data pipeline), one
epoch of 20 steps after two warm-up steps, with `AudioPreprocessor.dataset(sort_window=1)`
(shuffled batches of any lengths) and `sort_window=16` (the default: each run
of 16 batches' recordings sorted by length).

`plateau`: the recipe's model, 3,000 training utterances, AdamW at 2e-3 warming
up over 150 of 1,504 steps (the recipe's schedule for 16 epochs), 250 steps,
without and with `global_clipnorm=1.0`; prints the mean loss of every 25
steps. A CTC model first learns to emit only blanks (a per-token loss near
2.8 here) and leaves that plateau when it starts emitting digits.

Prints its figures and appends them, one row per setting, to
benchmarks/results/speech_training.csv (`--results`) with the command,
commit, date, machine and backend; the decisions they back are summarized in
benchmarks/results/decisions.csv.
"""

import argparse
import pathlib
import time

import keras

from benchmarks import provenance
from kformer import models
from kformer.data import spoken_digits
from kformer.data.preprocessors import AudioPreprocessor

STEP_UTTERANCES = 640  # 20 batches of 32
PLATEAU_UTTERANCES, PLATEAU_CHUNKS, CHUNK_STEPS = 3000, 10, 25


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("steps", "plateau"))
    p.add_argument("--data-dir", default=None, help="folder holding fsdd/ (default: the bundled sample)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--results", type=pathlib.Path, default=provenance.results_file("speech_training.csv"),
                   help="the CSV the rows are appended to")
    return p.parse_args(argv)


HEADER = ["what", "setting", "seconds_a_step", "loss_every_25_steps", "data", "seed"]


def model_and_data(args, count):
    keras.utils.set_random_seed(args.seed)
    recordings = spoken_digits.load_recordings("train", args.data_dir)
    audio, texts = spoken_digits.make_utterances(recordings, count=count, seed=args.seed)
    model = models.build("conformer_speech_tiny", preprocessor=AudioPreprocessor(num_mel_bins=40))
    return model, audio, model.encode_transcripts(texts)


def seconds_a_step(args, sort_window):
    model, audio, labels = model_and_data(args, STEP_UTTERANCES)
    ds = model.preprocessor.dataset(audio, labels, batch_size=32, shuffle=True, augment=True, seed=args.seed,
                                    sort_window=sort_window)
    model.compile(models.adamw(2e-3, 1000))
    model.fit(ds.take(2), epochs=1, verbose=0)
    start = time.time()
    model.fit(ds, epochs=1, verbose=0)
    return (time.time() - start) / int(ds.cardinality())


def plateau(args, clip_norm):
    model, audio, labels = model_and_data(args, PLATEAU_UTTERANCES)
    ds = model.preprocessor.dataset(audio, labels, batch_size=32, shuffle=True, augment=True, seed=args.seed)
    model.compile(models.adamw(2e-3, 1504, global_clipnorm=clip_norm))
    history = model.fit(ds.repeat(), steps_per_epoch=CHUNK_STEPS, epochs=PLATEAU_CHUNKS, verbose=0)
    return [round(loss, 2) for loss in history.history["loss"]]


def main(argv=None):
    args = parse_args(argv)
    data = args.data_dir or "bundled sample"
    print(f"backend {keras.backend.backend()}, data {data}")
    rows = []
    if args.what == "steps":
        for sort_window in (1, 16):
            seconds = seconds_a_step(args, sort_window)
            print(f"sort_window={sort_window}: {seconds:.3f} s a step", flush=True)
            rows.append(["steps", f"sort_window={sort_window}", round(seconds, 3), "", data, args.seed])
    else:
        for clip_norm in (None, 1.0):
            losses = plateau(args, clip_norm)
            print(f"global_clipnorm={clip_norm}: loss every {CHUNK_STEPS} steps {losses}", flush=True)
            rows.append(["plateau", f"global_clipnorm={clip_norm}", "", " ".join(map(str, losses)), data, args.seed])
    provenance.write_csv(args.results, HEADER, rows, backend=keras.backend.backend(), append=True)
    print(f"appended {len(rows)} rows to {args.results}")


if __name__ == "__main__":
    main()
