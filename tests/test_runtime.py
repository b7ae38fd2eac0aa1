import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from kformer import runtime

# Allocates, fills and frees a 64 MiB block with the C library's malloc, in a second thread (its own
# arena by default) and then in the main thread; prints the page faults of four repeats after a first one.
FAULTS = textwrap.dedent("""
    import ctypes, resource, sys, threading
    if sys.argv[1] == "keep":
        from kformer import runtime
        assert runtime.keep_freed_memory()
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    SIZE = 64 * 2**20
    def step():
        block = libc.malloc(SIZE)
        ctypes.memset(block, 1, SIZE)
        libc.free(block)
    def repeats():
        step()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(4):
            step()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    thread = threading.Thread(target=repeats)
    thread.start()
    thread.join()
    repeats()
""")


def _faults(mode):
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True).stdout
    return [int(line) for line in out.split()]


@pytest.mark.once("glibc's malloc settings, in subprocesses that load no backend")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_freed_memory_is_reused_without_page_faults():
    default, kept = _faults("default"), _faults("keep")
    pages = 4 * 64 * 2**20 // 4096  # four 64 MiB blocks in 4 KiB pages
    assert all(n >= pages for n in default), default  # each repeat faults every page in again
    assert all(n < pages // 100 for n in kept), kept  # in the other thread and in the main one


@pytest.mark.once("glibc's malloc settings")
def test_later_calls_return_the_first_answer():
    first = runtime.keep_freed_memory()
    assert runtime.keep_freed_memory() is first
    assert first == sys.platform.startswith("linux")


def _threefry_widths():
    """How many 64-bit blocks each Threefry hash call makes when 1,000 random 32-bit numbers are drawn
    (the widths of the hash function's block arguments, in the lowered program)."""
    import re

    import jax

    text = jax.jit(lambda key: jax.random.bits(key, (1000,))).lower(jax.random.key(0)).as_text()
    return [int(n) for n in re.findall(r"func.func private @threefry2x32\(%arg0: tensor<ui32>, %arg1: tensor<ui32>, "
                                       r"%arg2: tensor<(\d+)xui32>", text)]


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's random-number layout")
def test_faster_jax_random_hashes_one_block_for_two_numbers(monkeypatch):
    import jax

    monkeypatch.delenv("JAX_THREEFRY_PARTITIONABLE", raising=False)
    assert _threefry_widths() == [1000]  # JAX's default: a 64-bit block for each number
    assert runtime.faster_jax_random() is True
    assert jax.config.jax_threefry_partitionable is False
    assert _threefry_widths() == [500]  # the original layout: one block for two numbers
    dropped = keras.layers.Dropout(0.25)(np.ones((64, 1000), "float32"), training=True)
    assert abs(float(np.mean(keras.ops.convert_to_numpy(dropped) == 0)) - 0.25) < 0.01


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's random-number layout")
def test_faster_jax_random_leaves_a_layout_chosen_in_the_environment(monkeypatch):
    import jax

    monkeypatch.setenv("JAX_THREEFRY_PARTITIONABLE", "1")
    assert runtime.faster_jax_random() is False
    assert jax.config.jax_threefry_partitionable is True


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="only JAX has the setting")
def test_faster_jax_random_changes_nothing_on_other_backends():
    assert runtime.faster_jax_random() is False


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's random-number layout")
@pytest.mark.parametrize("flags, partitionable", [([], False), (["--distribute"], True)])
def test_recipes_draw_cheaper_random_bits_on_one_device_only(monkeypatch, flags, partitionable):
    import jax
    from recipes import train_imdb

    monkeypatch.delenv("JAX_THREEFRY_PARTITIONABLE", raising=False)
    train_imdb.parse_args(flags)
    assert jax.config.jax_threefry_partitionable is partitionable
