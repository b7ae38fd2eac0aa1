"""One `Dropout(0.1)` forward + backward under JAX's two Threefry layouts, alternating in one process.

    KERAS_BACKEND=jax python benchmarks/dropout_bits.py 32x256x256 [ROUNDS]

The measurement behind `kformer.runtime.faster_jax_random` (docs/decisions.md, "faster-jax-random"):
median of 20 calls per layout and round (the flag is part of jit's cache key). Appends to
benchmarks/results/dropout_bits.csv.
"""

import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402

RESULTS = pathlib.Path(__file__).with_name("results") / "dropout_bits.csv"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: dropout_bits.py SHAPE [ROUNDS]   (SHAPE like 32x256x256)")
    import jax
    import keras

    if keras.backend.backend() != "jax":
        raise SystemExit(f"run with KERAS_BACKEND=jax; Received: KERAS_BACKEND={keras.backend.backend()}")
    shape = tuple(int(n) for n in argv[0].split("x"))
    rounds = int(argv[1]) if len(argv) > 1 else 3
    x = jax.numpy.ones(shape)
    grad = jax.jit(jax.grad(lambda x, seed: jax.numpy.sum(keras.random.dropout(x, 0.1, seed=seed) ** 2)))
    seed = jax.numpy.array([0, 1337], "uint32")
    rows = []
    for round_ in range(rounds):
        for partitionable in (True, False):
            jax.config.update("jax_threefry_partitionable", partitionable)
            jax.block_until_ready(grad(x, seed))
            times = []
            for _ in range(20):
                start = time.perf_counter()
                jax.block_until_ready(grad(x, seed))
                times.append(time.perf_counter() - start)
            ms = float(np.median(times) * 1000)
            rows.append((argv[0], round_, "partitionable" if partitionable else "original", f"{ms:.2f}"))
            print(f"round {round_} partitionable={partitionable}: {ms:.2f} ms", flush=True)
    provenance.write_csv(RESULTS, ["shape", "round", "layout", "ms_forward_backward"], rows, backend="jax",
                         append=True)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
