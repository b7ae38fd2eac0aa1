"""Whisper checkpoints in the Hugging Face layout (`WhisperForConditionalGeneration`, `model_type: "whisper"`)
as a `SpeechToText` task.

The mapping, one block `i`:

    model.encoder.conv1, conv2 (out, in, 3)          -> conv_1, conv_2 kernels (3, in, out)
    model.encoder.embed_positions (fixed sinusoids)  -> encoder_positions (a frozen table)
    model.decoder.embed_tokens (tied output)         -> decoder_embedding token table
    model.decoder.embed_positions                    -> decoder_embedding learned positions
    {encoder,decoder}.layers.i.self_attn.{q,k,v,out}_proj -> self_attention query/key/value/output (key bias 0)
    decoder.layers.i.encoder_attn.*                  -> decoder_i cross_attention
    *.self_attn_layer_norm, encoder_attn_layer_norm, final_layer_norm -> the block's three norms
    *.fc1, *.fc2                                     -> feed_forward inner, outer
    {encoder,decoder}.layer_norm                     -> encoder_final_norm, decoder_final_norm

`generation_config.json` gives the forced prompt's tokens (languages, tasks, `<|notimestamps|>`),
`suppress_tokens`, `begin_suppress_tokens` and `max_length`. Every config value kformer cannot
represent is refused (field, value) before any weight is assigned.
"""

import pathlib

import numpy as np

from kformer.models.pretrained.common import (Entry, assign_all, bart_layers, check_options, check_sizes, field,
                                              norm, positive_int, read_weights, to_kformer)
from kformer.models.speech_to_text import SpeechToText

ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "silu": "silu", "swish": "silu"}
TASKS = (None, "speech_to_text", "transcription")
OPTIONS = ("dropout", "name", "dtype", "preprocessor", "default_language")


