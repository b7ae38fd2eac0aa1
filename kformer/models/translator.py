"""Encoder-decoder translator ("Attention Is All You Need", Figure 1)."""

import keras
import numpy as np
from keras import ops

from kformer import blocks, layers
from kformer.generation.config import GenerationConfig, fields_of
from kformer.generation.options import TRANSLATE_MAX_WORD_PIECES, TRANSLATE_NO_REPEAT_NGRAM_SIZE
from kformer.generation.protocol import EncoderDecoderTask
from kformer.generation.search import generate as generate_ids
from kformer.layers.checks import check_positive_ints, check_rates
from kformer.models.input_checks import check_batch_size
from kformer.models.registry import builder, register
from kformer.models.task import Task, check_length_fits, check_tokenizer_fits

PAPER = dict(vocabulary_size=37000, sequence_length=256, dropout=0.1)
# `translate`'s decoding defaults for a model trained here (a checkpoint's preprocessor brings its own)
TRANSLATE_DEFAULTS = dict(max_word_pieces=TRANSLATE_MAX_WORD_PIECES, no_repeat_ngram_size=TRANSLATE_NO_REPEAT_NGRAM_SIZE)
POSITIONS = ("sinusoidal", "learned")


@keras.saving.register_keras_serializable(package="kformer")
class Translator(EncoderDecoderTask, Task):
    """Source ids `(batch, src_len)` + target ids `(batch, tgt_len)` -> logits `(batch, tgt_len, vocab)`.

    Id 0 is padding on both sides (masks are derived from it; a checkpoint
    may name another `padding_id`). A shared
    `vocabulary_size` makes one embedding table serve encoder, decoder and
    output projection (paper 3.4); separate `encoder_vocabulary_size` /
    `decoder_vocabulary_size` give two tables, the decoder's tied to the
    output when `tie_output_embedding`. Embeddings are scaled by
    sqrt(hidden_dim); dropout follows the embeddings and every sublayer
    (paper 5.4). With a `TranslatorPreprocessor`, `translate(texts)` maps
    strings to strings.

    Args:
        vocabulary_size: int. Shared source/target vocabulary, or None.
        encoder_vocabulary_size, decoder_vocabulary_size: int. Separate
            vocabularies (each defaults to `vocabulary_size`).
        sequence_length: int. Longest sequence (learned positions; also the
            decoding bound). Defaults to `256`.
        hidden_dim, num_heads, intermediate_dim: ints. Model width, heads, MLP width.
        num_encoder_layers, num_decoder_layers: ints. Blocks per stack.
        dropout: float. Defaults to `0.1`.
        position: `"sinusoidal"` (paper) or `"learned"`.
        tie_output_embedding: bool. Output projection = transposed decoder embedding.
        normalize_first: bool. Pre-norm blocks and final norms. Defaults to `False`.
        activation: The feed-forward activation. Defaults to `"relu"` (the
            paper; Marian checkpoints use `"silu"`, swish).
        padding_id: int. The id that pads sources. Defaults to `0`, which
            pads targets too (masked in the decoder). Another id (Marian's
            last) masks the encoder and the cross-attention only: such a
            checkpoint starts its decoder from the padding id, and causal
            attention keeps padding after a target from every real token.
            Never generated.
        sinusoid_layout: `"interleaved"` (the paper) or `"halves"` (sines,
            then cosines: Marian). Defaults to `"interleaved"`.
        output_bias: bool. A learned bias added to the tied output logits
            (Marian's `final_logits_bias`). Defaults to `False`.
        preprocessor: `kformer.data.preprocessors.TranslatorPreprocessor` or None.
        generation_config: `kformer.generation.GenerationConfig` (or its
            dict) or None: `translate`'s and `generate`'s defaults. None:
            `default_generation_config()`, from the preprocessor.

    Attributes: `encoder_embedding`, `decoder_embedding` (the same layer when
    shared), `encoder_blocks`, `decoder_blocks`, `encoder_norm` and
    `decoder_norm` (None unless pre-norm), `output_projection` (None when tied).

    Example:

    >>> model = Translator(vocabulary_size=50, hidden_dim=16, num_heads=2, intermediate_dim=32,
    ...                    num_encoder_layers=1, num_decoder_layers=1)
    >>> import numpy as np
    >>> ids = np.ones((2, 5), "int32")
    >>> tuple(model({"encoder_token_ids": ids, "decoder_token_ids": ids}).shape)
    (2, 5, 50)
    """

    task_type = "translation"
    decoding_family = "translator"

    def __init__(self, vocabulary_size=None, encoder_vocabulary_size=None, decoder_vocabulary_size=None,
                 sequence_length=256, hidden_dim=512, num_heads=8, intermediate_dim=2048,
                 num_encoder_layers=6, num_decoder_layers=6, dropout=0.1, position="sinusoidal",
                 tie_output_embedding=True, normalize_first=False, activation="relu", padding_id=0,
                 sinusoid_layout="interleaved", output_bias=False, preprocessor=None, generation_config=None,
                 **kwargs):
        source_vocab, target_vocab, shared = _vocabularies(
            vocabulary_size, encoder_vocabulary_size, decoder_vocabulary_size)
        check_positive_ints(sequence_length=sequence_length, hidden_dim=hidden_dim, num_heads=num_heads,
                            intermediate_dim=intermediate_dim, num_encoder_layers=num_encoder_layers,
                            num_decoder_layers=num_decoder_layers)
        check_rates(dropout=dropout)
        if position not in POSITIONS:
            raise ValueError(f"`position` must be one of {POSITIONS}. Received: position={position!r}")
        if not isinstance(padding_id, int) or isinstance(padding_id, bool) or not 0 <= padding_id < min(
                source_vocab, target_vocab):
            raise ValueError(f"`padding_id` must be an int in [0, {min(source_vocab, target_vocab)}) (an id of both "
                             f"vocabularies). Received: padding_id={padding_id!r}")
        if output_bias and not tie_output_embedding:
            raise ValueError("`output_bias=True` adds a bias to the tied output logits; an untied output projection "
                             "(`tie_output_embedding=False`) has its own bias. Received: output_bias=True, "
                             "tie_output_embedding=False")
        mask_zero = padding_id == 0

        def embedding(vocab, name, bias):
            return layers.TokenAndPositionEmbedding(
                vocab, sequence_length, hidden_dim, position=position, mask_zero=mask_zero,
                scale_by_sqrt_dim=True, sinusoid_layout=sinusoid_layout, output_bias=bias, name=name,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=hidden_dim**-0.5))

        block = dict(num_heads=num_heads, intermediate_dim=intermediate_dim, dropout=dropout,
                     normalize_first=normalize_first, activation=activation)
        encoder_embedding = embedding(source_vocab, "shared_embedding" if shared else "encoder_embedding",
                                      output_bias and shared)
        decoder_embedding = encoder_embedding if shared else embedding(target_vocab, "decoder_embedding", output_bias)
        encoder_blocks = [blocks.TransformerEncoderBlock(name=f"encoder_{i}", **block)
                          for i in range(num_encoder_layers)]
        decoder_blocks = [blocks.TransformerDecoderBlock(name=f"decoder_{i}", **block)
                          for i in range(num_decoder_layers)]
        norm = lambda name: keras.layers.LayerNormalization(epsilon=1e-5, name=name)  # noqa: E731
        encoder_norm = norm("encoder_final_norm") if normalize_first else None
        decoder_norm = norm("decoder_final_norm") if normalize_first else None
        output_projection = None if tie_output_embedding else keras.layers.Dense(
            target_vocab, name="output_projection")

        encoder_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
        decoder_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")
        # Id 0 pads: the embeddings' Keras masks reach every block. Another padding id: the source's mask, given.
        source_mask = {} if mask_zero else {"padding_mask": ops.not_equal(encoder_ids, padding_id)}
        x = keras.layers.Dropout(dropout, name="encoder_embedding_dropout")(encoder_embedding(encoder_ids))
        for layer in encoder_blocks:
            x = layer(x, **source_mask)
        if encoder_norm is not None:
            x = encoder_norm(x)
        y = keras.layers.Dropout(dropout, name="decoder_embedding_dropout")(decoder_embedding(decoder_ids))
        cross_mask = {} if mask_zero else {"encoder_padding_mask": source_mask["padding_mask"]}
        for layer in decoder_blocks:
            y = layer(y, x, **cross_mask)
        if decoder_norm is not None:
            y = decoder_norm(y)
        logits = decoder_embedding(y, reverse=True) if output_projection is None else output_projection(y)
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(inputs={"encoder_token_ids": encoder_ids, "decoder_token_ids": decoder_ids},
                         outputs=logits, **kwargs)
        self.encoder_embedding, self.decoder_embedding = encoder_embedding, decoder_embedding
        self.encoder_blocks, self.decoder_blocks = encoder_blocks, decoder_blocks
        self.encoder_norm, self.decoder_norm = encoder_norm, decoder_norm
        self.output_projection = output_projection
        self.vocabulary_size = vocabulary_size
        self.encoder_vocabulary_size = encoder_vocabulary_size
        self.decoder_vocabulary_size = decoder_vocabulary_size
        self.sequence_length, self.hidden_dim, self.num_heads = sequence_length, hidden_dim, num_heads
        self.intermediate_dim, self.dropout, self.position = intermediate_dim, dropout, position
        self.num_encoder_layers, self.num_decoder_layers = num_encoder_layers, num_decoder_layers
        self.tie_output_embedding, self.normalize_first = tie_output_embedding, normalize_first
        self.activation, self.padding_id = activation, padding_id
        self.sinusoid_layout, self.output_bias = sinusoid_layout, output_bias
        self._set_preprocessor(preprocessor)
        self._set_generation_config(generation_config)

    @classmethod
    def from_config(cls, config):
        preprocessor = config.get("preprocessor")
        if isinstance(preprocessor, dict) and "MarianPreprocessor" in str(preprocessor.get("registered_name")):
            import kformer.data.marian  # noqa: F401  (registers Marian's preprocessor; data/ only when asked)
        return super().from_config(config)

    def transformer_blocks(self):
        return self, list(self.encoder_blocks), list(self.decoder_blocks)

    def input_limits(self):
        length = self.sequence_length if self.position == "learned" else None
        return {"encoder_token_ids": (self.encoder_embedding.vocabulary_size, length),
                "decoder_token_ids": (self.decoder_embedding.vocabulary_size, length)}

    def label_limits(self):
        return {self.output_names[0]: self.decoder_embedding.vocabulary_size}

    def _check_labels(self, x, y):
        if not self._raw(x):
            return super()._check_labels(x, y)
        sources = [x] if isinstance(x, str) else list(x)
        targets = [y] if isinstance(y, str) else y
        if not isinstance(targets, (list, tuple, np.ndarray)) or not all(isinstance(t, (str, bytes, np.str_))
                                                                            for t in targets):
            raise ValueError("`y` must be the target texts (a list of str), one per source text. Received: "
                             f"y={str(y)[:80]!r} ({type(y).__name__})")
        if len(targets) != len(sources):
            raise ValueError(f"`y` has {len(targets)} target texts but `x` has {len(sources)} source texts: "
                             f"expected one per source. Received: len(y)={len(targets)}")

    def validate_preprocessor(self, preprocessor=None):
        preprocessor = self.preprocessor if preprocessor is None else preprocessor
        if preprocessor is not None:
            check_tokenizer_fits(preprocessor, "source_tokenizer", self.encoder_embedding.vocabulary_size)
            check_tokenizer_fits(preprocessor, "target_tokenizer", self.decoder_embedding.vocabulary_size)
            if self.position == "learned":
                check_length_fits(preprocessor, self.sequence_length)

    def encode(self, encoder_token_ids):
        """The encoder stack: source ids `(batch, src_len)` -> `(outputs (batch, src_len, hidden_dim), padding mask)`."""
        mask = ops.not_equal(encoder_token_ids, self.padding_id)
        x = self.encoder_embedding(encoder_token_ids)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=mask)
        return (x if self.encoder_norm is None else self.encoder_norm(x)), mask

    def default_generation_config(self):
        """Greedy, with the preprocessor's ids and length (`max_length` its `sequence_length`, number slots
        copied) and `TRANSLATE_DEFAULTS`, or a checkpoint's generation config (the preprocessor's
        `decoding_defaults`); without a preprocessor, `GenerationConfig()` (pass the ids)."""
        preprocessor = self.preprocessor
        if preprocessor is None:
            return GenerationConfig()
        settings = {"max_length": preprocessor.sequence_length, **TRANSLATE_DEFAULTS,
                    "start_token_id": preprocessor.start_token_id, "stop_token_ids": preprocessor.end_token_id,
                    "slot_token_id": preprocessor.number_slot_id}
        checkpoint = fields_of(getattr(preprocessor, "decoding_defaults", None) or {})
        return GenerationConfig(**{**settings, **checkpoint})

    def generate(self, encoder_token_ids, config=None, *, streamer=None, pad_batch=True, **overrides):
        """Token ids in, token ids out: `kformer.models.generate(self, encoder_token_ids, config, streamer=...,
        pad_batch=..., **overrides)`, from `self.generation_config` when `config` is None."""
        return generate_ids(self, encoder_token_ids, self._config_with(config, overrides), streamer=streamer,
                            pad_batch=pad_batch)

    def translate(self, texts, config=None, *, batch_size=None, **overrides):
        """Translate strings: list of str (or one str) -> list of str.

        Tokenizes with the preprocessor, decodes with `generate`, detokenizes.
        `config` is a `GenerationConfig` (default `self.generation_config`:
        a checkpoint's generation config, else `TRANSLATE_DEFAULTS` with
        `max_length` the preprocessor's `sequence_length`); `overrides` are
        its fields (`sampler=BeamSampler(num_beams=4)`, `max_length=...`). Texts are batched by source length
        (short with short, so a batch's loop ends sooner), `batch_size`
        (default 256) at a time, and returned in the order given. `[]` gives `[]`.

        The defaults of a model trained here (`TRANSLATE_DEFAULTS`):
        greedy; `max_word_pieces` (see `generate`) 5
        (`kformer.generation.options.TRANSLATE_MAX_WORD_PIECES`): no
        output word has more WordPiece pieces, which stops the chains of
        invented `##` pieces an unfamiliar word sets off (issue 60), `None`
        turns the guard off; `no_repeat_ngram_size` (see `generate`) 3
        (`TRANSLATE_NO_REPEAT_NGRAM_SIZE`, the recipe's guard): no n-gram
        appears twice in one translation, which stops an undertrained model's
        loops, `0` turns it off.
        With the preprocessor's `copy_numbers` (the default), each translation
        holds as many number slots as its source (`generate`'s `slot_token_id`;
        pass `slot_token_id=None` to let the model choose), filled with the
        source's numbers in order.
        """
        preprocessor = self._require_preprocessor("translate")
        check_batch_size(batch_size)
        batch_size = batch_size or 256
        single = isinstance(texts, str)
        if not single and not (isinstance(texts, (list, tuple)) and all(isinstance(t, str) for t in texts)) and \
                not (isinstance(texts, np.ndarray) and texts.ndim == 1 and texts.dtype.kind in "OSU"):
            raise ValueError(f"`texts` must be a str or a list of str. Received: texts={str(texts)[:80]!r} "
                             f"({type(texts).__name__})")
        if not single and len(texts) == 0:
            return []
        source = preprocessor.encode([texts] if single else texts)["encoder_token_ids"]
        config = self._config_with(config, overrides)
        texts = np.asarray([texts] if single else list(texts), dtype=object)
        order = np.argsort(np.count_nonzero(source != self.padding_id, axis=1), kind="stable")
        outputs = [None] * len(source)
        for start in range(0, len(source), batch_size):
            rows = order[start:start + batch_size]
            ids = generate_ids(self, source[rows], config)
            for row, text in zip(rows, preprocessor.detokenize(ids, list(texts[rows]))):
                outputs[row] = text
        return outputs[0] if single else outputs


