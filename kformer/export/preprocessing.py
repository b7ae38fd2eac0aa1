"""The preprocessor a task is exported with: shared by `serving` and its TensorFlow `worker`."""


def default_preprocessor(task):
    """The task's preprocessor; an image task without one gets a resizing preprocessor.

    Args:
        task: a kformer task model.

    Raises a ValueError for a text task without its preprocessor (the served
    graph needs its tokenizers).

    Example:

    >>> from kformer import models
    >>> type(default_preprocessor(models.vit(preset="vit_tiny"))).__name__
    'ImageClassifierPreprocessor'
    """
    if task.preprocessor is not None:
        return task.preprocessor
    if task.task_type == "image_classification":
        from kformer.data.preprocessors import ImageClassifierPreprocessor  # TensorFlow: only when exporting

        return ImageClassifierPreprocessor(task.image_size, task.channels)
    raise ValueError(f"Exporting a {type(task).__name__} needs its preprocessor (the tokenizers the "
                     "served graph runs): build it with `preprocessor=...` or load it with "
                     "`kformer.models.load`. Received: preprocessor=None")
