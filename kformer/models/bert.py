"""mini-BERT (Devlin et al. 2019): backbone, masked-LM + next-sentence pretrainer, classifier.

Token + position + segment embeddings, LayerNorm, post-norm GELU encoder
blocks, a tanh pooler on [CLS]. The pretrainer and the classifier call the
same backbone, so pretrained weights carry over to fine-tuning.
"""

import keras
import numpy as np
from keras import ops

from kformer import blocks, layers
from kformer.layers import activations
from kformer.layers.checks import check_positive_ints, check_rates
from kformer.models.input_checks import check_batch_size
from kformer.models.postprocess import check_top_k, top_masked_tokens
from kformer.models.registry import builder, deprecated_alias, register
from kformer.models.task import (ClassifierTask, KformerModel, Task, check_class_names, check_length_fits,
                                 check_tokenizer_fits)

BERT_BASE = dict(vocabulary_size=30522, sequence_length=512, num_segments=2)


@keras.saving.register_keras_serializable(package="kformer")
class BertBackbone(KformerModel):
    """`token_ids`, `segment_ids`, `padding_mask` `(batch, seq)` ->
    `{"sequence_output": (batch, seq, hidden_dim), "pooled_output": (batch, hidden_dim)}`.

    Args:
        vocabulary_size: int. Defaults to `30522` (BERT's).
        sequence_length: int. Longest input (learned positions). Defaults to `512`.
        num_segments: int. Segment ids (A/B sentences). Defaults to `2`.
        num_layers, hidden_dim, num_heads, intermediate_dim: ints.
        dropout: float. Defaults to `0.1`.
        attention_dropout: float. Dropout on the attention probabilities (Hugging Face's
            `attention_probs_dropout_prob`). Defaults to `0.0`.
        layer_norm_epsilon: float. Of every LayerNorm, the pretrainer's too. Defaults to `1e-12`.
        activation: `"gelu"` (exact, erf; Hugging Face's BERT) or `"gelu_approximate"` (tanh;
            Google's original BERT and keras-hub's) in the encoder blocks' feed-forward. Defaults to `"gelu"`.

    Attributes: `token_embedding`, `segment_embedding`, `embeddings_norm`,
    `encoder_blocks`, `pooler`.

    Example:

    >>> import numpy as np
    >>> backbone = BertBackbone(vocabulary_size=50, sequence_length=8, hidden_dim=16, num_heads=2,
    ...                         intermediate_dim=32, num_layers=1)
    >>> ids = np.ones((2, 8), "int32")
    >>> out = backbone({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids > 0})
    >>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape)
    ((2, 8, 16), (2, 16))
    """

    def __init__(self, vocabulary_size=30522, sequence_length=512, num_segments=2, num_layers=2,
                 hidden_dim=128, num_heads=2, intermediate_dim=512, dropout=0.1, attention_dropout=0.0,
                 layer_norm_epsilon=1e-12, activation="gelu", **kwargs):
        check_positive_ints(vocabulary_size=vocabulary_size, sequence_length=sequence_length,
                            num_segments=num_segments, num_layers=num_layers, hidden_dim=hidden_dim,
                            num_heads=num_heads, intermediate_dim=intermediate_dim)
        check_rates(dropout=dropout, attention_dropout=attention_dropout)
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        token_embedding = layers.TokenAndPositionEmbedding(
            vocabulary_size, sequence_length, hidden_dim, embeddings_initializer=init, name="embedding")
        segment_embedding = keras.layers.Embedding(num_segments, hidden_dim, embeddings_initializer=init,
                                                   name="segment_embedding")
        embeddings_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="embeddings_norm")
        encoder_blocks = [blocks.TransformerEncoderBlock(
            num_heads, intermediate_dim, dropout=dropout, activation=activations.get(activation),
            attention_dropout=attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon, kernel_initializer=init, name=f"encoder_{i}")
            for i in range(num_layers)]
        pooler = keras.layers.Dense(hidden_dim, activation="tanh", kernel_initializer=init, name="pooler")

        inputs = {"token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
                  "segment_ids": keras.Input((None,), dtype="int32", name="segment_ids"),
                  "padding_mask": keras.Input((None,), dtype="bool", name="padding_mask")}
        x = keras.layers.Add(name="embeddings_add")(
            [token_embedding(inputs["token_ids"]), segment_embedding(inputs["segment_ids"])])
        x = keras.layers.Dropout(dropout, name="embeddings_dropout")(embeddings_norm(x))
        for block in encoder_blocks:
            x = block(x, padding_mask=inputs["padding_mask"])
        pooled = pooler(layers.ClassTokenPooling(name="cls")(x))
        super().__init__(inputs=inputs, outputs={"sequence_output": x, "pooled_output": pooled}, **kwargs)
        self.token_embedding, self.segment_embedding = token_embedding, segment_embedding
        self.embeddings_norm, self.encoder_blocks, self.pooler = embeddings_norm, encoder_blocks, pooler
        self.vocabulary_size, self.sequence_length, self.num_segments = vocabulary_size, sequence_length, num_segments
        self.num_layers, self.hidden_dim, self.num_heads = num_layers, hidden_dim, num_heads
        self.intermediate_dim, self.dropout = intermediate_dim, dropout
        self.attention_dropout, self.layer_norm_epsilon = attention_dropout, layer_norm_epsilon
        self.activation = activation

    def transformer_blocks(self):
        return self, list(self.encoder_blocks), []

    def input_limits(self):
        return bert_input_limits(self)


