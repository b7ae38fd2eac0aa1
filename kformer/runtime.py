"""Process settings for fast CPU training: glibc's malloc told to keep the memory it frees, and
JAX's random bits drawn with half the hashing (`faster_jax_random`).

A training step on a CPU allocates and frees large buffers (activations,
gradients, logits: 131 MB for GPT's `(32, 128, 8000)` logits). With glibc's
defaults each large buffer is a fresh `mmap` and each free hands the pages
back to the kernel, from the main arena and from every thread's arena, so the
next step faults every page in again: about 113,000 page faults a GPT step on
JAX and 195,000 on torch, a third of the step's time (docs/BENCHMARKS.md,
"Page faults"). Kept, the freed memory is reused by the next step without
faults. `keep_freed_memory` tunes only glibc's allocator, and only on Linux
with glibc; `faster_jax_random` only JAX's random-number layout.

    from kformer import runtime
    runtime.keep_freed_memory()  # first thing: before a model is built or a backend op runs
    runtime.faster_jax_random()  # one device, JAX: cheaper dropout masks
"""

import ctypes
import ctypes.util
import os

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_KEPT = None  # None: not asked yet; then what the first call returned


def keep_freed_memory():
    """Make glibc's malloc reuse freed memory instead of returning it to the kernel.

    Sets, for this process: one arena for all threads (`M_ARENA_MAX=1`),
    no `mmap` for large blocks (`M_MMAP_MAX=0`) and no trimming of the heap
    below 2 GiB free (`M_TRIM_THRESHOLD`), the same as starting the process
    with `MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647`.
    Call it at the start of the program, before a model is built or a
    backend runs an op: threads that already allocated keep their own
    arenas, which still return their memory. The process then keeps its
    peak heap for reuse (resident memory does not shrink back after a large
    step). Recipes call it unless run with `--no-keep-freed-memory`.

    Returns:
        bool: True when applied (Linux with glibc), False elsewhere (nothing
        changed). Later calls return the first call's answer.

    Example:

    >>> import sys
    >>> keep_freed_memory() == sys.platform.startswith("linux")  # Linux with glibc
    True
    """
    global _KEPT
    if _KEPT is None:
        _KEPT = _apply()
    return _KEPT


def _apply():
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # glibc only: musl and macOS's libc take other settings or none
    except (OSError, AttributeError):
        return False
    settings = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1))
    applied = [libc.mallopt(option, value) == 1 for option, value in settings]  # each tried, whatever the others
    return all(applied)


def faster_jax_random():
    """On JAX, draw random bits with JAX's original Threefry layout: half the hashing per number.

    JAX's default Threefry (`jax_threefry_partitionable=True` since JAX 0.5)
    hashes one 64-bit block for every 32-bit number, so that arrays split
    over devices draw their parts without communicating; the original layout
    hashes one block for two numbers. On one device that makes large
    dropout masks cheaper: a `(32, 256, 256)` mask's forward and backward
    took 2.1-2.5 ms against 7.0-12.3 ms on a 2-core CPU, and the medium
    encoder's JAX training step ran 1.04x faster. The recipes' presets draw
    small masks or none, and their steps stayed within noise
    (docs/BENCHMARKS.md, "Dropout's random bits on JAX"). A seed then gives
    another, equally random, stream. Keep JAX's default when training over
    several devices (`keras.distribution`): recipes call this unless run
    with `--distribute` or `--model-parallel`.

    Changes nothing when the backend is not JAX or the environment sets
    `JAX_THREEFRY_PARTITIONABLE` (the user's choice wins).

    Returns:
        bool: True when set, False when nothing changed.
    """
    import keras

    if keras.backend.backend() != "jax" or "JAX_THREEFRY_PARTITIONABLE" in os.environ:
        return False
    import jax

    try:
        jax.config.update("jax_threefry_partitionable", False)
    except AttributeError:  # a JAX without the flag: its one layout stays
        return False
    return True
