"""Batch shapes for compiled decoding loops, written once in `keras.ops`.

XLA compiles a loop once per input shape. These functions choose the few
shapes a batch runs at: `batch_bucket` rows (`repeat_last_row` fills them),
`used_width` columns (all-padding columns dropped) rounded up by
`pad_width`. They run on numpy arrays in process (any backend: they return
that backend's tensors; `int()` a scalar) and on TensorFlow tensors inside
the exported serving graph, so `generate` and the served `translate` pick
the same shapes.
"""

from keras import ops

BATCH_MULTIPLE = 16  # compiled loops run batches of 1, 2, 4, 8, 16, then multiples of 16 rows
WIDTH_MULTIPLE = 16  # sources run at a multiple of 16 tokens


def batch_bucket(rows, multiple=BATCH_MULTIPLE):
    """The batch size a compiled loop runs `rows` rows at: the next power of two up to `multiple`,
    then the next multiple of it (20 sizes, so at most 20 compiles, up to 256 rows).

    Args:
        rows: int or int scalar tensor >= 0. The rows asked for.
        multiple: int. A power of two. Defaults to `16`.

    Returns:
        int32 scalar tensor >= `rows`.

    Example:

    >>> [int(batch_bucket(n)) for n in (0, 1, 3, 5, 16, 17, 40)]
    [1, 1, 4, 8, 16, 32, 48]
    """
    rows = ops.cast(rows, "int32")
    powers = [1 << i for i in range(multiple.bit_length())]  # 1, 2, ..., multiple
    smaller = ops.sum(ops.cast(ops.less(ops.convert_to_tensor(powers[:-1], "int32"), rows), "int32"))
    small = ops.take(ops.convert_to_tensor(powers, "int32"), smaller)  # the first power >= rows
    return ops.where(rows <= multiple, small, (rows + multiple - 1) // multiple * multiple)


def repeat_last_row(array, rows):
    """`array` `(n, ...)` with its last row repeated up to `rows` rows.

    A copied row decodes and ends as its original does, so padding a batch
    this way never makes the decoding loop run longer (a row of zeros could).

    Args:
        array: array or tensor `(n, ...)`, `n >= 1`.
        rows: int or int scalar tensor. Rows wanted; `array` keeps its `n`
            rows when it has as many.

    Returns:
        Tensor `(max(n, rows), ...)`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> ops.convert_to_numpy(repeat_last_row(np.array([[1, 2], [3, 4]]), 3)).tolist()
    [[1, 2], [3, 4], [3, 4]]
    """
    n = ops.shape(array)[0]
    index = ops.minimum(ops.arange(ops.maximum(ops.cast(rows, "int32"), n), dtype="int32"), n - 1)
    return ops.take(array, index, axis=0)


def used_width(ids, padding_id=0):
    """Columns up to the last one holding a token (at least 1): an int32 scalar.

    A batch of short sources, padded to the preprocessor's `sequence_length`,
    then encodes and cross-attends only as wide as it needs.

    Args:
        ids: int `(batch, width)`.
        padding_id: int. The id that pads `ids`. Defaults to `0`.

    Returns:
        int32 scalar tensor in `[1, width]` (1 when `width` is 0 or every id is padding).

    Example:

    >>> import numpy as np
    >>> int(used_width(np.array([[5, 0, 0, 0], [6, 7, 0, 0]]))), int(used_width(np.zeros((2, 3), "int32")))
    (2, 1)
    """
    used = ops.any(ops.not_equal(ids, padding_id), axis=0)  # (width,)
    positions = ops.arange(1, ops.shape(ids)[1] + 1, dtype="int32")
    return ops.maximum(ops.max(ops.concatenate([ops.where(used, positions, 0), ops.zeros((1,), "int32")])), 1)


def pad_width(ids, limit=None, multiple=WIDTH_MULTIPLE, padding_id=0):
    """Right-pad columns with `padding_id` up to a multiple of `multiple` (at most `limit`): fewer shapes, fewer
    compiles.

    Args:
        ids: int `(batch, width)`.
        limit: int or None. The widest result (a wider `ids` is kept as it is).
            Defaults to `None` (no limit).
        multiple: int. Defaults to `16`.
        padding_id: int. Defaults to `0`.

    Returns:
        Tensor `(batch, max(width, min(padded, limit)))`, `padded` the next multiple.

    Example:

    >>> import numpy as np
    >>> tuple(pad_width(np.ones((2, 3), "int32")).shape), tuple(pad_width(np.ones((2, 3), "int32"), 8).shape)
    ((2, 16), (2, 8))
    """
    ids = ops.convert_to_tensor(ids)
    width = ops.shape(ids)[1]
    target = (width + multiple - 1) // multiple * multiple
    if limit is not None:
        target = ops.minimum(target, limit)
    extra = ops.maximum(target - width, 0)
    return ops.concatenate([ids, ops.full((ops.shape(ids)[0], extra), padding_id, ids.dtype)], axis=1)


def trim_width(ids, padding_id=0):
    """`ids[:, :used_width(ids)]`: the all-padding columns on the right dropped (one column kept at least).

    Args:
        ids: int `(batch, width)`.
        padding_id: int. The id that pads `ids`. Defaults to `0`.

    Returns:
        Tensor `(batch, used_width(ids))`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> ops.convert_to_numpy(trim_width(np.array([[5, 0, 0], [6, 7, 0]]))).tolist()
    [[5, 0], [6, 7]]
    """
    ids = ops.convert_to_tensor(ids)
    return ops.slice(ids, [0, 0], [ops.shape(ids)[0], used_width(ids, padding_id)])


def strip_prompt(tokens, prompt_ids):
    """Generated tokens only: each row's prompt positions (its non-zero `prompt_ids`) set to 0.

    Args:
        tokens: int `(batch, length)`, the prompt then the generated tokens.
        prompt_ids: int `(batch, prompt_width)`, right-padded prompts.

    Returns:
        Tensor `(batch, length)` like `tokens`, 0 where the prompt was.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> ops.convert_to_numpy(strip_prompt(np.array([[1, 5, 6, 7]]), np.array([[1, 5]]))).tolist()
    [[0, 0, 6, 7]]
    """
    prompt_length = ops.sum(ops.cast(ops.not_equal(prompt_ids, 0), "int32"), axis=1)
    generated = ops.arange(ops.shape(tokens)[1], dtype="int32")[None, :] >= prompt_length[:, None]
    return ops.where(generated, tokens, ops.zeros_like(tokens))
