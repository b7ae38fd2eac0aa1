"""Rematerialization (gradient checkpointing): each Transformer block's activations are recomputed in
the backward pass instead of kept from the forward pass.

Training keeps every layer's activations until the backward pass uses them; for a Transformer that
is a few `(batch, length, width)` tensors and the `(batch, heads, length, length)` attention
weights per block, which grow with the sequence. Under `remat_blocks()`, the blocks a task builds
keep only their inputs and run their forward computation again when the gradient needs it
(Chen et al., 2016, "Training Deep Nets with Sublinear Memory Cost"): about one more forward pass of
compute for activations of one block at a time. The gradients are the same. Keras's
`keras.RematScope` does the work (`jax.checkpoint`, `torch.utils.checkpoint`, TensorFlow's
`recompute_grad`); this scope names the blocks, so the layers inside them are not checkpointed again.
"""

import keras

# The names kformer's tasks give their Transformer blocks (`encoder_0`, `decoder_3`, ...). Not the Conformer's:
# their batch normalization updates its statistics in the forward pass, which a recomputation would repeat.
BLOCK_NAMES = tuple(f"{kind}_{i}" for kind in ("encoder", "decoder") for i in range(1024))


def remat_blocks():
    """A `keras.RematScope` under which a task's Transformer blocks are built to be rematerialized.

    Build or load the task inside it (`models.build`, `from_pretrained`, a constructor); the
    layers remember the scope, so training the task later rematerializes its blocks. Blocks with
    dropout or experts are refused when built (a ValueError naming the block): Keras's
    `RematScope` does not replay a block's random draws or its added losses in the recomputation.

    Example:

    >>> import numpy as np
    >>> from kformer import models
    >>> with remat_blocks():
    ...     task = models.text_classifier(preset="imdb_tiny", vocabulary_size=100, sequence_length=8, dropout=0.0)
    >>> task.compile("sgd", "sparse_categorical_crossentropy")
    >>> loss = task.train_on_batch(np.ones((2, 8), "int32"), np.array([0, 1]))
    """
    return keras.RematScope(mode="list_of_layers", layer_names=list(BLOCK_NAMES))
