"""`export_for_serving`: a kformer task -> a versioned SavedModel for TF Serving.

The task brings its preprocessor (tokenizers, packing, image resizing) and
its signatures (`kformer.export.signatures.SIGNATURES[task.task_type]`). On
the TensorFlow backend the endpoints are traced in this process. On JAX and
PyTorch the task is saved to a `.keras` file and re-exported by a
TensorFlow-backend process (`kformer.export.worker`, started by the first
export and reused by the next): jax2tf cannot carry the string ops and the
in-graph decoding loop, and Keras has no SavedModel export for torch. The
weights are the same on every backend (`.keras` files reload across
backends to 1e-5, tested).
"""

import json
import pathlib
import tempfile

import keras

from kformer.export import warmup
from kformer.export.decoding import check_export_options
from kformer.export.preprocessing import default_preprocessor
from kformer.export.signatures import SIGNATURES, signature_set
from kformer.export.versioning import write_new_version
from kformer.export.worker import write_in_tensorflow
from kformer.models import lora
from kformer.models.postprocess import check_top_k


def export_for_serving(task, export_dir, *, version=None, **options):
    """Write `export_dir/<version>/` (the next free integer by default) atomically.

    Never overwrites an existing version. A bad `export_dir` or `version` is
    a ValueError before the model is traced or saved.

    Args:
        task: a kformer task with its preprocessor (see `save_for_serving`).
        export_dir: path. The model's base folder, as TF Serving watches it:
            a folder, or a new path below one, that this process can write.
        version: int in 1 .. 2**63 - 1 (TF Serving's int64), or None for
            the next free one (`kformer.export.versioning.next_version`).
        **options: those of `save_for_serving`.

    Returns:
        The version directory (`pathlib.Path`).

    Example:

    >>> import tempfile
    >>> from kformer import models
    >>> path = export_for_serving(models.vit(preset="vit_tiny"), tempfile.mkdtemp(),
    ...                           class_names=[str(d) for d in range(10)])
    >>> path.name, sorted(p.name for p in path.iterdir())[:3]
    ('1', ['assets', 'assets.extra', 'fingerprint.pb'])
    """
    return write_new_version(export_dir, lambda tmp: save_for_serving(task, tmp, **options), version=version,
                             argument="export_dir")


def save_for_serving(task, directory, *, generation=None, top_k=5, class_names=None, model_name=None,
                     warmup_requests=True, xla=False, max_image_pixels=None, **legacy):
    """Write a SavedModel with the task's raw-input signatures into `directory` (empty or new).

    Args:
        task: a kformer task (`TextClassifier`, `BertTextClassifier`,
            `Translator`, `BertPretrainer`, `ViTImageClassifier`, `CausalLM`, `SpeechRecognizer`) with its
            preprocessor (image tasks without one get a resizing preprocessor
            for their input size).
        directory: path. Empty or new.
        generation: a `kformer.generation.GenerationConfig` (translation and
            text generation): what every decoding signature runs, with the
            signature's sampler: greedy for `serving_default` /
            `translate_xla`; the config's `BeamSampler` (else
            `BeamSampler()`, 4 beams) for `translate_beam`; its top-k or
            top-p sampler (else `TopPSampler(p=0.9)`) for
            `generate_sample`. Defaults to `task.generation_config`, so the
            served translations and completions are `translate`'s and
            `generate`'s. `seed`, `strip_prompt` and
            `num_return_sequences` are the request's.
        top_k: int. Fill-mask: candidates per `[MASK]`. Defaults to `5`.
        **legacy: 0.2's decoding keywords (`max_length`, `num_beams`,
            `top_p`, `temperature`, `no_repeat_ngram_size`,
            `max_length_ratio`, `max_length_offset`, `max_word_pieces`),
            applied to `generation` with a DeprecationWarning until 0.3.
        xla: bool. Translation: also write `translate_xla`, greedy decoding
            with the loop compiled by XLA (faster on a CPU: docs/decisions.md,
            "Why `translate_xla` is opt-in"). TF Serving runs it
            only with XLA turned on (`--xla_cpu_compilation_enabled=true` on
            CPU); a stock server fails this signature's warmup request, so
            export without it for stock serving (`kformer check-serving`). It compiles once per request batch size. Defaults to `False`.
        class_names: list of str. Classifiers: the labels (default: `task.class_names`).
        max_image_pixels: int in [1, 2**31 - 1]. Image classification: the
            `serving_default` signature (encoded image bytes) refuses an
            image of more pixels (width * height) with INVALID_ARGUMENT, from
            its header before decoding it (PNG, JPEG, GIF, BMP, WebP; JPEG XL
            after decoding). Default `None`: 4096 * 4096
            (`kformer.export.signatures.DEFAULT_MAX_IMAGE_PIXELS`).
        model_name: str. Name in the warmup requests (default: `task.name`).
        warmup_requests: bool. Also write `assets.extra/tf_serving_warmup_requests`.

    Returns:
        `directory` (a `pathlib.Path`).

    Example:

    >>> import tempfile, pathlib
    >>> from kformer import models
    >>> path = save_for_serving(models.vit(preset="vit_tiny"), pathlib.Path(tempfile.mkdtemp()) / "vit")
    >>> (path / "saved_model.pb").is_file()
    True
    """
    task = lora.merged(task)  # LoRA adapters merged into the kernels: served as one plain model
    preprocessor, options = _options(task, generation, legacy, top_k=top_k, class_names=class_names,
                                     model_name=model_name, xla=xla, max_image_pixels=max_image_pixels)
    directory = pathlib.Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ValueError(f"`directory` must be an empty folder or a new path. Received: {directory} "
                         f"({'not a folder' if not directory.is_dir() else 'not empty'})")
    if keras.backend.backend() == "tensorflow":
        from kformer.export.signatures import write_saved_model

        write_saved_model(task, preprocessor, options, directory)
    else:
        _write_in_tensorflow_process(task, options, directory)
    if warmup_requests:
        warmup.write(directory, task.task_type, options["model_name"], options)
    return directory


