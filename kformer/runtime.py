"""Process settings: a quiet start (`quiet_startup`), and for fast CPU training glibc's malloc told to
keep the memory it frees and JAX's random bits drawn with half the hashing (`faster_jax_random`).

A training step on a CPU allocates and frees large buffers (activations,
gradients, logits: 131 MB for GPT's `(32, 128, 8000)` logits). With glibc's
defaults each large buffer is a fresh `mmap` and each free hands the pages
back to the kernel, from the main arena and from every thread's arena, so the
next step faults every page in again, a large part of the step's time
(docs/decisions.md, "Why the recipes keep freed memory"). Kept, the freed memory is reused by the next step without
faults. `keep_freed_memory` tunes only glibc's allocator, and only on Linux
with glibc; `faster_jax_random` only JAX's random-number layout.

    from kformer import runtime
    runtime.quiet_startup()      # before TensorFlow loads: no C++ start-up logging
    runtime.keep_freed_memory()  # first thing: before a model is built or a backend op runs
    runtime.faster_jax_random()  # one device, JAX: cheaper dropout masks
"""

import contextlib
import ctypes
import ctypes.util
import os
import sys

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
    dropout masks cheaper; the recipes' presets draw small masks or none
    (measured: docs/decisions.md, "Why JAX draws random bits in the
    original layout"). A seed then gives
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


VERBOSE_ENV = "KFORMER_VERBOSE"  # set (not "0"): keep TensorFlow's, XLA's and absl's start-up logging


class _QuietImport:
    """A `sys.meta_path` finder that runs TensorFlow's first import with the process's stderr muted."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        _uninstall()
        import importlib.util

        spec = importlib.util.find_spec(name)  # the other finders answer
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run = spec.loader.exec_module

            def exec_module(module):
                with muted_stderr():
                    run(module)

            spec.loader.exec_module = exec_module  # this spec's own loader: no other import changes
        return spec


_HOOK = _QuietImport()


def _uninstall():
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def verbose_requested():
    """Whether `$KFORMER_VERBOSE` asks for the native libraries' start-up logging (set and not `0`/empty)."""
    return os.environ.get(VERBOSE_ENV, "0") not in ("", "0")


def quiet_startup(verbose=None):
    """Keep TensorFlow's, XLA's and absl's C++ logging out of a program's output; call before TensorFlow loads.

    TensorFlow's shared libraries log before anything can configure them:
    absl's "All log messages before absl::InitializeLog() ...", oneDNN's and
    the CPU-instruction notes, "Could not find cuda drivers" (once for each
    library), then "failed call to cuInit" on a machine without a GPU. This
    sets `TF_CPP_MIN_LOG_LEVEL=3` (XLA's and TensorFlow's C++ logging after
    start-up: errors reach Python as exceptions) unless the environment sets
    it, and runs the first `import tensorflow` with file descriptor 2 pointed
    at `/dev/null`, so those lines go and Python's own errors stay (an import
    error is raised after stderr is back). Nothing is imported here: a
    program that never needs TensorFlow never loads it. The `kformer` command
    and the recipes call it first thing.

    Args:
        verbose: bool or None. True: change nothing (all logging shown).
            Defaults to `$KFORMER_VERBOSE` (set and not `0`: verbose).

    Returns:
        bool: True when the logging was turned down (TensorFlow not loaded
        yet), False when nothing changed.

    Example:

    >>> import sys
    >>> quiet_startup() == ("tensorflow" not in sys.modules and not verbose_requested())
    True
    """
    if verbose is None:
        verbose = verbose_requested()
    if verbose or "tensorflow" in sys.modules:
        return False
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
    return True


@contextlib.contextmanager
def muted_stderr():
    """Point file descriptor 2 (C and C++ code's stderr, and Python's) at `/dev/null` inside the block.

    Python's `sys.stderr` is flushed first, so what was written before the
    block still shows. Where descriptor 2 cannot be duplicated (closed), the
    block runs unchanged.

    Example:

    >>> import os
    >>> with muted_stderr():
    ...     _ = os.write(2, b"not shown")
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        yield
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass
        os.dup2(saved, 2)
        os.close(saved)
