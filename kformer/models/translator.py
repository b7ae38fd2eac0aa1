"""Encoder-decoder translator ("Attention Is All You Need", Figure 1)."""

import keras

from kformer import blocks, layers
from kformer.models.registry import builder, register

PAPER = dict(vocabulary_size=37000, sequence_length=256, dropout=0.1)


@register("transformer_big", **{**PAPER, "dropout": 0.3}, hidden_dim=1024, num_heads=16,
          intermediate_dim=4096, num_encoder_layers=6, num_decoder_layers=6)
@register("transformer_base", **PAPER, hidden_dim=512, num_heads=8, intermediate_dim=2048,
          num_encoder_layers=6, num_decoder_layers=6)
@register("transformer_small", vocabulary_size=16000, sequence_length=128, hidden_dim=256,
          num_heads=4, intermediate_dim=1024, num_encoder_layers=3, num_decoder_layers=3)
@register("transformer_tiny", vocabulary_size=8000, sequence_length=64, hidden_dim=64,
          num_heads=2, intermediate_dim=128, num_encoder_layers=2, num_decoder_layers=2)
@builder
def translator(
    *,
    vocabulary_size=None,
    encoder_vocabulary_size=None,
    decoder_vocabulary_size=None,
    sequence_length=256,
    hidden_dim=512,
    num_heads=8,
    intermediate_dim=2048,
    num_encoder_layers=6,
    num_decoder_layers=6,
    dropout=0.1,
    position="sinusoidal",
    tie_output_embedding=True,
    normalize_first=False,
    name="translator",
):
    """Source ids `(batch, src_len)` + target ids `(batch, tgt_len)` -> logits `(batch, tgt_len, vocab)`.

    Id 0 is padding on both sides (masks are derived from it). A shared
    `vocabulary_size` makes one embedding table serve encoder, decoder and
    output projection (paper 3.4); separate `encoder_vocabulary_size` /
    `decoder_vocabulary_size` give two tables, the decoder's tied to the
    output when `tie_output_embedding`. Embeddings are scaled by
    sqrt(hidden_dim); dropout follows the embeddings and every sublayer
    (paper 5.4; 0.3 for the big model, as in Table 3).
    """
    if vocabulary_size is not None and (encoder_vocabulary_size or decoder_vocabulary_size):
        if {encoder_vocabulary_size or vocabulary_size, decoder_vocabulary_size or vocabulary_size} != {vocabulary_size}:
            raise ValueError(
                "Pass either a shared `vocabulary_size` or separate encoder/decoder sizes. Received: "
                f"vocabulary_size={vocabulary_size}, encoder_vocabulary_size={encoder_vocabulary_size}, "
                f"decoder_vocabulary_size={decoder_vocabulary_size}"
            )
    source_vocab = encoder_vocabulary_size or vocabulary_size
    target_vocab = decoder_vocabulary_size or vocabulary_size
    if not source_vocab or not target_vocab:
        raise ValueError(
            "A vocabulary size is required: `vocabulary_size` (shared) or both "
            f"`encoder_vocabulary_size` and `decoder_vocabulary_size`. Received: "
            f"vocabulary_size={vocabulary_size}, encoder_vocabulary_size={encoder_vocabulary_size}, "
            f"decoder_vocabulary_size={decoder_vocabulary_size}"
        )
    shared = vocabulary_size is not None and source_vocab == target_vocab
    rate = dropout

    def embedding(vocab, layer_name):
        return layers.TokenAndPositionEmbedding(
            vocab, sequence_length, hidden_dim, position=position, mask_zero=True,
            scale_by_sqrt_dim=True,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=hidden_dim**-0.5),
            name=layer_name,
        )

    block_kwargs = dict(dropout=rate, normalize_first=normalize_first)
    encoder_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
    decoder_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")

    encoder_embedding = embedding(source_vocab, "shared_embedding" if shared else "encoder_embedding")
    x = keras.layers.Dropout(rate, name="encoder_embedding_dropout")(encoder_embedding(encoder_ids))
    for i in range(num_encoder_layers):
        x = blocks.TransformerEncoderBlock(num_heads, intermediate_dim, name=f"encoder_{i}",
                                           **block_kwargs)(x)
    if normalize_first:
        x = keras.layers.LayerNormalization(epsilon=1e-5, name="encoder_final_norm")(x)

    decoder_embedding = encoder_embedding if shared else embedding(target_vocab, "decoder_embedding")
    y = keras.layers.Dropout(rate, name="decoder_embedding_dropout")(decoder_embedding(decoder_ids))
    for i in range(num_decoder_layers):
        y = blocks.TransformerDecoderBlock(num_heads, intermediate_dim, name=f"decoder_{i}",
                                           **block_kwargs)(y, x)
    if normalize_first:
        y = keras.layers.LayerNormalization(epsilon=1e-5, name="decoder_final_norm")(y)
    if tie_output_embedding:
        logits = decoder_embedding(y, reverse=True)
    else:
        logits = keras.layers.Dense(target_vocab, name="output_projection")(y)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    return keras.Model({"encoder_token_ids": encoder_ids, "decoder_token_ids": decoder_ids},
                       logits, name=name)
