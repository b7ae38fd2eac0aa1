"""What a task's logits become for its users, written once in `keras.ops`.

The task's own methods (`ClassifierTask.predict_labels`,
`BertPretrainer.fill_mask`) call these on the backend's tensors, and the
exported serving graph calls them on TensorFlow tensors (the export traces
with the TensorFlow backend), so a served answer is the in-process one.
Strings (class names, id -> token) stay with the caller: the graph uses
TensorFlow string ops, a task's method Python lists.
"""

from keras import ops


def classify(logits):
    """Logits `(batch, num_classes)` -> `(label_id, probabilities)`: the most probable class, softmax.

    Args:
        logits: float `(batch, num_classes)`.

    Returns:
        `label_id` int32 `(batch,)` and `probabilities` float32 `(batch, num_classes)`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> label_id, probabilities = classify(np.array([[0.0, 2.0], [1.0, -1.0]]))
    >>> ops.convert_to_numpy(label_id).tolist(), ops.convert_to_numpy(probabilities).sum(axis=-1).round(4).tolist()
    ([1, 0], [1.0, 1.0])
    """
    probabilities = ops.softmax(ops.cast(logits, "float32"), axis=-1)
    return ops.cast(ops.argmax(probabilities, axis=-1), "int32"), probabilities


def check_top_k(top_k, vocabulary_size):
    """A ValueError unless `top_k` is an int in `[1, vocabulary_size]` (candidates per `[MASK]`).

    Example:

    >>> check_top_k(5, 100)
    5
    """
    if not isinstance(top_k, int) or not 1 <= top_k <= vocabulary_size:
        raise ValueError(f"`top_k` must be an int in [1, {vocabulary_size}]. Received: top_k={top_k!r}")
    return top_k


def top_masked_tokens(logits, token_ids, mask_positions, mask_id, top_k):
    """Fill-mask: the `top_k` most probable tokens at each `[MASK]`; other positions blanked.

    Args:
        logits: float `(batch, masks, vocab)`: the model's `mlm_logits` at `mask_positions`.
        token_ids: int `(batch, seq)`: the packed inputs.
        mask_positions: int `(batch, masks)`: positions, 0-padded (a padding
            position holds no `[MASK]`, so it is blanked).
        mask_id: int. The `[MASK]` token id.
        top_k: int. Candidates per mask.

    Returns:
        dict: `valid` bool `(batch, masks)` (the position holds a `[MASK]`),
        `scores` float32 `(batch, masks, top_k)` (softmax, best first; 0 where
        not valid), `token_ids` int32 `(batch, masks, top_k)` (-1 where not
        valid), `num_masks` int32 `(batch,)`.

    Example:

    >>> import numpy as np
    >>> from keras import ops
    >>> out = top_masked_tokens(np.array([[[0.0, 1.0, 3.0], [0.0, 0.0, 0.0]]]), np.array([[1, 4, 2]]),
    ...                         np.array([[1, 0]]), mask_id=4, top_k=2)
    >>> ops.convert_to_numpy(out["token_ids"]).tolist(), ops.convert_to_numpy(out["num_masks"]).tolist()
    ([[[2, 1], [-1, -1]]], [1])
    """
    positions = ops.cast(mask_positions, "int32")
    valid = ops.equal(ops.take_along_axis(ops.cast(token_ids, "int32"), positions, axis=1), mask_id)
    scores, ids = ops.top_k(ops.softmax(ops.cast(logits, "float32"), axis=-1), top_k)
    keep = valid[:, :, None]
    return {"valid": valid, "scores": ops.where(keep, scores, ops.zeros_like(scores)),
            "token_ids": ops.where(keep, ops.cast(ids, "int32"), -1),
            "num_masks": ops.sum(ops.cast(valid, "int32"), axis=1)}
