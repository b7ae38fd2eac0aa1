import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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


def pytest_configure(config):
    config.addinivalue_line("markers", "tf_only: needs the TensorFlow backend (data, export)")
    config.addinivalue_line("markers", "slow: end-to-end runs (recipes)")
    config.addinivalue_line("markers", "only_backend(name): an end-to-end run checked on one backend "
                                       "(the pieces it uses are tested on all three)")
    config.addinivalue_line("markers", "gpu: needs a GPU")


def pytest_collection_modifyitems(config, items):
    backend = keras.backend.backend()
    for item in items:
        if "tf_only" in item.keywords and backend != "tensorflow":
            item.add_marker(pytest.mark.skip(reason="TensorFlow backend only"))
        only = item.get_closest_marker("only_backend")
        if only is not None and backend != only.args[0]:
            item.add_marker(pytest.mark.skip(reason=f"end to end on {only.args[0]} only"))


@pytest.fixture(autouse=True)
def _seed_and_policy():
    keras.utils.set_random_seed(1337)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")
