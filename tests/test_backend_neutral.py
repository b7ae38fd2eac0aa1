"""Layers, blocks and models import only keras (and numpy), never a backend."""

import ast
import pathlib
import subprocess
import sys

import pytest

import kformer

ROOT = pathlib.Path(kformer.__file__).parent
FORBIDDEN = {"tensorflow", "jax", "jaxlib", "torch"}
CORE_FILES = sorted(p for d in ("layers", "blocks", "models") for p in (ROOT / d).rglob("*.py"))


def imports(path):
    """(line, module) of every import in `path`, top level or inside functions."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


@pytest.mark.once("the source files' ASTs")
@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_file_imports_no_backend(path):
    for line, name in imports(path):
        assert name.split(".")[0] not in FORBIDDEN, f"{path}:{line} imports {name}"


def test_import_kformer_adds_no_backend_beyond_keras():
    """Whatever `import keras` loads, `import kformer` loads nothing more."""
    code = (
        "import sys, keras; before = set(sys.modules); import kformer; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        f"bad = new & {FORBIDDEN!r}; assert not bad, bad; "
        "assert {'tensorflow_datasets', 'keras_hub'}.isdisjoint(new), new; "
        "print(kformer.__version__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == kformer.__version__


@pytest.mark.once("package attributes, nothing built")
def test_public_api():
    assert set(kformer.layers.__all__) >= {
        "MultiHeadAttention", "SinusoidalPositionEncoding", "PositionEmbedding", "RotaryEmbedding",
        "TokenAndPositionEmbedding", "FeedForward", "PatchEmbedding", "MixtureOfExperts",
    }
    assert set(kformer.blocks.__all__) >= {"TransformerEncoderBlock", "TransformerDecoderBlock"}
    for package in (kformer.layers, kformer.blocks, kformer.models):
        for name in package.__all__:
            assert getattr(package, name) is not None
    assert not hasattr(kformer.layers, "TransformerEncoderBlock")  # one way: kformer.blocks


@pytest.mark.once("the source files' ASTs")
@pytest.mark.parametrize("package, higher", [("layers", ("blocks", "models")), ("blocks", ("models",))])
def test_imports_go_one_way(package, higher):
    """Layers -> blocks -> models, one way: no file imports a higher package."""
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, name in imports(path):
            assert not any(name.startswith((f"kformer.{h}", f"kformer import {h}")) or
                           name == f"kformer.{h}" for h in higher), f"{path}:{line} imports {name}"


@pytest.mark.once("preset name check before any builder runs")
def test_registry_errors_name_the_preset():
    assert isinstance(kformer.models.list_models(), list)
    with pytest.raises(ValueError, match="name='nope'"):
        kformer.models.build("nope")
