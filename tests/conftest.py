import contextlib
import gc
import glob
import json
import os
import pathlib
import shutil
import signal
import tempfile
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Compile time is most of the JAX suite (and of TensorFlow's XLA decoding loops), so the tests
# (1) let XLA skip its LLVM optimizations and (2) emit its fused CPU kernels with its older LLVM IR
# emitters, not the MLIR fusion emitters, which compile slower (both: the same computation up to
# float rounding, slower code; a flag the caller's XLA_FLAGS set is kept), and (3) share one JAX
# compilation cache per test run between the xdist workers and the recipe subprocesses (they
# inherit the environment), so a computation compiled by one test is loaded, not recompiled, by
# the next. All are set before JAX or TensorFlow is imported. Benchmarks and recipes run with
# XLA's defaults.
for _flag in ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"):
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
# One OpenMP thread a process (torch's intra-op team; numpy's OpenBLAS reads it too). The README runs two
# xdist workers on two cores, and the recipe, CLI and export processes a test starts inherit this
# environment. torch's second thread cannot run beside the other worker: it waits at each op's barrier
# on the core that worker needs. Same computations; a value the caller set is kept. TensorFlow's and
# XLA's own thread pools measured no different at one thread, so they keep their defaults.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Benchmark scripts the tests run write their rows here, not to benchmarks/results/ (the measured history).
_RESULTS_DIR = None
if "KFORMER_RESULTS_DIR" not in os.environ:
    _RESULTS_DIR = os.environ["KFORMER_RESULTS_DIR"] = tempfile.mkdtemp(prefix="kformer-results-")
_JAX_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _JAX_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="kformer-jax-cache-")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

import keras  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Property tests (tests/reliability/test_properties.py): the same examples every run, no example
# database written, no per-example deadline (a first call compiles); each test bounds max_examples.
settings.register_profile("kformer", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                 HealthCheck.differing_executors])
settings.load_profile("kformer")


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend: {keras.backend.backend()}"


# Seconds each test file took per backend in one measured run (`python tests/file_durations.py
# BACKEND=JUNIT_XML ...` rewrites them). pytest-xdist's `--dist loadfile` hands out files in order of their
# test count, which put the slowest end-to-end files last, so one worker ran them alone while the
# other sat idle; the workers take the slowest files first instead.
FILE_SECONDS = pathlib.Path(__file__).with_name("file_durations.json")
UNMEASURED_SECONDS = 10.0  # a file added since the last measurement
# Tests of code that runs the same whatever the backend (tf.data pipelines, tokenizers, argument checks, the
# CLI's parsing, docs) carry `@pytest.mark.once("why")` and run on the backend a user who sets nothing gets.
DEFAULT_BACKEND = "tensorflow"


# TFDS makes an empty `tmp*tfds` folder each time it builds a dataset with no prepared files
# (`DatasetInfo.initialize_from_bucket`, offline) and never removes it: the mock-data tests
# remove the ones made during the run.
_TFDS_LITTER = os.path.join(tempfile.gettempdir(), "tmp*tfds")
_TFDS_BEFORE = set(glob.glob(_TFDS_LITTER))


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # xdist: keep our order (below), not its test count
        config.option.loadscopereorder = False
    config.addinivalue_line("markers", "tf_only: needs the TensorFlow backend (data, export)")
    config.addinivalue_line("markers", "slow: end-to-end runs (recipes)")
    config.addinivalue_line("markers", "only_backend(name): an end-to-end run checked on one backend "
                                       "(the pieces it uses are tested on all three)")
    config.addinivalue_line("markers", "gpu: needs a GPU")
    config.addinivalue_line("markers", f"once(why): the code under test does not depend on the Keras backend (`why` "
                                       f"says how); runs once, on Keras's default backend ({DEFAULT_BACKEND})")


def pytest_unconfigure(config):
    for folder in (_JAX_CACHE, _RESULTS_DIR):  # made by this process (the xdist controller, or a lone pytest)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    for folder in set(glob.glob(_TFDS_LITTER)) - _TFDS_BEFORE:
        with contextlib.suppress(OSError):  # empty ones only
            os.rmdir(folder)


