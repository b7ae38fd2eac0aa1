"""kformer: a Keras 3 multi-backend transformer model zoo.

`import kformer` imports nothing heavy: `kformer.layers`, `kformer.blocks`,
`kformer.models`, `kformer.generation` and `kformer.training` are imported
(with keras) on first use, so the `kformer` command answers `--help` without
loading a backend.
`kformer.data` and `kformer.export` (which use TensorFlow) are imported
explicitly by the code that needs them.
"""

import importlib

__version__ = "0.2.0"

__all__ = ["__version__", "blocks", "generation", "layers", "models", "training"]
_SUBPACKAGES = ("blocks", "generation", "layers", "models", "training")


def __getattr__(name):  # PEP 562: `kformer.models` imports the subpackage the first time it is read
    if name in _SUBPACKAGES:
        return importlib.import_module(f"kformer.{name}")
    raise AttributeError(f"module 'kformer' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_SUBPACKAGES})
