"""Model inputs checked before any backend runs: shapes, dtypes and id ranges, each error naming the input.

Keras's JAX trainer keeps a broken state after a step raises, and an id past
the vocabulary reads NaN on JAX and an arbitrary row elsewhere; so `Task.predict`,
`predict_on_batch`, `evaluate` and `fit` check array inputs here first.
Compiled calls (`model(x)` inside `jax.jit` or a `tf.function`) do not check
values; datasets are checked by the preprocessors that build them.
"""

import keras
import numpy as np


def check_model_inputs(task, x, limits):
    """Raise a ValueError naming the input if `x` does not fit `task.inputs`.

    Args:
        task: a functional `keras.Model`.
        x: an array or tensor (one-input models) or a dict of them; anything
            else (a `tf.data.Dataset`, a generator) is left to its pipeline.
        limits: dict input name -> (id_limit, length_limit): integer inputs
            must lie in `[0, id_limit)` and have at most `length_limit` columns
            (None: no limit).
    """
    specs = {t.name: t for t in keras.tree.flatten(task.inputs)}
    if _is_array(x) and len(specs) == 1:
        x = {next(iter(specs)): x}
    if not isinstance(x, dict):
        return
    for name, value in x.items():
        if name not in specs or not _is_array(value):
            continue
        _check_one(name, np.asarray(keras.ops.convert_to_numpy(value)), specs[name], limits.get(name, (None, None)))


def _check_one(name, array, spec, limit):
    shape, want = array.shape, tuple(spec.shape)
    if len(shape) != len(want) or any(w is not None and s != w for s, w in zip(shape[1:], want[1:])):
        raise ValueError(f"`{name}` must have shape {want} (None: any size). Received: {name}.shape={shape}")
    if "int" in spec.dtype and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"`{name}` must hold integers (ids are never rounded). Received: dtype {array.dtype}")
    if "float" in spec.dtype and array.dtype.kind in "fc" and array.size and not np.isfinite(array).all():
        raise ValueError(f"`{name}` must be finite: it holds {np.size(array) - np.isfinite(array).sum()} NaN or "
                         f"infinite values. Received: {name}.shape={shape}")
    id_limit, length_limit = limit
    if length_limit is not None and len(shape) > 1 and shape[1] > length_limit:
        raise ValueError(f"`{name}` has {shape[1]} positions but the model supports at most "
                         f"{length_limit}. Received: {name}.shape={shape}")
    if id_limit is not None and array.size and (array.min() < 0 or array.max() >= id_limit):
        raise ValueError(f"`{name}` must be in [0, {id_limit}). Received: values from {array.min()} "
                         f"to {array.max()}")


def _is_array(value):
    return isinstance(value, np.ndarray) or (keras.ops.is_tensor(value) and hasattr(value, "shape"))


def rows(x):
    """The number of rows of an array, a list or a dict of arrays; None when it is not known here."""
    if isinstance(x, dict):
        return next((rows(v) for v in x.values()), None)
    if isinstance(x, (list, tuple)) or _is_array(x):
        return len(x) if isinstance(x, (list, tuple)) else (x.shape[0] if len(x.shape) else None)
    return None


def check_batch_size(batch_size, name="batch_size"):
    """None, or an int >= 1 (Keras would start its loop with 0 or -1 and fail inside it)."""
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool)
                                   or batch_size < 1):
        raise ValueError(f"`{name}` must be None or an int >= 1. Received: {name}={batch_size!r}")


def _expected(task):
    if getattr(task, "preprocessor", None) is None:
        return "model inputs (an array, or a dict of arrays by input name)"
    if task.task_type == "image_classification":
        return ("images (a (batch, height, width, channels) array, or a list of (height, width, channels) "
                "arrays) or model inputs")
    return "text (a str, or a list of str) or model inputs (an int array, or a dict of arrays by input name)"


def check_raw_type(task, x, name="x"):
    """A ValueError naming `name` unless `x` is raw input the task's preprocessor takes, model inputs
    (arrays or tensors, or a dict of them) or a data pipeline (a `tf.data.Dataset`, a generator, a
    `keras.utils.PyDataset`), which Keras reads."""
    if task._raw(x) or _is_array(x):
        return
    if isinstance(x, dict) and x and all(_is_array(v) for v in x.values()):
        return
    if x is not None and not isinstance(x, (str, bytes, int, float, list, tuple, set, dict, frozenset)):
        return  # a dataset, generator or PyDataset: its pipeline checks it
    shown = repr(x)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise ValueError(f"`{name}` must be {_expected(task)}. Received: {name}={shown} ({type(x).__name__})")