def pytest_collection_modifyitems(config, items):
    backend = keras.backend.backend()
    seconds = json.loads(FILE_SECONDS.read_text()).get(backend, {}) if FILE_SECONDS.is_file() else {}
    files = {item: item.nodeid.split("::")[0] for item in items}
    order = {file: i for i, file in enumerate(dict.fromkeys(files.values()))}
    # The slowest file first; a file's tests keep their order.
    items.sort(key=lambda item: (-seconds.get(files[item], UNMEASURED_SECONDS), order[files[item]]))
    for item in items:
        if "tf_only" in item.keywords and backend != "tensorflow":
            item.add_marker(pytest.mark.skip(reason="TensorFlow backend only"))
        once = item.get_closest_marker("once")
        if once is not None:
            if len(once.args) != 1 or not isinstance(once.args[0], str):
                raise pytest.UsageError(f"{item.nodeid}: `once` takes one argument, why the test does not depend on "
                                        f"the backend. Received: {once.args!r}")
            if backend != DEFAULT_BACKEND:
                item.add_marker(pytest.mark.skip(reason=f"once, on {DEFAULT_BACKEND}: {once.args[0]}"))
        only = item.get_closest_marker("only_backend")
        if only is not None and backend != only.args[0]:
            item.add_marker(pytest.mark.skip(reason=f"end to end on {only.args[0]} only"))


def pytest_collection_finish(session):
    """Out of the cyclic garbage collector's reach: what is alive after collection (TensorFlow,
    JAX, torch, Keras, the test modules: 400,000-650,000 objects), then after each test file
    (`pytest_runtest_teardown`). A full collection scans only what the current file made, not the
    whole heap (195-294 ms each here: Python runs one each time the heap grows by a quarter, and
    Keras's `quantize` one for each kernel it replaces)."""
    _collect_and_freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    if nextitem is None or nextitem.path != item.path:  # the file's module fixtures are gone
        _collect_and_freeze()


def _collect_and_freeze():
    gc.collect()  # garbage first: frozen objects are never collected
    gc.freeze()


def _sigint_as_in_a_terminal():
    """Ctrl-C as a terminal gives it, in this process and so in every process it starts.

    A non-interactive shell starts a background command (`cmd &`, as a CI runner or `nohup`
    script may start the suite) with SIGINT ignored (POSIX), and an ignored signal stays ignored
    across `exec`: Python then installs no KeyboardInterrupt handler, and the pytest controller,
    its xdist workers and every recipe, CLI or demo process a test starts all inherit SIGINT
    ignored. The tests that send Ctrl-C to such a process (the CLI, the demo, the recipes' Ctrl-C
    test) then waited out their timeouts: the CI failure first seen on torch, the backend that runs
    the recipes' Ctrl-C test. Setting Python's handler here (the controller and each worker run
    this file) puts the default back for everything started below.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_sigint_as_in_a_terminal()
SIGINT_AT_START = signal.getsignal(signal.SIGINT)


@pytest.fixture(autouse=True)
def _sigint_unchanged(request):
    """A test (or its fixtures) that leaves Ctrl-C ignored in this worker would make every later subprocess ignore
    it too (an ignored SIGINT is inherited): the Ctrl-C tests of the CLI, the demo and the recipes then time out,
    as they once did in CI. Put it back and say which test did it."""
    yield
    now = signal.getsignal(signal.SIGINT)
    if now is not SIGINT_AT_START:
        signal.signal(signal.SIGINT, SIGINT_AT_START)
        warnings.warn(f"{request.node.nodeid} left SIGINT set to {now!r}; restored", stacklevel=1)


@pytest.fixture(autouse=True)
def _seed_and_policy():
    keras.utils.set_random_seed(1337)
    keras.config.set_dtype_policy("float32")
    if keras.backend.backend() == "jax":  # a recipe run in this process sets it (`runtime.faster_jax_random`)
        import jax

        partitionable = jax.config.jax_threefry_partitionable
    yield
    keras.config.set_dtype_policy("float32")
    if keras.backend.backend() == "jax" and jax.config.jax_threefry_partitionable != partitionable:
        jax.config.update("jax_threefry_partitionable", partitionable)