def _vocabularies(shared, encoder, decoder):
    """(source size, target size, one shared table?) with a clear error when they conflict."""
    source, target = encoder or shared, decoder or shared
    if shared is not None and {source, target} != {shared}:
        raise ValueError(
            "Pass either a shared `vocabulary_size` or separate encoder/decoder sizes. Received: "
            f"vocabulary_size={shared}, encoder_vocabulary_size={encoder}, decoder_vocabulary_size={decoder}")
    if not source or not target:
        raise ValueError(
            "A vocabulary size is required: `vocabulary_size` (shared) or both "
            f"`encoder_vocabulary_size` and `decoder_vocabulary_size`. Received: vocabulary_size={shared}, "
            f"encoder_vocabulary_size={encoder}, decoder_vocabulary_size={decoder}")
    check_positive_ints(encoder_vocabulary_size=source, decoder_vocabulary_size=target)
    return source, target, shared is not None and encoder is None and decoder is None


def _translator_sizes(preprocessor):
    source, target = preprocessor.source_tokenizer, preprocessor.target_tokenizer
    if source is target:
        return {"vocabulary_size": source.vocabulary_size}
    return {"encoder_vocabulary_size": source.vocabulary_size,
            "decoder_vocabulary_size": target.vocabulary_size}


@register("transformer_big", **{**PAPER, "dropout": 0.3}, hidden_dim=1024, num_heads=16,
          intermediate_dim=4096, num_encoder_layers=6, num_decoder_layers=6)
