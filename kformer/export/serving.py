"""`export_for_serving`: a Keras model (+ tokenizers) -> a versioned SavedModel for TF Serving.

On the TensorFlow backend the endpoints are traced in this process. On JAX
and PyTorch the model is saved to a `.keras` file and re-exported by a
TensorFlow-backend subprocess (`python -m kformer.export`): jax2tf cannot
carry the string ops and the in-graph decoding loop, and Keras has no
SavedModel export for torch. The weights are the same on every backend
(`.keras` files reload across backends to 1e-5, tested).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import keras

from kformer.export import warmup
from kformer.export.versioning import write_new_version

TASKS = ("text_classification", "translation", "fill_mask", "image_classification")


def export_for_serving(model, export_dir, *, task, version=None, **options):
    """Write `export_dir/<version>/` (the next free integer by default) atomically.

    Never overwrites an existing version. `options` are those of
    `save_for_serving`. Returns the version directory.
    """
    return write_new_version(
        export_dir, lambda tmp: save_for_serving(model, tmp, task=task, **options), version=version)


def save_for_serving(model, directory, *, task, tokenizer=None, target_tokenizer=None,
                     class_names=None, sequence_length=None, max_length=None, num_beams=4,
                     top_k=5, source_suffix=None, model_name=None, warmup_requests=True):
    """Write a SavedModel with raw-input signatures into `directory` (empty or new).

    task: "text_classification" (`tokenizer`, `class_names`), "translation"
        (`tokenizer` for the source, `target_tokenizer`; greedy as
        `serving_default`, beam search as `translate_beam`, at most
        `max_length` tokens), "fill_mask" (`tokenizer`; `top_k` tokens per
        [MASK]) or "image_classification" (`class_names`).
    sequence_length: token budget of the text input (default: the model's
        static input length).
    warmup_requests: also write `assets.extra/tf_serving_warmup_requests`.
    """
    spec = _spec(model, task, tokenizer, target_tokenizer, class_names, sequence_length,
                 max_length, num_beams, top_k, source_suffix, model_name)
    tokenizers = [t for t in (tokenizer, target_tokenizer) if t is not None]
    directory = pathlib.Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise ValueError(f"`directory` must be empty or new. Received: {directory} (not empty)")
    if keras.backend.backend() == "tensorflow":
        from kformer.export.graphs import write_saved_model

        write_saved_model(model, tokenizers, spec, directory)
    else:
        _write_in_tensorflow_process(model, tokenizers, spec, directory)
    if warmup_requests:
        warmup.write(directory, spec)
    return directory


def _write_in_tensorflow_process(model, tokenizers, spec, directory):
    with tempfile.TemporaryDirectory(prefix="kformer-export-") as stage:
        stage = pathlib.Path(stage)
        model.save(stage / "model.keras")
        for i, tokenizer in enumerate(tokenizers):
            tokenizer.save(stage / f"vocabulary_{i}.txt")
        (stage / "spec.json").write_text(json.dumps({**spec, "num_tokenizers": len(tokenizers)}))
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        result = subprocess.run([sys.executable, "-m", "kformer.export", str(stage), str(directory)],
                                env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"Export under the TensorFlow backend failed (exit {result.returncode}):\n"
                               f"{result.stderr[-3000:]}")


def _spec(model, task, tokenizer, target_tokenizer, class_names, sequence_length, max_length,
          num_beams, top_k, source_suffix, model_name):
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}. Received: task={task!r}")
    spec = {"task": task, "model_name": model_name or model.name}
    needs = {"text_classification": ("tokenizer",), "fill_mask": ("tokenizer",),
             "translation": ("tokenizer", "target_tokenizer"), "image_classification": ()}[task]
    given = {"tokenizer": tokenizer, "target_tokenizer": target_tokenizer}
    for name in needs:
        if given[name] is None:
            raise ValueError(f"task={task!r} needs `{name}` (a WordPieceTokenizer). Received: None")
    if task in ("text_classification", "image_classification"):
        num_classes = model.output.shape[-1]
        if (not isinstance(class_names, (list, tuple)) or len(class_names) != num_classes
                or not all(isinstance(c, str) for c in class_names)):
            raise ValueError(f"`class_names` must be {num_classes} strings (the model's classes). "
                             f"Received: class_names={class_names!r}")
        spec["class_names"] = list(class_names)
    if task == "image_classification":
        if len(model.input.shape) != 4 or model.input.shape[-1] not in (1, 3):
            raise ValueError(f"An image model takes (batch, h, w, 1 or 3). Received input shape "
                             f"{model.input.shape}")
        return spec
    if sequence_length is None:
        first = list(model.input.values())[0] if isinstance(model.input, dict) else model.input
        sequence_length = first.shape[1]
    if not isinstance(sequence_length, int) or sequence_length < 3:
        raise ValueError("`sequence_length` must be an int >= 3 (the model has no static length). "
                         f"Received: sequence_length={sequence_length!r}")
    spec["sequence_length"] = sequence_length
    if task == "translation":
        spec.update(max_length=max_length or sequence_length, num_beams=num_beams,
                    source_suffix=source_suffix)
        for name in ("max_length", "num_beams"):
            if not isinstance(spec[name], int) or spec[name] < 1:
                raise ValueError(f"`{name}` must be an int >= 1. Received: {name}={spec[name]!r}")
    if task == "fill_mask":
        if not isinstance(top_k, int) or not 1 <= top_k <= tokenizer.vocabulary_size:
            raise ValueError(f"`top_k` must be an int in [1, {tokenizer.vocabulary_size}]. "
                             f"Received: top_k={top_k!r}")
        spec["top_k"] = top_k
    return spec
