"""Fast paths, kept apart from the readable layers and each tested equal to the path it replaces.

- `attention.fused_attention`: attention in one fused op (flash attention on GPUs) where it is
  equal to `MultiHeadAttention`'s explicit softmax and not slower.
- `decoding.PlainDecoder`: a cached decoding step on the weights as plain matrices, without a Keras
  `__call__` per sublayer, for the decoding loops of `kformer.models.generate`.
- `slices.write_slice` / `slice_rows`: a cache write TensorFlow runs without XLA (as TF Serving
  must), and without `keras.ops`' argument search in eager torch.

The layers and tasks never depend on a kernel for their numbers: removing one leaves every result
unchanged (the tests compare each kernel with its reference on every backend).
"""