@register("transformer_base", **PAPER, hidden_dim=512, num_heads=8, intermediate_dim=2048,
          num_encoder_layers=6, num_decoder_layers=6)
@register("transformer_small", vocabulary_size=16000, sequence_length=128, hidden_dim=256,
          num_heads=4, intermediate_dim=1024, num_encoder_layers=3, num_decoder_layers=3)
@register("transformer_tiny", vocabulary_size=8000, sequence_length=64, hidden_dim=64,
          num_heads=2, intermediate_dim=128, num_encoder_layers=2, num_decoder_layers=2)
@builder(expand={"vocabulary_size": ("encoder_vocabulary_size", "decoder_vocabulary_size")},
         sizes=_translator_sizes)
def translator(**kwargs):
    """Build a `Translator`: `translator(preset="transformer_tiny", vocabulary_size=8000)`.

    Args:
        preset: str. A registered preset name (`kformer.models.list_models()`).
        **kwargs: `Translator` arguments; they replace the preset's. Separate
            `encoder_vocabulary_size` / `decoder_vocabulary_size` replace a
            preset's shared `vocabulary_size` (the side not given keeps it).
            With a `preprocessor` and no vocabulary size, the sizes are its
            tokenizers' (one shared table when both sides share a tokenizer).

    Example:

    >>> model = translator(preset="transformer_tiny", encoder_vocabulary_size=50,
    ...                    decoder_vocabulary_size=60)
    >>> model.output.shape
    (None, None, 60)
    """
    return Translator(**kwargs)
