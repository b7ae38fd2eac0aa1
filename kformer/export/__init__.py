"""SavedModel export for TF Serving: raw text or images in, labels, scores and translations out.

Imported explicitly (`from kformer import export`), never by `import kformer`.
TensorFlow loads on first use of a name that needs it (`export_for_serving`,
`save_for_serving`, `SIGNATURES`, ...); `kformer.export.versioning` (atomic,
never-overwriting version folders) needs none.

    from kformer import export, models
    task = models.load("saved_models/imdb_bigram/1")       # or any task with its preprocessor
    path = export.export_for_serving(task, "saved_models/imdb")   # -> saved_models/imdb/<version>/
"""

import importlib

_HOMES = {"export_for_serving": "serving", "save_for_serving": "serving", "SIGNATURES": "signatures",
          "Signature": "signatures", "signatures_of": "signatures", "next_version": "versioning",
          "write_new_version": "versioning", "MAX_VERSION": "versioning"}

__all__ = sorted(_HOMES)


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value  # loaded once
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
