"""Rematerialized blocks against kept activations: peak memory and step time of a BERT-base-shaped
classifier at sequence 512.

    python benchmarks/remat.py --backends jax,torch            # bert_base, batch 4, 4 timed steps
    python benchmarks/remat.py --backends jax --preset bert_tiny --steps 2   # a quick look

For each backend, two child processes train the same `BertTextClassifier` (the preset's backbone without dropout,
`--sequence-length` tokens, random ids, AdamW) with `train_on_batch`: one built under
`models.remat_blocks()`, one without. Per process: the median time of the steps
after the first (which compiles), and the process's peak resident memory (`ru_maxrss`), which on a
CPU holds the activations kept for the backward pass. Appends one row per run to
benchmarks/results/remat.csv (`--results`).
"""

import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
HEADER = ["preset", "remat", "batch_size", "sequence_length", "step_ms", "peak_rss_mb", "steps", "loss_first_step"]


def child(args):
    """Build, compile and time `args.steps` training steps; print one JSON line."""
    import keras
    import numpy as np

    from kformer import models

    keras.utils.set_random_seed(0)
    with models.remat_blocks() if args.remat else contextlib.nullcontext():
        backbone = models.bert(preset=args.preset, sequence_length=args.sequence_length, dropout=0.0)
        task = models.bert_text_classifier(backbone, num_classes=2)
    task.compile(optimizer=keras.optimizers.AdamW(1e-4),
                 loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    ids = rng.integers(1, backbone.vocabulary_size, (args.batch_size, args.sequence_length)).astype("int32")
    batch = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones(ids.shape, bool)}
    labels = np.arange(args.batch_size) % 2
    times, losses = [], []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        losses.append(float(task.train_on_batch(batch, labels)))
        times.append(time.perf_counter() - start)
    print(json.dumps({"step_ms": 1000 * float(np.median(times[1:])), "loss_first_step": losses[0]}), flush=True)


def run(backend, args, remat):
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", f"--preset={args.preset}",
               f"--batch-size={args.batch_size}", f"--sequence-length={args.sequence_length}",
               f"--steps={args.steps}", *(["--remat"] if remat else [])]
    child_process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "KERAS_BACKEND": backend},
                                     stdout=subprocess.PIPE, text=True)
    output = child_process.stdout.read()
    _, status, usage = os.wait4(child_process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"KERAS_BACKEND={backend} {' '.join(command)} failed")
    result = json.loads(output.strip().splitlines()[-1])
    return [args.preset, remat, args.batch_size, args.sequence_length, round(result["step_ms"]),
            round(usage.ru_maxrss / 1024), args.steps, round(result["loss_first_step"], 5)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="jax,torch")
    parser.add_argument("--preset", default="bert_base")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sequence-length", type=int, default=512)
    parser.add_argument("--steps", type=int, default=4, help="timed steps after the first")
    parser.add_argument("--remat", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=pathlib.Path, default=provenance.results_file("remat.csv"))
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    for backend in args.backends.split(","):
        rows = []
        for remat in (False, True):
            rows.append(run(backend, args, remat))
            print(backend, dict(zip(HEADER, rows[-1])), flush=True)
        provenance.write_csv(args.results, HEADER, rows, backend=backend, append=True)


if __name__ == "__main__":
    main()
