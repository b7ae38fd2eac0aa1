"""kformer: a Keras 3 multi-backend transformer model zoo.

`import kformer` imports keras only; `kformer.data` and `kformer.export`
(which use TensorFlow) are imported explicitly by the code that needs them.
"""

__version__ = "0.1.0"

from kformer import blocks, layers, models  # noqa: E402

__all__ = ["__version__", "blocks", "layers", "models"]