@keras.saving.register_keras_serializable(package="kformer")
class BertPretrainer(Task):
    """Masked-LM + next-sentence pretraining over a `BertBackbone`.

    Inputs: the backbone's, plus `mask_positions` int `(batch, num_masked)`.
    Outputs: `mlm_logits` `(batch, num_masked, vocab)` (decoder tied to the
    token embedding, plus a bias) and `nsp_logits` `(batch, 2)` (0 = B follows
    A, 1 = B is random). With a `BertPreprocessor(mask_positions=True)`,
    `fill_mask(texts)` predicts the `[MASK]` tokens of raw strings.

    Args:
        backbone: `BertBackbone`.
        preprocessor: `BertPreprocessor` or None.

    Example:

    >>> backbone = BertBackbone(vocabulary_size=50, sequence_length=8, hidden_dim=16, num_heads=2,
    ...                         intermediate_dim=32, num_layers=1)
    >>> sorted(BertPretrainer(backbone).output)
    ['mlm_logits', 'nsp_logits']
    """

    task_type = "fill_mask"

    def __init__(self, backbone, preprocessor=None, **kwargs):
        if not isinstance(backbone, BertBackbone):
            raise ValueError(f"`backbone` must be a BertBackbone. Received: {type(backbone).__name__}")
        hidden_dim = backbone.hidden_dim
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        mlm_transform = keras.layers.Dense(hidden_dim, activation=activations.get(backbone.activation),
                                           kernel_initializer=init, name="mlm_transform")
        mlm_norm = keras.layers.LayerNormalization(epsilon=backbone.layer_norm_epsilon, name="mlm_norm")
        mlm_bias = OutputBias(name="mlm_bias")
        nsp_head = keras.layers.Dense(2, dtype="float32", name="nsp_logits")

        inputs = {name: keras.Input((None,), dtype=tensor.dtype, name=name)
                  for name, tensor in backbone.input.items()}
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        outputs = backbone({k: inputs[k] for k in backbone.input})
        h = MaskedPositionGather(name="gather_masked")(outputs["sequence_output"], inputs["mask_positions"])
        h = mlm_norm(mlm_transform(h))
        mlm = mlm_bias(backbone.token_embedding(h, reverse=True))  # tied decoder
        mlm = keras.layers.Activation("linear", dtype="float32", name="mlm_logits")(mlm)
        super().__init__(inputs=inputs, outputs={"mlm_logits": mlm, "nsp_logits": nsp_head(outputs["pooled_output"])},
                         **kwargs)
        self.backbone = backbone
        self.mlm_transform, self.mlm_norm, self.mlm_bias, self.nsp_head = mlm_transform, mlm_norm, mlm_bias, nsp_head
        self._set_preprocessor(preprocessor)

    def transformer_blocks(self):
        return self.backbone.transformer_blocks()

    def input_limits(self):
        return bert_input_limits(self.backbone)

    def label_limits(self):
        return {"mlm_logits": self.backbone.vocabulary_size, "nsp_logits": 2}

    def validate_preprocessor(self, preprocessor=None):
        preprocessor = self.preprocessor if preprocessor is None else preprocessor
        if preprocessor is not None:
            check_tokenizer_fits(preprocessor, "tokenizer", self.backbone.vocabulary_size)
            check_length_fits(preprocessor, self.backbone.sequence_length)

    def fill_mask(self, texts, top_k=5, batch_size=None):
        """Most likely tokens for every `[MASK]` of each text.

        Returns, per text (or for one str), a list with one entry per
        `[MASK]`: the `top_k` candidates `[{"token": str, "score": float}, ...]`,
        best first. A text without `[MASK]` gets `[]`; a `[MASK]` past the
        preprocessor's `sequence_length` (it would get no answer) is a
        ValueError naming the text. Texts run `batch_size` (default 64) at a time.
        """
        preprocessor = self._require_preprocessor("fill_mask")
        tokenizer = preprocessor.tokenizer
        check_top_k(top_k, tokenizer.vocabulary_size)
        check_batch_size(batch_size)
        batch_size = batch_size or 64
        single = isinstance(texts, str)
        if not single and not (isinstance(texts, (list, tuple)) and all(isinstance(t, str) for t in texts)):
            raise ValueError(f"`texts` must be a str or a list of str. Received: texts={str(texts)[:80]!r} "
                             f"({type(texts).__name__})")
        texts = [texts] if single else list(texts)
        answers, mask_id = [], tokenizer.token_to_id("[MASK]")
        for start in range(0, len(texts), batch_size):
            inputs = preprocessor.encode(texts[start:start + batch_size])
            _check_masks_fit(preprocessor, texts[start:start + batch_size], inputs["token_ids"], start)
            if "mask_positions" not in inputs:
                inputs["mask_positions"] = np.asarray(preprocessor.find_masks(inputs["token_ids"]))
            logits = self.predict_on_batch(inputs)["mlm_logits"]
            out = {k: ops.convert_to_numpy(v) for k, v in top_masked_tokens(
                logits, inputs["token_ids"], inputs["mask_positions"], mask_id, top_k).items()}  # as the export
            for row in range(len(out["valid"])):
                answers.append([[{"token": tokenizer.vocabulary[i], "score": float(score)}
                                 for i, score in zip(out["token_ids"][row, m], out["scores"][row, m])]
                                for m in np.flatnonzero(out["valid"][row])])
        return answers[0] if single else answers


