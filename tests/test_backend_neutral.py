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


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_file_imports_no_backend(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN, f"{path}:{node.lineno} imports {name}"


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


def test_public_api():
    assert set(kformer.layers.__all__) >= {
        "MultiHeadAttention", "SinusoidalPositionEncoding", "PositionEmbedding", "RotaryEmbedding",
        "TokenAndPositionEmbedding", "FeedForward", "TransformerEncoderBlock",
        "TransformerDecoderBlock", "PatchEmbedding", "MixtureOfExperts",
    }
    for name in kformer.layers.__all__:
        assert getattr(kformer.layers, name) is not None
    assert kformer.layers.TransformerEncoderBlock is kformer.blocks.TransformerEncoderBlock
    with pytest.raises(AttributeError):
        kformer.layers.NoSuchLayer  # noqa: B018


def test_registry_errors_name_the_preset():
    assert isinstance(kformer.models.list_models(), list)
    with pytest.raises(ValueError, match="name='nope'"):
        kformer.models.build("nope")
