"""Encoder-only text classifier (IMDB sentiment and the like)."""

import keras

from kformer import blocks, layers
from kformer.layers.checks import check_positive_ints, check_rates
from kformer.models.registry import builder, deprecated_alias, register
from kformer.models.task import (ClassifierTask, check_class_names, check_length_fits, check_tokenizer_fits)

POOLINGS = ("mean", "cls")


@keras.saving.register_keras_serializable(package="kformer")
class TextClassifier(ClassifierTask):
    """Token ids `(batch, sequence_length)` -> class logits `(batch, num_classes)`.

    Token + learned position embeddings (plus, with `ngram_buckets`, a hashed
    embedding of the n-gram ending at each token: `layers.HashedNgramEmbedding`),
    `num_layers` encoder blocks, pooling
    (`"mean"` over real tokens, or `"cls"`: the first token), dropout and a
    linear head. Id 0 is padding. Calling the model gives logits; `predict`
    gives probabilities. With a `TextClassifierPreprocessor`, `fit`,
    `evaluate`, `predict` and `predict_labels` take raw strings.

    Args:
        vocabulary_size, sequence_length: ints.
        hidden_dim, num_heads, intermediate_dim, num_layers: ints.
        num_classes: int >= 2. Defaults to `2`.
        dropout: float. Defaults to `0.1`.
        pooling: `"mean"` or `"cls"`. Defaults to `"mean"`.
        normalize_first: bool. Pre-norm blocks and a final norm. Defaults to `False`.
        ngram_buckets: int. Rows of the hashed n-gram table; `0` (the default) for none.
        ngram_size: int >= 2. Tokens per hashed n-gram (with `ngram_buckets` only). Defaults to `2`.
        mask_padding: bool. `False`: padding (id 0) takes part in attention and
            in the mean, as in the Keras example (no `mask_zero`); inputs are
            always padded to `sequence_length`, so a text's prediction does not
            depend on its batch. Defaults to `True`.
        class_names: optional list of `num_classes` str.
        preprocessor: `TextClassifierPreprocessor` or None.

    Attributes: `token_embedding`, `ngram_embedding` (None without n-grams),
    `encoder_blocks`, `final_norm` (None unless pre-norm), `pooling_layer`, `head`.

    Example:

    >>> import numpy as np
    >>> model = TextClassifier(vocabulary_size=100, sequence_length=8, hidden_dim=16,
    ...                        num_heads=2, intermediate_dim=32, num_layers=1)
    >>> model.predict(np.ones((3, 8), "int32"), verbose=0).shape  # probabilities
    (3, 2)
    """

    task_type = "text_classification"

    def __init__(self, vocabulary_size=20000, sequence_length=200, hidden_dim=64, num_heads=2,
                 intermediate_dim=128, num_layers=2, num_classes=2, dropout=0.1, pooling="mean",
                 normalize_first=False, ngram_buckets=0, ngram_size=2, mask_padding=True, class_names=None,
                 preprocessor=None, **kwargs):
        check_positive_ints(vocabulary_size=vocabulary_size, sequence_length=sequence_length,
                            hidden_dim=hidden_dim, num_heads=num_heads,
                            intermediate_dim=intermediate_dim, num_layers=num_layers)
        check_rates(dropout=dropout)
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"`num_classes` must be an int >= 2. Received: num_classes={num_classes!r}")
        if not isinstance(ngram_buckets, int) or isinstance(ngram_buckets, bool) or ngram_buckets < 0:
            raise ValueError(f"`ngram_buckets` must be an int >= 0 (0: no n-grams). "
                             f"Received: ngram_buckets={ngram_buckets!r}")
        if not ngram_buckets and ngram_size != 2:
            raise ValueError(f"`ngram_size` takes effect only with `ngram_buckets` > 0. Received: "
                             f"ngram_size={ngram_size!r}, ngram_buckets={ngram_buckets!r}")
        if not isinstance(mask_padding, bool):
            raise ValueError(f"`mask_padding` must be a bool. Received: mask_padding={mask_padding!r}")
        if pooling not in POOLINGS:
            raise ValueError(f"`pooling` must be one of {POOLINGS}. Received: pooling={pooling!r}")
        class_names = check_class_names(class_names, num_classes)
        token_embedding = layers.TokenAndPositionEmbedding(vocabulary_size, sequence_length, hidden_dim,
                                                           mask_zero=mask_padding, name="embedding")
        ngram_embedding = (layers.HashedNgramEmbedding(ngram_buckets, hidden_dim, ngram_size, mask_zero=mask_padding,
                                                       name="ngram_embedding")
                           if ngram_buckets else None)
        encoder_blocks = [blocks.TransformerEncoderBlock(num_heads, intermediate_dim, dropout=dropout,
                                                         normalize_first=normalize_first, name=f"encoder_{i}")
                          for i in range(num_layers)]
        final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm") if normalize_first else None
        # Mean over real tokens (empty text -> zeros; all positions without a mask), or the first token.
        pooling_layer = (layers.MaskedMeanPooling if pooling == "mean" else layers.ClassTokenPooling)(name="pool")
        head = keras.layers.Dense(num_classes, name="logits", dtype="float32")

        token_ids = keras.Input((sequence_length,), dtype="int32", name="token_ids")
        x = token_embedding(token_ids)
        if ngram_embedding is not None:
            x = keras.layers.Add(name="add_ngrams")([x, ngram_embedding(token_ids)])  # both carry the padding mask
        x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
        for block in encoder_blocks:
            x = block(x)
        if final_norm is not None:
            x = final_norm(x)
        x = keras.layers.Dropout(dropout, name="head_dropout")(pooling_layer(x))
        super().__init__(inputs=token_ids, outputs=head(x), **kwargs)
        self.token_embedding, self.encoder_blocks, self.final_norm = token_embedding, encoder_blocks, final_norm
        self.ngram_embedding, self.ngram_buckets, self.ngram_size = ngram_embedding, ngram_buckets, ngram_size
        self.mask_padding = mask_padding
        self.pooling_layer, self.head = pooling_layer, head
        self.vocabulary_size, self.sequence_length, self.hidden_dim = vocabulary_size, sequence_length, hidden_dim
        self.num_heads, self.intermediate_dim, self.num_layers = num_heads, intermediate_dim, num_layers
        self.num_classes, self.dropout, self.pooling = num_classes, dropout, pooling
        self.normalize_first, self.class_names = normalize_first, class_names
        self._set_preprocessor(preprocessor)

    def transformer_blocks(self):
        return self, list(self.encoder_blocks), []

    def input_limits(self):
        return {"token_ids": (self.vocabulary_size, self.sequence_length)}

    def validate_preprocessor(self, preprocessor=None):
        preprocessor = self.preprocessor if preprocessor is None else preprocessor
        if preprocessor is not None:
            check_tokenizer_fits(preprocessor, "tokenizer", self.vocabulary_size)
            check_length_fits(preprocessor, self.sequence_length, exact=True)