def _write_in_tensorflow_process(task, options, directory):
    with tempfile.TemporaryDirectory(prefix="kformer-export-") as stage:
        stage = pathlib.Path(stage)
        task.save(stage / "model.keras")
        (stage / "options.json").write_text(json.dumps(options))
        write_in_tensorflow(stage, directory)


def _options(task, generation, legacy, *, top_k, class_names, model_name, xla, max_image_pixels):
    task_type = getattr(task, "task_type", None)
    if task_type not in SIGNATURES:
        raise ValueError("`task` must be a kformer task model with serving signatures "
                         f"({', '.join(sorted(SIGNATURES))}). Received: {type(task).__name__}")
    preprocessor = default_preprocessor(task)
    task.validate_preprocessor(preprocessor)
    if xla and task_type == "translation" and not getattr(preprocessor, "tokenizes_in_core_tensorflow", True):
        raise ValueError(f"`xla=True` (the translate_xla signature) takes text, but this task's "
                         f"{type(preprocessor).__name__} tokenizes outside TensorFlow: its SavedModel takes token "
                         "ids, without an XLA signature yet. Received: xla=True")
    options = {"model_name": model_name or task.name}
    if task_type in ("text_classification", "image_classification"):
        names = class_names if class_names is not None else task.class_names
        if names is None:
            names = [str(i) for i in range(task.num_classes)]
        if len(names) != task.num_classes or not all(isinstance(c, str) for c in names):
            raise ValueError(f"`class_names` must be {task.num_classes} strings (the model's classes). "
                             f"Received: class_names={names!r}")
        options["class_names"] = list(names)
    if task_type == "image_classification":
        from kformer.export.signatures import DEFAULT_MAX_IMAGE_PIXELS, MAX_IMAGE_PIXELS_LIMIT

        pixels = DEFAULT_MAX_IMAGE_PIXELS if max_image_pixels is None else max_image_pixels
        if not isinstance(pixels, int) or isinstance(pixels, bool) or not 1 <= pixels <= MAX_IMAGE_PIXELS_LIMIT:
            raise ValueError(f"`max_image_pixels` must be an int in [1, 2**31 - 1] (width * height of the "
                             f"largest image served). Received: max_image_pixels={max_image_pixels!r}")
        options["max_image_pixels"] = pixels
    elif max_image_pixels is not None:
        raise ValueError(f"`max_image_pixels` is for image classification. Received: "
                         f"max_image_pixels={max_image_pixels!r} for a {task_type} task")
    options.update(check_export_options(task, preprocessor, generation, legacy, xla=xla))
    options["signatures"] = signature_set(task_type, preprocessor)
    if task_type == "fill_mask":
        options["top_k"] = check_top_k(top_k, preprocessor.tokenizer.vocabulary_size)  # as `fill_mask`
    return preprocessor, options
