"""SavedModel export for TF Serving: raw text or images in, labels, scores and translations out.

Imported explicitly (`from kformer import export`), never by `import kformer`:
it imports TensorFlow.

    from kformer import export
    path = export.export_for_serving(model, "saved_models/imdb", task="text_classification",
                                     tokenizer=tokenizer, class_names=["negative", "positive"])
"""

from kformer.export.serving import TASKS, export_for_serving, save_for_serving
from kformer.export.versioning import next_version, write_new_version

__all__ = ["TASKS", "export_for_serving", "next_version", "save_for_serving", "write_new_version"]