@register("imdb_bigram", hidden_dim=64, num_heads=2, intermediate_dim=128, num_layers=2, ngram_buckets=2**18,
          mask_padding=False)
@register("imdb_small", hidden_dim=64, num_heads=2, intermediate_dim=128, num_layers=2)
@register("imdb_tiny", hidden_dim=32, num_heads=2, intermediate_dim=64, num_layers=1)
@builder(sizes=lambda preprocessor: {"vocabulary_size": preprocessor.tokenizer.vocabulary_size})
def text_classifier(**kwargs):
    """Build a `TextClassifier`: `text_classifier(preset="imdb_small", vocabulary_size=8000)`.

    Args:
        preset: str. `"imdb_tiny"`, `"imdb_small"` or `"imdb_bigram"` (`imdb_small` plus a
            hashed bigram embedding of 2**18 rows, padding unmasked: 89 % on IMDB's test set,
            docs/RESULTS.md).
        **kwargs: `TextClassifier` arguments; they replace the preset's. With a
            `preprocessor` and no `vocabulary_size`, its tokenizer's size.

    Example:

    >>> text_classifier(preset="imdb_tiny", vocabulary_size=100, sequence_length=16).output.shape
    (None, 2)
    """
    return TextClassifier(**kwargs)


imdb_classifier = deprecated_alias("imdb_classifier", text_classifier)  # the 0.1 name, until 0.3
