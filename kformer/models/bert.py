"""mini-BERT: backbone, masked-LM + next-sentence pretraining model, classifier.

Devlin et al. 2019: token + position + segment embeddings, LayerNorm,
post-norm GELU encoder blocks, a tanh pooler on [CLS].
"""

import keras
from keras import ops

from kformer import blocks, layers
from kformer.models.registry import builder, register

BERT_BASE = dict(vocabulary_size=30522, max_sequence_length=512, num_segments=2)


@register("bert_base", **BERT_BASE, num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072)
@register("bert_small", num_layers=4, hidden_dim=512, num_heads=8, intermediate_dim=2048)
@register("bert_mini", num_layers=4, hidden_dim=256, num_heads=4, intermediate_dim=1024)
@register("bert_tiny", num_layers=2, hidden_dim=128, num_heads=2, intermediate_dim=512)
@builder
def mini_bert(
    *,
    vocabulary_size=30522,
    max_sequence_length=512,
    num_segments=2,
    num_layers=2,
    hidden_dim=128,
    num_heads=2,
    intermediate_dim=512,
    dropout=0.1,
    name="mini_bert",
):
    """Backbone: `token_ids`, `segment_ids`, `padding_mask` `(batch, seq)` ->
    `{"sequence_output": (batch, seq, hidden_dim), "pooled_output": (batch, hidden_dim)}`."""
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    padding_mask = keras.Input((None,), dtype="bool", name="padding_mask")
    init = keras.initializers.TruncatedNormal(stddev=0.02)
    x = layers.TokenAndPositionEmbedding(vocabulary_size, max_sequence_length, hidden_dim,
                                         embeddings_initializer=init, name="embedding")(token_ids)
    segments = keras.layers.Embedding(num_segments, hidden_dim, embeddings_initializer=init,
                                      name="segment_embedding")(segment_ids)
    x = keras.layers.Add(name="embeddings_add")([x, segments])
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="embeddings_norm")(x)
    x = keras.layers.Dropout(dropout, name="embeddings_dropout")(x)
    for i in range(num_layers):
        x = blocks.TransformerEncoderBlock(
            num_heads, intermediate_dim, dropout=dropout, activation="gelu",
            layer_norm_epsilon=1e-12, kernel_initializer=init, name=f"encoder_{i}",
        )(x, padding_mask=padding_mask)
    cls = layers.ClassTokenPooling(name="cls")(x)
    pooled = keras.layers.Dense(hidden_dim, activation="tanh", kernel_initializer=init,
                                name="pooler")(cls)
    return keras.Model(
        {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask},
        {"sequence_output": x, "pooled_output": pooled},
        name=name,
    )


def mini_bert_pretraining(backbone, name="mini_bert_pretraining"):
    """Masked-LM + next-sentence model over `backbone`.

    Inputs: the backbone's, plus `mask_positions` int `(batch, num_masked)`.
    Outputs: `mlm_logits` `(batch, num_masked, vocab)` (decoder tied to the
    token embedding, plus a bias) and `nsp_logits` `(batch, 2)`.
    """
    # Built on the backbone's own graph (not nested), so the token embedding is
    # one shared layer of a flat model and `.keras` files save it once.
    inputs = dict(backbone.input)
    inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
    outputs = backbone.output
    embedding = backbone.get_layer("embedding")
    hidden_dim = embedding.hidden_dim
    gathered = MaskedPositionGather(name="gather_masked")(outputs["sequence_output"],
                                                          inputs["mask_positions"])
    h = keras.layers.Dense(hidden_dim, activation="gelu", name="mlm_transform")(gathered)
    h = keras.layers.LayerNormalization(epsilon=1e-12, name="mlm_norm")(h)
    mlm = embedding(h, reverse=True)
    mlm = keras.layers.Activation("linear", dtype="float32", name="mlm_logits")(
        OutputBias(name="mlm_bias")(mlm))
    nsp = keras.layers.Dense(2, dtype="float32", name="nsp_logits")(outputs["pooled_output"])
    return keras.Model(inputs, {"mlm_logits": mlm, "nsp_logits": nsp}, name=name)


def mini_bert_classifier(backbone, num_classes, dropout=0.1, name="mini_bert_classifier"):
    """Fine-tuning head: backbone inputs -> `logits` `(batch, num_classes)` from `pooled_output`."""
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"`num_classes` must be an int >= 2. Received: num_classes={num_classes}")
    pooled = backbone.output["pooled_output"]  # the backbone's graph, shared weights
    x = keras.layers.Dropout(dropout, name="head_dropout")(pooled)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(dict(backbone.input), logits, name=name)


@keras.saving.register_keras_serializable(package="kformer")
class MaskedPositionGather(keras.layers.Layer):
    """`(batch, seq, dim)` and int positions `(batch, n)` -> `(batch, n, dim)`."""

    def call(self, sequence, positions):
        return ops.take_along_axis(sequence, ops.cast(positions, "int32")[..., None], axis=1)

    def compute_output_shape(self, sequence_shape, positions_shape):
        return tuple(positions_shape) + (sequence_shape[-1],)


@keras.saving.register_keras_serializable(package="kformer")
class OutputBias(keras.layers.Layer):
    """Adds a learned bias over the last axis (BERT's MLM output bias)."""

    def build(self, inputs_shape):
        self.bias = self.add_weight(name="bias", shape=(inputs_shape[-1],), initializer="zeros")

    def call(self, inputs):
        return inputs + ops.cast(self.bias, inputs.dtype)