@keras.saving.register_keras_serializable(package="kformer")
class BertTextClassifier(ClassifierTask):
    """Fine-tuning head: backbone inputs -> `logits` `(batch, num_classes)` from `pooled_output`.

    Args:
        backbone: `BertBackbone` (shared, e.g. after pretraining).
        num_classes: int >= 2.
        dropout: float. Before the head. Defaults to `0.1`.
        class_names: optional list of `num_classes` str.
        preprocessor: `BertPreprocessor` or None.

    Example:

    >>> backbone = BertBackbone(vocabulary_size=50, sequence_length=8, hidden_dim=16, num_heads=2,
    ...                         intermediate_dim=32, num_layers=1)
    >>> BertTextClassifier(backbone, num_classes=3).output.shape
    (None, 3)
    """

    task_type = "text_classification"

    def __init__(self, backbone, num_classes=2, dropout=0.1, class_names=None, preprocessor=None, **kwargs):
        if not isinstance(backbone, BertBackbone):
            raise ValueError(f"`backbone` must be a BertBackbone. Received: {type(backbone).__name__}")
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"`num_classes` must be an int >= 2. Received: num_classes={num_classes!r}")
        check_rates(dropout=dropout)
        class_names = check_class_names(class_names, num_classes)
        head = keras.layers.Dense(num_classes, dtype="float32", name="logits")
        inputs = {name: keras.Input((None,), dtype=tensor.dtype, name=name)
                  for name, tensor in backbone.input.items()}
        pooled = backbone(inputs)["pooled_output"]
        logits = head(keras.layers.Dropout(dropout, name="head_dropout")(pooled))
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self.backbone, self.head = backbone, head
        self.num_classes, self.dropout, self.class_names = num_classes, dropout, class_names
        self._set_preprocessor(preprocessor)

    def transformer_blocks(self):
        return self.backbone.transformer_blocks()

    def input_limits(self):
        return bert_input_limits(self.backbone)

    def validate_preprocessor(self, preprocessor=None):
        preprocessor = self.preprocessor if preprocessor is None else preprocessor
        if preprocessor is not None:
            check_tokenizer_fits(preprocessor, "tokenizer", self.backbone.vocabulary_size)
            check_length_fits(preprocessor, self.backbone.sequence_length)


