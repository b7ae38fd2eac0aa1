"""A projection's forward + backward as a 3-D product and over `(batch * seq, dim)` rows.

    KERAS_BACKEND=jax python benchmarks/projection_forms.py

The measurement behind `kformer.layers.linear.over_rows` (docs/decisions.md, "over-rows"), at the
medium encoder's sizes (batch 32, 256 tokens, width 256, feed-forward 1024, 4 heads of 64): the
gradient of the output's squared sum, median of 10 calls after 2. Appends to
benchmarks/results/projection_forms.csv.
"""

import pathlib
import sys
import time

import numpy as np
from keras import ops

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402
from attention_forms import gradient_step  # noqa: E402

RESULTS = pathlib.Path(__file__).with_name("results") / "projection_forms.csv"
B, T, D, F, H, K = 32, 256, 256, 1024, 4, 64


def rows_of(t):
    return ops.reshape(t, (-1, *t.shape[2:]))


def forms():
    rng = np.random.default_rng(0)

    def arr(*shape):
        return ops.convert_to_tensor(rng.standard_normal(shape).astype("float32") * 0.3)

    x, h = arr(B, T, D), arr(B, T, H, K)
    w_ff, w_qkv, w_out = arr(D, F) / 8, arr(D, H, K) / 8, arr(H, K, D) / 8
    return {
        "feed-forward in, 3-D": (lambda x, w: ops.matmul(x, w), (x, w_ff)),
        "feed-forward in, over rows": (lambda x, w: ops.matmul(rows_of(x), w), (x, w_ff)),
        "query projection, 3-D": (lambda x, w: ops.einsum("abc,cde->abde", x, w), (x, w_qkv)),
        "query projection, over rows": (lambda x, w: ops.einsum("ac,cde->ade", rows_of(x), w), (x, w_qkv)),
        "output projection, 3-D": (lambda h, w: ops.einsum("abcd,cde->abe", h, w), (h, w_out)),
        "output projection, over rows": (lambda h, w: ops.einsum("acd,cde->ae", rows_of(h), w), (h, w_out)),
    }


def main(argv=None):
    import keras

    rows = []
    for name, (fn, args) in forms().items():
        step, sync = gradient_step(lambda *a, fn=fn: fn(*a[:2]) + 0 * ops.sum(a[2]))
        args = (*args, ops.zeros(()))  # gradient_step differentiates three arguments
        times = []
        for _ in range(12):
            start = time.perf_counter()
            sync(step(*args))
            times.append(time.perf_counter() - start)
        ms = float(np.median(times[2:]) * 1e3)
        rows.append((name, f"{ms:.1f}"))
        print(f"{keras.backend.backend():10s} {name:32s} {ms:6.1f} ms")
    provenance.write_csv(RESULTS, ["form", "ms_forward_backward"], rows, append=True)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
