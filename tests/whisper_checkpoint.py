"""A tiny random Whisper checkpoint in the Hugging Face layout, built offline for the tests.

Two layers a side, width 64, 80 mel bins and Whisper's 30-second window (1,500 encoder positions), weights
drawn wider than transformers' default (so greedy transcripts depend on the audio), and a byte-level BPE
tokenizer learned from the bundled FSDD transcripts and a few English sentences, followed by Whisper's
special tokens in Whisper's order (`<|endoftext|>`, `<|startoftranscript|>`, the languages, the tasks,
..., `<|notimestamps|>`), with a `generation_config.json` carrying the forced prompt, `suppress_tokens`
and `begin_suppress_tokens` as the published checkpoints do.
"""

import json

WORDS = ("zero one two three four five six seven eight nine oh ten hello world the a an and of to is was it this "
         "that speech recognition whisper model sound voice digits numbers spoken recording audio")
LANGUAGES = ("en", "es", "de")
SPECIALS = ("<|endoftext|>", "<|startoftranscript|>", *(f"<|{code}|>" for code in LANGUAGES), "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>")
BPE_SIZE = 400  # byte-level pieces before the special tokens


def _bpe(texts):
    """(vocab {piece: id}, merges [str]) of a byte-level BPE learned from `texts` (the `tokenizers` library)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=BPE_SIZE, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


def make_whisper_checkpoint(folder, seed=0):
    """Write the checkpoint into `folder` -> (reference `WhisperForConditionalGeneration` in eval mode,
    transformers' `WhisperProcessor`)."""
    import torch
    import transformers

    words = WORDS.split()
    texts = [WORDS, WORDS.title()] + [" ".join(words[i:i + 5]) for i in range(len(words))]
    vocab, merges = _bpe(texts * 20)
    tokenizer = transformers.WhisperTokenizer(vocab=vocab, merges=merges)
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIALS}
    assert list(ids.values()) == list(range(len(vocab), len(vocab) + len(SPECIALS))), ids
    size = len(vocab) + len(SPECIALS)
    torch.manual_seed(seed)
    config = transformers.WhisperConfig(
        vocab_size=size, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_source_positions=1500, max_target_positions=64, pad_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|endoftext|>"],
        decoder_start_token_id=ids["<|startoftranscript|>"], init_std=0.2, begin_suppress_tokens=None,
        suppress_tokens=None)
    reference = transformers.WhisperForConditionalGeneration(config).eval()
    generation = reference.generation_config
    generation.decoder_start_token_id = ids["<|startoftranscript|>"]
    generation.eos_token_id = generation.pad_token_id = ids["<|endoftext|>"]
    generation.is_multilingual = True
    generation.lang_to_id = {f"<|{code}|>": ids[f"<|{code}|>"] for code in LANGUAGES}
    generation.task_to_id = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    generation.no_timestamps_token_id = ids["<|notimestamps|>"]
    generation.forced_decoder_ids = None
    generation.suppress_tokens = [vocab[","], vocab["."], vocab["e"], ids["<|startoflm|>"], ids["<|nocaptions|>"]]
    generation.begin_suppress_tokens = [vocab["Ġ"], ids["<|endoftext|>"]]
    generation.max_length = 32  # short transcripts: quick tests
    generation._from_model_config = False  # else transformers' from_pretrained rebuilds it from config.json
    reference.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    features = transformers.WhisperFeatureExtractor(feature_size=80)
    features.save_pretrained(folder)
    return reference, transformers.WhisperProcessor(feature_extractor=features, tokenizer=tokenizer)
