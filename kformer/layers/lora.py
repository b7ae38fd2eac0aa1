"""LoRA for multi-axis projections (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models").

A frozen kernel `W` gains a trainable low-rank update, `W + (alpha / r) A B`: `A` maps the
kernel's input axes to `r` values, `B` maps those to its output axes, and `B` starts at zero,
so the outputs are unchanged until training. Keras's own `Dense.enable_lora` is exactly this for
a matrix. For an `EinsumDense` Keras factors every kernel axis but the last into `A`: an
attention projection `(hidden, heads, head_dim)` then gets one `A` per head and a `B` shared by
the heads, a different (per-head) update that no peft adapter holds. `LoraEinsumDense` factors
as the paper and peft do, over the projection seen as the matrix `(hidden, heads * head_dim)`,
so a peft adapter loads exactly and a trained one is written back exactly.
"""

import contextlib
import string

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="kformer")
class LoraEinsumDense(keras.layers.EinsumDense):
    """`keras.layers.EinsumDense` whose `enable_lora` factors `A` over the kernel's input axes and `B`
    over its output axes (peft's and the paper's factors).

    After `enable_lora(rank)` the kernel is frozen and `lora_kernel_a` (input axes + `(rank,)`) and
    `lora_kernel_b` (`(rank,)` + output axes) train; `kernel` is the merged kernel, so `call`,
    `.keras` files (`save_own_variables`) and everything that reads `kernel` see the adapted
    weights. A quantized layer (int8, int4) keeps its quantized kernel and adds the update from
    the inputs (QLoRA); float8 has no LoRA in Keras and is refused.

    Args:
        Those of `keras.layers.EinsumDense`.

    Example:

    >>> import numpy as np
    >>> query = LoraEinsumDense("ac,cde->ade", output_shape=(2, 4), bias_axes="de")
    >>> query.build((None, 8))
    >>> query.enable_lora(3)
    >>> tuple(query.lora_kernel_a.shape), tuple(query.lora_kernel_b.shape)  # peft: A (3, 8), B (2 * 4, 3)
    ((8, 3), (3, 2, 4))
    >>> [w.name for w in query.trainable_weights]  # the kernel is frozen (a task's `enable_lora` freezes the rest)
    ['bias', 'lora_kernel_a', 'lora_kernel_b']
    """

    adapted = False  # enable_lora was called (not Keras's `lora_enabled`: its merge assumes Keras's factors)

    def enable_lora(self, rank, lora_alpha=None, a_initializer="he_uniform", b_initializer="zeros"):
        if not self.built:
            raise ValueError(f"Cannot enable LoRA on layer {self.name!r} before it is built.")
        if self.adapted or self.lora_enabled:
            raise ValueError(f"LoRA is already enabled on layer {self.name!r} (rank {self.lora_rank}).")
        if self.quantization_mode not in (None, "int8", "int4"):
            raise ValueError(f"LoRA on layer {self.name!r} needs float, int8 or int4 weights; it is quantized as "
                             f"{self.quantization_mode!r}, for which Keras has no LoRA.")
        if self.activation not in (None, keras.activations.linear) or self.kernel_constraint is not None:
            raise ValueError(f"LoRA on layer {self.name!r} needs a linear projection without a kernel constraint.")
        inputs, kernel, outputs = self._terms()
        rest = sorted(set(string.ascii_letters) - set(self.equation))[0]  # a free letter for the rank axis
        inside = [i for i, axis in enumerate(kernel) if axis in inputs]
        shape = tuple(self.original_kernel_shape if self.quantization_mode == "int4" else self._kernel.shape)
        kept = "".join(axis for axis in inputs if axis not in kernel)  # the input axes the kernel does not contract
        self._lora_equations = {
            "delta": f"{''.join(kernel[i] for i in inside)}{rest},{rest}{''.join(a for a in kernel if a not in inputs)}"
                     f"->{kernel}",
            "down": f"{inputs},{''.join(kernel[i] for i in inside)}{rest}->{kept}{rest}",
            "up": f"{kept}{rest},{rest}{''.join(a for a in kernel if a not in inputs)}->{outputs}"}
        self._tracker.unlock()
        # float32 factors, as Keras's: no underflow while training in a lower precision
        self.lora_kernel_a = self.add_weight(
            name="lora_kernel_a", shape=tuple(shape[i] for i in inside) + (rank,),
            initializer=keras.initializers.get(a_initializer), dtype="float32")
        self.lora_kernel_b = self.add_weight(
            name="lora_kernel_b", shape=(rank,) + tuple(s for i, s in enumerate(shape) if i not in inside),
            initializer=keras.initializers.get(b_initializer), dtype="float32")
        self._kernel.trainable = False
        self._tracker.lock()
        self.adapted, self.lora_rank = True, rank
        self.lora_alpha = rank if lora_alpha is None else lora_alpha

    def _terms(self):
        inputs, rest = self.equation.split(",")
        kernel, outputs = rest.split("->")
        return inputs, kernel, outputs

    def lora_delta(self):
        """`(alpha / rank) A B`, the update in the kernel's shape (float32)."""
        return (self.lora_alpha / self.lora_rank) * ops.einsum(
            self._lora_equations["delta"], self.lora_kernel_a, self.lora_kernel_b)

    @property
    def kernel(self):
        kernel = super().kernel
        if not self.adapted or self.quantization_mode is not None:
            return kernel
        return ops.cast(ops.add(kernel, self.lora_delta()), self.compute_dtype)

    def quantized_call(self, inputs, training=None):
        outputs = super().quantized_call(inputs, training=training)
        if not self.adapted:
            return outputs
        down = ops.einsum(self._lora_equations["down"], ops.cast(inputs, "float32"), self.lora_kernel_a)
        update = (self.lora_alpha / self.lora_rank) * ops.einsum(self._lora_equations["up"], down,
                                                                  self.lora_kernel_b)
        return ops.add(outputs, ops.cast(update, outputs.dtype))

    def quantize(self, mode=None, type_check=True, config=None):
        if self.adapted:
            raise ValueError(f"Layer {self.name!r} has LoRA adapters: quantize before `enable_lora` (QLoRA), or "
                             "merge them first (save and load the model).")
        super().quantize(mode, type_check=False, config=config)  # Keras refuses subclasses by default

    def save_own_variables(self, store):
        if self.adapted and self.quantization_mode is not None:
            raise ValueError(f"Layer {self.name!r} holds LoRA adapters over {self.quantization_mode} weights, which "
                             "cannot be merged without quantizing the update: save the adapters "
                             "(`save_lora_weights`), or load them onto the float model and quantize that.")
        super().save_own_variables(store)  # the merged kernel (`kernel`), as Keras's LoRA saves

    def load_own_variables(self, store):
        if not self.adapted:
            return super().load_own_variables(store)
        with _keras_lora_flag(self):  # skips Keras's count check; the saved kernel holds the merged update
            super().load_own_variables(store)
        self.lora_kernel_a.assign(ops.zeros(self.lora_kernel_a.shape))  # as Keras's LoRA: the merged
        self.lora_kernel_b.assign(ops.zeros(self.lora_kernel_b.shape))  # kernel loads, the update restarts


@contextlib.contextmanager
def _keras_lora_flag(layer):
    layer.lora_enabled = True
    try:
        yield
    finally:
        layer.lora_enabled = False


def _flag(layer):
    """The attribute whose truth makes `layer.kernel` the merged kernel: ours, or Keras's."""
    return "adapted" if isinstance(layer, LoraEinsumDense) else "lora_enabled"


@contextlib.contextmanager
def base_kernels(model):
    """Inside, every adapted layer's `kernel` is its frozen base variable, not the merged tensor (to
    tell which layer a table's kernel belongs to, or to back up the base and the adapters apart)."""
    layers = [layer for layer in model._flatten_layers() if getattr(layer, _flag(layer), False)]
    try:
        for layer in layers:
            setattr(layer, _flag(layer), False)
        yield
    finally:
        for layer in layers:
            setattr(layer, _flag(layer), True)