def _check_masks_fit(preprocessor, texts, token_ids, offset):
    """A ValueError naming the text when a `[MASK]` of `texts` is not among its packed `token_ids`
    (it lies past `sequence_length` and would get no answer)."""
    mask = preprocessor.tokenizer.token_to_id("[MASK]")
    total = np.array([row.count(mask) for row in preprocessor.tokenizer.tokenize(texts).to_list()])
    kept = np.sum(np.asarray(token_ids) == mask, axis=1)
    for row in np.flatnonzero(total > kept):
        raise ValueError(f"`texts[{offset + row}]` has {total[row]} [MASK] tokens, {total[row] - kept[row]} of them "
                         f"past the preprocessor's sequence_length={preprocessor.sequence_length}, where they "
                         f"would get no answer: shorten the text. Received: {texts[row][:80]!r}")


def bert_input_limits(backbone):
    """Ids, segments and mask positions each within the backbone's sizes."""
    length = backbone.sequence_length
    return {"token_ids": (backbone.vocabulary_size, length), "segment_ids": (backbone.num_segments, length),
            "padding_mask": (None, length), "mask_positions": (length, None)}


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


@register("bert_base", **BERT_BASE, num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072)
@register("bert_small", num_layers=4, hidden_dim=512, num_heads=8, intermediate_dim=2048)
@register("bert_mini", num_layers=4, hidden_dim=256, num_heads=4, intermediate_dim=1024)
@register("bert_tiny", num_layers=2, hidden_dim=128, num_heads=2, intermediate_dim=512)
@builder(aliases={"max_sequence_length": "sequence_length"})
def bert(**kwargs):
    """Build a `BertBackbone`: `bert(preset="bert_tiny", vocabulary_size=8000, sequence_length=128)`.

    Args:
        preset: str. `"bert_tiny"`, `"bert_mini"`, `"bert_small"` or `"bert_base"`.
        **kwargs: `BertBackbone` arguments; they replace the preset's
            (`max_sequence_length` is the old name of `sequence_length`).

    Example:

    >>> bert(preset="bert_tiny", vocabulary_size=100, sequence_length=16).hidden_dim
    128
    """
    return BertBackbone(**kwargs)


def bert_pretrainer(backbone, preprocessor=None, **kwargs):
    """`BertPretrainer(backbone, preprocessor=preprocessor)`: masked-LM + next-sentence heads.

    Args:
        backbone: `BertBackbone`.
        preprocessor: `BertPreprocessor(..., mask_positions=True)` or None.
        **kwargs: Passed to `BertPretrainer` (`name`).

    Example:

    >>> bert_pretrainer(bert(preset="bert_tiny", vocabulary_size=100)).output["mlm_logits"].shape
    (None, None, 100)
    """
    return BertPretrainer(backbone, preprocessor=preprocessor, **kwargs)


def bert_text_classifier(backbone, num_classes, dropout=0.1, **kwargs):
    """`BertTextClassifier(backbone, num_classes, dropout)`: a fine-tuning head on `pooled_output`.

    Args:
        backbone: `BertBackbone` (e.g. the pretrained one).
        num_classes: int >= 2.
        dropout: float. Defaults to `0.1`.
        **kwargs: Passed to `BertTextClassifier` (`class_names`, `preprocessor`, `name`).

    Example:

    >>> bert_text_classifier(bert(preset="bert_tiny", vocabulary_size=100), 2).output.shape
    (None, 2)
    """
    return BertTextClassifier(backbone, num_classes=num_classes, dropout=dropout, **kwargs)


mini_bert = deprecated_alias("mini_bert", bert)  # the 0.1 names, until 0.3
mini_bert_pretraining = deprecated_alias("mini_bert_pretraining", bert_pretrainer)
mini_bert_classifier = deprecated_alias("mini_bert_classifier", bert_text_classifier)