def model_arguments(config):
    """config.json -> `SpeechToText` arguments; a ValueError naming the field kformer cannot represent."""
    sizes = {name: positive_int(config, name) for name in (
        "vocab_size", "num_mel_bins", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
        "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_source_positions",
        "max_target_positions")}
    for encoder, decoder in (("encoder_attention_heads", "decoder_attention_heads"),
                             ("encoder_ffn_dim", "decoder_ffn_dim")):
        if sizes[encoder] != sizes[decoder]:
            raise ValueError(f"config.json: `{encoder}`={sizes[encoder]} differs from `{decoder}`={sizes[decoder]}; "
                             "kformer's SpeechToText uses one size for both stacks. The checkpoint was not loaded.")
    if sizes["d_model"] % sizes["encoder_attention_heads"]:
        raise ValueError(f"config.json: `d_model`={sizes['d_model']} is not divisible by "
                         f"`encoder_attention_heads`={sizes['encoder_attention_heads']}.")
    field(config, "scale_embedding", False, allowed=(False,))
    field(config, "tie_word_embeddings", True, allowed=(True,))
    activation = field(config, "activation_function", "gelu", allowed=tuple(ACTIVATIONS))
    dropout = field(config, "dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"config.json: `dropout`={dropout!r} must be a number in [0, 1).")
    return dict(vocabulary_size=sizes["vocab_size"], num_mel_bins=sizes["num_mel_bins"],
                max_source_positions=sizes["max_source_positions"],
                max_target_positions=sizes["max_target_positions"], hidden_dim=sizes["d_model"],
                num_heads=sizes["encoder_attention_heads"], intermediate_dim=sizes["encoder_ffn_dim"],
                num_encoder_layers=sizes["encoder_layers"], num_decoder_layers=sizes["decoder_layers"],
                dropout=float(dropout), activation=ACTIVATIONS[activation])


def table(model):
    """The `Entry` table of a `SpeechToText`: `WhisperForConditionalGeneration` tensor names."""
    e = model.hidden_dim
    embedding = model.decoder_embedding
    entries = []
    for i, (convolution, inputs) in enumerate(zip(model.convolutions, (model.num_mel_bins, e))):
        name = f"model.encoder.conv{i + 1}"
        entries += [Entry(f"{name}.weight", convolution.kernel, (e, inputs, 3), (2, 1, 0)),
                    Entry(f"{name}.bias", convolution.bias, (e,))]
    entries += [Entry("model.decoder.embed_tokens.weight", embedding.token_embedding.embeddings,
                      (model.vocabulary_size, e)),
                Entry("model.decoder.embed_positions.weight", embedding.position_embedding.position_embeddings,
                      (model.max_target_positions, e)),
                Entry("model.encoder.embed_positions.weight", model.encoder_positions.position_embeddings,
                      (model.max_source_positions, e))]
    entries += bart_layers(model, key_bias=False)
    entries += norm(model.encoder_norm, "model.encoder.layer_norm", e)
    entries += norm(model.decoder_norm, "model.decoder.layer_norm", e)
    return entries


def load(folder, config, task=None, **kwargs):
    """A Whisper checkpoint folder -> `SpeechToText` with the checkpoint's weights and, when the folder holds
    a tokenizer, a `kformer.data.whisper.WhisperPreprocessor` (and its generation defaults).

    Args:
        folder: the checkpoint folder.
        config: its config.json as a dict.
        task: None or `"speech_to_text"`.
        **kwargs: `dropout` (default: config.json's), `name`, `dtype`, `preprocessor` (False: none; or one
            to attach instead) and `default_language` (the forced prompt's language; default `"en"`).

    Returns:
        `SpeechToText` whose logits equal `WhisperForConditionalGeneration`'s.
    """
    folder = pathlib.Path(folder)
    if task not in TASKS:
        raise ValueError(f"Whisper checkpoints load as one task (speech to text). Received: task={task!r}; expected "
                         f"one of {list(TASKS)}.")
    check_options("Whisper", kwargs, OPTIONS)
    args = model_arguments(config)
    weights = read_weights(folder)
    check_sizes(weights, {"encoder_layers": (args["num_encoder_layers"], r"model\.encoder\.layers\.(\d+)\."),
                          "decoder_layers": (args["num_decoder_layers"], r"model\.decoder\.layers\.(\d+)\."),
                          "vocab_size": (args["vocabulary_size"], "model.decoder.embed_tokens.weight", 0),
                          "d_model": (args["hidden_dim"], "model.decoder.embed_tokens.weight", 1),
                          "encoder_ffn_dim": (args["intermediate_dim"], "model.encoder.layers.0.fc1.bias", 0)})
    preprocessor = kwargs.pop("preprocessor", None)
    default_language = kwargs.pop("default_language", None)
    if preprocessor is None and any((folder / name).is_file() for name in ("tokenizer.json", "vocab.json")):
        from kformer.data.whisper import WhisperPreprocessor

        preprocessor = WhisperPreprocessor.from_folder(folder, max_target_positions=args["max_target_positions"],
                                                       default_language=default_language)
    args.update(kwargs)
    model = SpeechToText(**args, preprocessor=preprocessor or None)
    entries = table(model)
    pairs = to_kformer(weights, entries)  # every tensor's shape checked before any assignment
    for blocks in (model.encoder_blocks, model.decoder_blocks):
        for block in blocks:
            attentions = [block.self_attention] + ([block.cross_attention] if blocks is model.decoder_blocks else [])
            pairs += [(a.key_dense.bias, np.zeros(a.key_dense.bias.shape, "float32")) for a in attentions]
    used = {entry.name for entry in entries} | {"proj_out.weight"}
    unknown = sorted(name for name in weights if name not in used)
    if unknown:
        raise ValueError(f"The checkpoint holds tensors a `SpeechToText` has no place for: {unknown[:5]} "
                         f"({len(unknown)} in all); it was not loaded.")
    if "proj_out.weight" in weights and not np.array_equal(weights["proj_out.weight"],
                                                           weights["model.decoder.embed_tokens.weight"]):
        raise ValueError("The checkpoint's proj_out.weight differs from model.decoder.embed_tokens.weight, but "
                         "Whisper ties them; it was not loaded.")
    assign_all(pairs)
    return model


def save(task, folder, overwrite=False):
    """Write a `SpeechToText` as a Hugging Face Whisper folder (`WhisperForConditionalGeneration`) that
    transformers opens with the same logits.

    `config.json`, `model.safetensors` (the key projections without their bias, which is zero: outputs
    do not depend on it), `generation_config.json` (the forced prompt's tokens, suppressions and length)
    and, with a `WhisperPreprocessor`, `vocab.json`, `merges.txt`, `added_tokens.json`,
    `tokenizer_config.json` and `preprocessor_config.json`. What Whisper cannot represent (another
    spectrogram than its 400-point FFT every 160 samples at 16 kHz, an activation transformers does not
    name) is a ValueError naming the attribute, raised before anything is written.

    Args:
        task: the `SpeechToText`.
        folder: the folder to write (atomically).
        overwrite: bool. Replace a non-empty `folder`. Defaults to `False`.

    Returns:
        `pathlib.Path(folder)`.
    """
    import json

    from kformer.models.pretrained.common import refuse, to_hf, write_folder, write_json

    for attribute, value in (("sample_rate", 16000), ("fft_length", 400), ("hop_length", 160)):
        if getattr(task, attribute) != value:
            raise refuse(task, attribute, getattr(task, attribute), f"Whisper's feature extractor uses {value}")
    names = {"gelu": "gelu", "relu": "relu", "silu": "silu"}
    if not isinstance(task.activation, str) or task.activation not in names:
        raise refuse(task, "activation", task.activation, f"Whisper computes one of {sorted(names)}")
    preprocessor = task.preprocessor
    if preprocessor is not None and type(preprocessor).__name__ != "WhisperPreprocessor":
        raise refuse(task, "preprocessor", type(preprocessor).__name__, "transformers' Whisper tokenizer and feature "
                     "extractor are kformer.data.whisper.WhisperPreprocessor's; set it to None to save the weights alone")
    generation = task.generation_config
    end = generation.stop_token_ids[0] if generation.stop_token_ids else task.vocabulary_size - 1
    start = generation.start_token_id if generation.start_token_id is not None else end
    config = {"model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
              "vocab_size": task.vocabulary_size, "num_mel_bins": task.num_mel_bins, "d_model": task.hidden_dim,
              "encoder_layers": task.num_encoder_layers, "decoder_layers": task.num_decoder_layers,
              "encoder_attention_heads": task.num_heads, "decoder_attention_heads": task.num_heads,
              "encoder_ffn_dim": task.intermediate_dim, "decoder_ffn_dim": task.intermediate_dim,
              "max_source_positions": task.max_source_positions, "max_target_positions": task.max_target_positions,
              "activation_function": names[task.activation], "dropout": float(task.dropout), "attention_dropout": 0.0,
              "activation_dropout": 0.0, "scale_embedding": False, "tie_word_embeddings": True,
              "pad_token_id": end, "bos_token_id": end, "eos_token_id": end, "decoder_start_token_id": start,
              "is_encoder_decoder": True, "dtype": "float32"}
    settings = {"decoder_start_token_id": start, "eos_token_id": end, "pad_token_id": end, "bos_token_id": end,
                "suppress_tokens": list(generation.suppress_token_ids),
                "begin_suppress_tokens": list(generation.begin_suppress_token_ids),
                "max_length": max(1, (generation.max_length or task.max_target_positions - 1)
                                  - len(generation.forced_prompt_ids))}
    files = {"config.json": write_json(config), "model.safetensors": to_hf(table(task))}
    if preprocessor is not None:
        special = {preprocessor.tokens[i]: i for i in preprocessor.special_ids}
        settings.update({"is_multilingual": bool(preprocessor.languages),
                         "lang_to_id": {f"<|{code}|>": i for code, i in preprocessor.languages.items()},
                         "task_to_id": dict(preprocessor.task_ids), "forced_decoder_ids": None,
                         "max_length": preprocessor.max_new_tokens})
        if preprocessor.no_timestamps_id is not None:
            settings["no_timestamps_token_id"] = preprocessor.no_timestamps_id
        pieces = {token: i for i, token in enumerate(preprocessor.tokens) if i not in preprocessor.special_ids}
        files.update({
            "vocab.json": json.dumps(pieces, ensure_ascii=False).encode("utf-8"),
            "merges.txt": ("#version: 0.2\n" + "\n".join(preprocessor.merges) + "\n").encode("utf-8"),
            "added_tokens.json": json.dumps(special, ensure_ascii=False).encode("utf-8"),
            "tokenizer_config.json": write_json({
                "tokenizer_class": "WhisperTokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "add_prefix_space": False,
                "model_max_length": 1024}),
            "preprocessor_config.json": write_json({
                "feature_extractor_type": "WhisperFeatureExtractor", "processor_class": "WhisperProcessor",
                "feature_size": task.num_mel_bins, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400,
                "chunk_length": int(preprocessor.chunk_seconds), "n_samples": preprocessor.window,
                "nb_max_frames": preprocessor.window // 160, "padding_value": 0.0, "return_attention_mask": False})})
    files["generation_config.json"] = write_json(settings)
    return write_folder(folder, files, overwrite)
