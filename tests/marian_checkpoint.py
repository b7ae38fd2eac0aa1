"""A tiny random Marian (OPUS-MT) checkpoint in the Hugging Face layout, built offline for the tests.

Two layers a side, width 64, weights drawn 10x wider than transformers' default, a non-zero
`final_logits_bias` (`</s>`'s raised so translations end at many lengths), SentencePiece models trained on the first
2,000 bundled Tatoeba training pairs (300 pieces a side) and a joint `vocab.json` with `</s>` = 0 and
`<pad>` last, as OPUS-MT checkpoints have them.
"""

import io
import json

from kformer.data import translation

PIECES = 300  # each side's SentencePiece vocabulary
TRAINED_ON = 2000  # pairs


def _spm(sentencepiece, texts, size):
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, vocab_size=size,
                                             character_coverage=1.0, model_type="unigram", minloglevel=2)
    return model.getvalue()


def make_marian_checkpoint(folder):
    """Write the checkpoint into `folder` -> (reference `MarianMTModel` in eval mode, transformers'
    `MarianTokenizer`, (sources, targets) of 2,000 pairs the SentencePiece models were not trained on)."""
    import sentencepiece
    import torch
    import transformers

    pairs = translation.load_split("train", max_examples=2 * TRAINED_ON)
    sources, targets = pairs[0][:TRAINED_ON], pairs[1][:TRAINED_ON]
    (folder / "source.spm").write_bytes(_spm(sentencepiece, sources, PIECES))
    (folder / "target.spm").write_bytes(_spm(sentencepiece, targets, PIECES))
    pieces = {}
    for name in ("source.spm", "target.spm"):
        processor = sentencepiece.SentencePieceProcessor(model_proto=(folder / name).read_bytes())
        for i in range(processor.get_piece_size()):
            if not processor.is_control(i) and not processor.is_unknown(i):
                pieces.setdefault(processor.id_to_piece(i), None)
    vocabulary = {"</s>": 0, "<unk>": 1, **{piece: i + 2 for i, piece in enumerate(pieces)}}
    vocabulary["<pad>"] = len(vocabulary)  # last, as in OPUS-MT
    (folder / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
    size, pad = len(vocabulary), len(vocabulary) - 1
    torch.manual_seed(0)
    config = transformers.MarianConfig(
        vocab_size=size, decoder_vocab_size=size, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_position_embeddings=64, activation_function="swish", scale_embedding=True, pad_token_id=pad,
        eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=None, share_encoder_decoder_embeddings=True,
        init_std=0.2)  # weights 10x transformers' default: translations that depend on the source
    reference = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        reference.final_logits_bias.normal_(0.0, 1.0)
        reference.final_logits_bias[0, 0] = 3.0  # `</s>`: translations of 1 to 15 tokens, so beam search's
        # length penalty and its finished translations decide (measured on the 30 test sentences)
    reference.generation_config.bad_words_ids = [[pad]]
    reference.generation_config.forced_eos_token_id = 0  # as OPUS-MT's: `</s>` ends a translation cut at max_length
    reference.generation_config.num_beams = 4
    reference.generation_config.max_length = 16  # short translations by default: quick tests
    reference.save_pretrained(folder, safe_serialization=True)
    tokenizer = transformers.MarianTokenizer(source_spm=str(folder / "source.spm"),
                                             target_spm=str(folder / "target.spm"), vocab=str(folder / "vocab.json"))
    tokenizer.save_pretrained(folder)
    return reference, tokenizer, (pairs[0][TRAINED_ON:], pairs[1][TRAINED_ON:])
