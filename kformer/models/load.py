"""`load(path)`: a recipe's version folder or a `.keras` file -> its task, ready for raw inputs."""

import os
import pathlib

import keras

from kformer.training.safe_state import check_keras_file


def load(path, compile=False):
    """Load a kformer task (with its preprocessor) on the current backend.

    Args:
        path: str or path. A `.keras` file, or a recipe's version folder
            (`saved_models/<name>/<version>/`, which holds `model.keras`).
        compile: bool. Also restore the training configuration. Defaults to `False`.

    Returns:
        The task (`Translator`, `TextClassifier`, `BertTextClassifier`, ...),
        loaded with `safe_mode=True`.

    Example:

    >>> import tempfile, pathlib
    >>> from kformer import models
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> models.vit(preset="vit_tiny").save(folder / "model.keras")
    >>> type(load(folder)).__name__
    'ViTImageClassifier'
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"`path` must be a str or path of a `.keras` file or a version folder. Received: "
                         f"path={path!r} ({type(path).__name__})")
    path = pathlib.Path(path)
    file = path / "model.keras" if path.is_dir() else path
    if not file.is_file():
        where = f"{path} holds no model.keras" if path.is_dir() else f"{path} does not exist"
        raise ValueError(f"`path` must be a `.keras` file or a folder holding `model.keras`. Received: "
                         f"path={str(path)!r} ({where})")
    if file.suffix != ".keras":
        raise ValueError(f"`path` must be a `.keras` file. Received: path={str(file)!r}")
    try:
        check_keras_file(file)
    except ValueError as err:
        raise ValueError(f"`path` must be a whole `.keras` file. Received: path={str(path)!r}: {err}") from None
    import kformer.data.preprocessors  # noqa: F401  (registers the preprocessor classes)

    return keras.saving.load_model(file, compile=compile, safe_mode=True)
