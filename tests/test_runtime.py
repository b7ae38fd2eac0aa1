import subprocess
import sys
import textwrap

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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_freed_memory_is_reused_without_page_faults():
    default, kept = _faults("default"), _faults("keep")
    pages = 4 * 64 * 2**20 // 4096  # four 64 MiB blocks in 4 KiB pages
    assert all(n >= pages for n in default), default  # each repeat faults every page in again
    assert all(n < pages // 100 for n in kept), kept  # in the other thread and in the main one


def test_later_calls_return_the_first_answer():
    first = runtime.keep_freed_memory()
    assert runtime.keep_freed_memory() is first
    assert first == sys.platform.startswith("linux")
