"""Attention forward + backward in four forms, the measurement behind kformer.kernels.attention.

    KERAS_BACKEND=jax python benchmarks/attention_forms.py 32 256 4 64   # batch length heads head_dim

Float32 queries, keys and values `(batch, length, heads, head_dim)`; the gradient of the output's
squared sum; median of 7 calls after 2. Forms: Keras's fused `ops.dot_product_attention`, all heads
by `einsum`, heads moved first with `matmul`, and one head at a time (what `fast_attention` runs on
a JAX CPU). Appends to benchmarks/results/attention_forms.csv (docs/decisions.md, "attention-paths").
"""

import pathlib
import sys
import time

import keras
import numpy as np
from keras import ops

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import provenance  # noqa: E402

RESULTS = pathlib.Path(__file__).with_name("results") / "attention_forms.csv"


def forms(scale, heads):
    def fused(q, k, v):
        return ops.dot_product_attention(q, k, v, scale=scale)

    def einsum_all_heads(q, k, v):
        s = ops.einsum("aecd,abcd->acbe", k, q * scale)
        return ops.einsum("acbe,aecd->abcd", ops.softmax(s, axis=-1), v)

    def heads_first(q, k, v):
        q, k, v = (ops.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))
        s = ops.matmul(q * scale, ops.transpose(k, (0, 1, 3, 2)))
        return ops.transpose(ops.matmul(ops.softmax(s, axis=-1), v), (0, 2, 1, 3))

    def one_head_at_a_time(q, k, v):
        return ops.stack([ops.einsum("bqk,bkd->bqd", ops.softmax(
            ops.einsum("bqd,bkd->bqk", q[:, :, h] * scale, k[:, :, h]), axis=-1), v[:, :, h]) for h in range(heads)],
            axis=2)

    return fused, einsum_all_heads, heads_first, one_head_at_a_time


def gradient_step(fn):
    """`fn`'s value and gradient as the backend compiles a training step, and a function that waits for it."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(jax.value_and_grad(lambda *a: (fn(*a) ** 2).sum(), argnums=(0, 1, 2))), jax.block_until_ready
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function
        def step(*a):
            with tf.GradientTape() as tape:
                tape.watch(a)
                loss = tf.reduce_sum(fn(*a) ** 2)
            return loss, tape.gradient(loss, a)

        return step, lambda out: out[0].numpy()

    def step(*a):
        a = [x.detach().requires_grad_() for x in a]
        loss = (fn(*a) ** 2).sum()
        loss.backward()
        return loss

    return step, lambda out: out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 4:
        raise SystemExit("usage: attention_forms.py BATCH LENGTH HEADS HEAD_DIM")
    batch, length, heads, head_dim = (int(v) for v in argv)
    rng = np.random.default_rng(0)
    arrays = [ops.convert_to_tensor(rng.standard_normal((batch, length, heads, head_dim)).astype("float32") * 0.3)
              for _ in range(3)]
    rows = []
    for fn in forms(head_dim ** -0.5, heads):
        step, sync = gradient_step(fn)
        times = []
        for _ in range(9):
            start = time.perf_counter()
            sync(step(*arrays))
            times.append(time.perf_counter() - start)
        ms = float(np.median(times[2:]) * 1e3)
        rows.append((batch, length, heads, head_dim, fn.__name__, f"{ms:.1f}"))
        print(keras.backend.backend(), batch, length, heads, head_dim, fn.__name__, f"{ms:.1f} ms")
    provenance.write_csv(RESULTS, ["batch", "length", "heads", "head_dim", "form", "ms_forward_backward"], rows,
                         append=True)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
