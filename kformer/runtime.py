"""Process settings for fast CPU training: glibc's malloc told to keep the memory it frees.

A training step on a CPU allocates and frees large buffers (activations,
gradients, logits: 131 MB for GPT's `(32, 128, 8000)` logits). With glibc's
defaults each large buffer is a fresh `mmap` and each free hands the pages
back to the kernel, from the main arena and from every thread's arena, so the
next step faults every page in again: about 113,000 page faults a GPT step on
JAX and 195,000 on torch, a third of the step's time (docs/BENCHMARKS.md,
"Page faults"). Kept, the freed memory is reused by the next step without
faults. Only glibc's allocator is tuned (no other process state), and only
on Linux with glibc.

    from kformer import runtime
    runtime.keep_freed_memory()  # first thing: before a model is built or a backend op runs
"""

import ctypes
import ctypes.util

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
