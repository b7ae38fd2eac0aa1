"""Every public class and function has a docstring with Args and an Example; the examples run.

The examples run as doctests on the TensorFlow backend only (they print
backend-independent values; one backend keeps the suite short).
"""

import doctest
import importlib
import inspect
import pkgutil

import keras
import pytest

import kformer
import kformer.data

PACKAGES = ("kformer.layers", "kformer.blocks", "kformer.models", "kformer.export")


def _defined_in(module):
    return [(f"{module.__name__}.{name}", obj) for name, obj in vars(module).items()
            if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
            and obj.__module__ == module.__name__]


def public_objects():
    """(qualified name, object) of every public name of the packages and of `kformer.data` modules."""
    found = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        for name in package.__all__:
            obj = getattr(package, name)
            if inspect.ismodule(obj):
                found += _defined_in(obj)
            elif inspect.isclass(obj) or inspect.isfunction(obj):
                found.append((f"{package_name}.{name}", obj))
    for info in pkgutil.walk_packages(kformer.data.__path__, "kformer.data."):
        found += _defined_in(importlib.import_module(info.name))
    return found


def kformer_modules():
    for info in pkgutil.walk_packages(kformer.__path__, "kformer."):
        if not info.name.endswith("__main__"):
            yield info.name


@pytest.mark.once("reads docstrings and signatures with `inspect`; nothing runs")
@pytest.mark.parametrize("name, obj", public_objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_public_docstring_has_args_and_example(name, obj):
    doc = inspect.getdoc(obj) or ""
    parameters = [p for p in inspect.signature(obj).parameters if p not in ("self", "args", "kwargs")]
    assert doc, f"{name} has no docstring"
    assert "Example" in doc, f"{name}: docstring has no Example section"
    assert "Args:" in doc or not parameters, f"{name}: docstring has no Args section ({parameters})"


@pytest.mark.tf_only
@pytest.mark.parametrize("module_name", sorted(kformer_modules()))
def test_docstring_examples_run(module_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    keras.utils.set_random_seed(0)
    module = importlib.import_module(module_name)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(module, module_name, globs=dict(vars(module))):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {module_name}"
