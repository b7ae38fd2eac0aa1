"""Fast paths, kept apart from the readable layers and each tested equal to the path it replaces.

- `attention.fast_attention`: `MultiHeadAttention`'s explicit softmax in one fused op (flash
  attention on GPUs), or one head at a time on a JAX CPU.
- `decoding.PlainDecoder`: a cached decoding step on the weights as plain matrices, without a Keras
  `__call__` per sublayer, for the decoding loops of `kformer.models.generate`.
- `slices.write_slice` / `slice_rows`: a cache write TensorFlow runs without XLA (as TF Serving
  must), and without `keras.ops`' argument search in eager torch.

The layers and tasks never depend on a kernel for their numbers: removing one leaves every result
unchanged (the tests compare each kernel with its reference on every backend).
"""