def check_labels(task, x, y, limits):
    """A ValueError naming `y` unless the labels are integers in range, one per row of `x`.

    Labels with the full shape of their output (one-hot rows, or targets for
    a loss such as `mse`) are dense, not class ids: only their row count and
    finiteness are checked.

    Args:
        task: the task (its outputs name the labels of a dict `y`).
        x: the inputs (raw or model inputs), for their row count.
        y: None (a dataset carries its labels), an array or list, or a dict
            output name -> array.
        limits: dict output name -> number of classes (ids must lie in `[0, n)`).
    """
    if y is None or not limits:
        return
    if not isinstance(y, dict):
        if len(limits) != 1:
            return  # several outputs labelled by one array: Keras's own structure check answers
        y = {next(iter(limits)): y}
    expected_rows = rows(x)
    for output, labels in y.items():
        shown = "y" if len(y) == 1 else f"y[{output!r}]"
        if isinstance(labels, (list, tuple)) or _is_array(labels):
            try:
                array = np.asarray(keras.ops.convert_to_numpy(labels) if _is_array(labels) else labels)
            except (ValueError, TypeError):
                raise ValueError(f"`{shown}` must be integer class ids, one per input. Received: an irregular "
                                 f"{type(labels).__name__}") from None
        else:
            raise ValueError(f"`{shown}` must be integer class ids (an array or a list), one per input. "
                             f"Received: {type(labels).__name__}")
        if array.ndim == 0:
            raise ValueError(f"`{shown}` must hold one label per input, not a scalar. Received: {shown}={array!r}")
        if expected_rows is not None and len(array) != expected_rows:
            raise ValueError(f"`{shown}` has {len(array)} labels but `x` has {expected_rows} inputs: expected one "
                             f"per input. Received: len({shown})={len(array)}")
        if _dense(task, output, array):
            if array.dtype.kind in "fc" and array.size and not np.isfinite(array).all():
                raise ValueError(f"`{shown}` must be finite: it holds NaN or infinite values.")
            continue
        if not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"`{shown}` must hold integer class ids (labels are never rounded). Received: "
                             f"dtype {array.dtype}")
        limit = limits.get(output)
        if limit is not None and array.size and (array.min() < 0 or array.max() >= limit):
            raise ValueError(f"`{shown}` must be class ids in [0, {limit}). Received: values from {array.min()} "
                             f"to {array.max()}")


def check_weights(x, sample_weight=None, class_weight=None, limits=None):
    """A ValueError naming `sample_weight` or `class_weight` unless each weight is a finite number >= 0.

    A NaN weight makes the loss NaN and, after one step, every weight of the model (Keras trains on it
    without a word); a negative one trains away from the labels.

    Args:
        x: the inputs, for their row count (`sample_weight` holds one weight per row).
        sample_weight: None, an array or list (one weight per input, or a row of weights per input),
            or a dict output name -> such an array.
        class_weight: None or a dict class id -> weight.
        limits: dict output name -> number of classes; with one output its class ids bound `class_weight`.
    """
    if sample_weight is not None and not hasattr(sample_weight, "element_spec"):
        expected_rows = rows(x)
        items = sample_weight.items() if isinstance(sample_weight, dict) else [(None, sample_weight)]
        for output, weights in items:
            shown = "sample_weight" if output is None else f"sample_weight[{output!r}]"
            try:
                array = np.asarray(keras.ops.convert_to_numpy(weights) if _is_array(weights) else weights,
                                   dtype="float64")
            except (ValueError, TypeError):
                raise ValueError(f"`{shown}` must be numbers, one per input. Received: {type(weights).__name__}"
                                 ) from None
            if array.ndim == 0:
                raise ValueError(f"`{shown}` must hold one weight per input, not a scalar. Received: "
                                 f"{shown}={weights!r}")
            if expected_rows is not None and len(array) != expected_rows:
                raise ValueError(f"`{shown}` has {len(array)} weights but `x` has {expected_rows} inputs: expected "
                                 f"one per input. Received: len({shown})={len(array)}")
            bad = np.flatnonzero(~(np.isfinite(array) & (array >= 0)).reshape(len(array), -1).all(axis=1))
            if bad.size:
                raise ValueError(f"`{shown}` must be finite numbers >= 0. Received: {shown}[{bad[0]}]="
                                 f"{array[bad[0]].tolist()!r} ({bad.size} of {len(array)} rows)")
    if class_weight is not None:
        if not isinstance(class_weight, dict):
            raise ValueError(f"`class_weight` must be a dict of class id -> weight. Received: "
                             f"{type(class_weight).__name__}")
        limit = next(iter(limits.values())) if limits and len(limits) == 1 else None
        for key, weight in class_weight.items():
            if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or key < 0 or (
                    limit is not None and key >= limit):
                raise ValueError(f"`class_weight` keys must be class ids in [0, {limit if limit else 'classes'}). "
                                 f"Received: key {key!r}")
            if isinstance(weight, bool) or not isinstance(weight, (int, float, np.number)) or not (
                    np.isfinite(weight) and weight >= 0):
                raise ValueError(f"`class_weight` values must be finite numbers >= 0. Received: "
                                 f"class_weight[{key!r}]={weight!r}")


def _dense(task, output, labels):
    """Whether `labels` have the whole shape of `output`'s logits (classes included, more than one)."""
    outputs = task._outputs_struct if isinstance(task._outputs_struct, dict) else {output: task.outputs[0]}
    tensor = outputs.get(output)
    if tensor is None:
        return False
    classes = tensor.shape[-1]
    return labels.ndim == len(tensor.shape) and classes not in (None, 1) and labels.shape[-1] == classes
