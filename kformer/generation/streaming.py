"""Streaming: hand each decoding step's tokens to Python while the compiled loop runs.

The loop is an `ops.while_loop` compiled as one graph (XLA on JAX, a
`tf.function` on TensorFlow; eager on torch), so a step's tokens reach
Python through the backend's host callback. This is the one
backend-specific part of decoding; the loop calls `emitter(fn)(tokens)`.
"""

import keras
import numpy as np


def emitter(fn):
    """`emit(tokens) -> tokens`: calls `fn` with the int32 numpy `(batch,)` of each step, in step order.

    TensorFlow: a `tf.py_function` the step's tokens flow through (so it
    runs before they are written; the loop then runs as a graph without XLA,
    which cannot call Python). JAX: `jax.debug.callback(..., ordered=True)`
    inside the compiled loop. Torch: a plain call (the loop runs eagerly).

    Example:

    >>> seen = []
    >>> emit = emitter(seen.append)
    >>> import numpy as np
    >>> _ = emit(keras.ops.convert_to_tensor(np.array([3, 4], "int32")))
    >>> [s.tolist() for s in seen]
    [[3, 4]]
    """
    backend = keras.backend.backend()

    def call(tokens):
        fn(np.asarray(tokens, "int32"))

    if backend == "tensorflow":
        import tensorflow as tf

        def emit(tokens):
            def forward(t):
                call(t.numpy())
                return t

            out = tf.py_function(forward, [tokens], tf.int32)
            out.set_shape(tokens.shape)
            return out
    elif backend == "jax":
        import jax

        def emit(tokens):
            jax.debug.callback(call, tokens, ordered=True)
            return tokens
    else:
        def emit(tokens):
            call(keras.ops.convert_to_numpy(tokens))
            return tokens
    return emit


class TextStreamer:
    """A `streamer` that writes one row's text as it comes, like transformers' `TextStreamer`.

    Each step's token of row `row` joins the tokens so far; the whole is
    detokenized again and the part not yet written is written. Text a
    detokenizer rewrites at an earlier place (rare: spacing around a piece)
    waits for `end`, which writes the rest of the final text.

    Args:
        detokenize: callable, int ids `(n,)` -> str: the text of `prefix`
            plus the generated tokens.
        write: callable taking str (e.g. `sys.stdout.write`).
        prefix: ints before the generated tokens (a language model's prompt
            ids), detokenized with them but not written. Defaults to none.
            Id 0 ends the row's stream (the loop writes 0 once a row has
            ended).
        row: int. The batch row to stream. Defaults to `0`.

    Example:

    >>> out = []
    >>> streamer = TextStreamer(lambda ids: " ".join(str(i) for i in ids), out.append)
    >>> streamer(np.array([7])); streamer(np.array([8])); streamer(np.array([0]))
    >>> out
    ['7', ' 8']
    """

    def __init__(self, detokenize, write, prefix=(), row=0):
        self.detokenize, self.write, self.row = detokenize, write, row
        self.ids = [int(i) for i in prefix]
        self.skip = len(self.detokenize(self.ids)) if self.ids else 0  # the prompt's text is not written
        self.written, self.ended = "", False

    def __call__(self, tokens):
        token = int(np.asarray(tokens)[self.row])
        self.ended = self.ended or token == 0  # 0: the row has ended (or Marian's end token, id 0)
        if self.ended:
            return
        self.ids.append(token)
        self._write(self.detokenize(self.ids)[self.skip:])

    def end(self, final_text=None):
        """Write what is left of `final_text` (the decoded result; default: the tokens so far) and a newline."""
        text = self.detokenize(self.ids)[self.skip:] if final_text is None else final_text
        if text.startswith(self.written):
            self.write(text[len(self.written):])
        else:
            self.write("\n" + text)
        self.write("\n")
        self.written = text

    def _write(self, text):
        if text.startswith(self.written) and len(text) > len(self.written):
            self.write(text[len(self.written):])
            self.written = text
