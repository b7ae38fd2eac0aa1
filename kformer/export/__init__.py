"""SavedModel export for TF Serving: raw text or images in, labels, scores and translations out.

Imported explicitly (`from kformer import export`), never by `import kformer`:
it imports TensorFlow.

    from kformer import export, models
    task = models.load("saved_models/imdb_bigram/1")       # or any task with its preprocessor
    path = export.export_for_serving(task, "saved_models/imdb")   # -> saved_models/imdb/<version>/
"""

from kformer.export.serving import export_for_serving, save_for_serving
from kformer.export.signatures import SIGNATURES, Signature, signatures_of
from kformer.export.versioning import next_version, write_new_version

__all__ = ["SIGNATURES", "Signature", "export_for_serving", "next_version", "save_for_serving",
           "signatures_of", "write_new_version"]
