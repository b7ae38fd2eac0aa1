"""Marian (OPUS-MT) checkpoints in the Hugging Face layout (`MarianMTModel`, `model_type: "marian"`) as a
`Translator`.

The architecture is the paper's post-norm Transformer with a few named options of `Translator`:
sinusoids in [sin | cos] halves (`sinusoid_layout="halves"`), a swish feed-forward
(`activation="silu"`), one embedding table for encoder, decoder and output with a bias on the
logits (`output_bias`: `final_logits_bias`), and the padding id last (`padding_id`): id 0 is
`</s>`, and the decoder starts from the padding id. The mapping, one block `i`:

    model.shared (or encoder.embed_tokens)      -> shared_embedding token table (tied output)
    final_logits_bias (1, V)                     -> shared_embedding logits_bias
    {encoder,decoder}.layers.i.self_attn.{q,k,v,out}_proj -> self_attention query/key/value/output
    decoder.layers.i.encoder_attn.*              -> decoder_i cross_attention
    *.self_attn_layer_norm, encoder_attn_layer_norm, final_layer_norm -> the block's three norms
    *.fc1, *.fc2                                 -> feed_forward inner, outer

The sinusoid tables some checkpoints store (`embed_positions.weight`) are computed, as transformers
does. Every config value kformer cannot represent is refused (file, field, value) before any weight
is assigned. `generation_config.json` gives `translate` its defaults: beam width, `max_length`,
`length_penalty`, `no_repeat_ngram_size` and `forced_eos_token_id` (`end_at_max_length`); a setting
kformer's search would not follow (`early_stopping`, `renormalize_logits`, other `bad_words_ids`)
is refused.
"""

import json
import pathlib

import numpy as np

from kformer.generation.samplers import BeamSampler
from kformer.models.pretrained.common import (Entry, assign_all, bart_layers, check_options, check_sizes, field,
                                              positive_int, read_json, read_weights, to_kformer)
from kformer.models.translator import Translator

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
TASKS = (None, "translation")
OPTIONS = ("dropout", "name", "dtype", "preprocessor", "target_language", "sequence_length")
EMBEDDINGS = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
              "lm_head.weight")  # one table, saved under one or more of these names
COMPUTED = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")


def _token_id(config, name, vocabulary):
    value = field(config, name)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocabulary:
        raise ValueError(f"config.json: `{name}`={value!r} is not a token id in [0, {vocabulary}) (`vocab_size`); "
                         "the checkpoint was not loaded.")
    return value


def model_arguments(config):
    """config.json -> `Translator` arguments; a ValueError naming the field kformer cannot represent."""
    vocabulary = positive_int(config, "vocab_size")
    width = positive_int(config, "d_model")
    sizes = {name: positive_int(config, name) for name in (
        "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
        "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings")}
    for encoder, decoder in (("encoder_attention_heads", "decoder_attention_heads"),
                             ("encoder_ffn_dim", "decoder_ffn_dim")):
        if sizes[encoder] != sizes[decoder]:
            raise ValueError(f"config.json: `{encoder}`={sizes[encoder]} differs from `{decoder}`={sizes[decoder]}; "
                             "kformer's Translator uses one size for both stacks. The checkpoint was not loaded.")
    if width % sizes["encoder_attention_heads"]:
        raise ValueError(f"config.json: `d_model`={width} is not divisible by "
                         f"`encoder_attention_heads`={sizes['encoder_attention_heads']}.")
    field(config, "share_encoder_decoder_embeddings", True, allowed=(True,))
    field(config, "tie_word_embeddings", True, allowed=(True,))
    field(config, "scale_embedding", False, allowed=(True,))  # MarianConfig's default is False; OPUS-MT sets True
    decoder_vocabulary = config.get("decoder_vocab_size")
    if decoder_vocabulary not in (None, vocabulary):
        raise ValueError(f"config.json: `decoder_vocab_size`={decoder_vocabulary!r} differs from `vocab_size`="
                         f"{vocabulary}; kformer loads Marian checkpoints with one shared vocabulary.")
    activation = field(config, "activation_function", "gelu", allowed=tuple(ACTIVATIONS))
    padding = _token_id(config, "pad_token_id", vocabulary)
    start = config.get("decoder_start_token_id", padding)
    if start != padding:
        raise ValueError(f"config.json: `decoder_start_token_id`={start!r} differs from `pad_token_id`={padding}; "
                         "kformer's Marian translator starts its decoder from the padding id.")
    if _token_id(config, "eos_token_id", vocabulary) == padding:
        raise ValueError(f"config.json: `eos_token_id` equals `pad_token_id`={padding}: decoding could not end.")
    dropout = field(config, "dropout", 0.1)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"config.json: `dropout`={dropout!r} must be a number in [0, 1).")
    return dict(vocabulary_size=vocabulary, sequence_length=sizes["max_position_embeddings"], hidden_dim=width,
                num_heads=sizes["encoder_attention_heads"], intermediate_dim=sizes["encoder_ffn_dim"],
                num_encoder_layers=sizes["encoder_layers"], num_decoder_layers=sizes["decoder_layers"],
                dropout=float(dropout), position="sinusoidal", tie_output_embedding=True, normalize_first=False,
                activation=ACTIVATIONS[activation], padding_id=padding, sinusoid_layout="halves", output_bias=True)


def table(model, embedding_name="model.shared.weight"):
    """The `Entry` table of a Marian `Translator`: `MarianMTModel` tensor names."""
    e, vocab = model.hidden_dim, model.decoder_embedding.vocabulary_size
    embedding = model.encoder_embedding
    entries = [Entry(embedding_name, embedding.token_embedding.embeddings, (vocab, e))]
    if embedding.logits_bias is not None:
        entries.append(Entry("final_logits_bias", embedding.logits_bias, (1, vocab)))
    return entries + bart_layers(model)


def read_checkpoint_weights(folder):
    """`model.safetensors` (or its shards), else `pytorch_model.bin` read by torch with `weights_only=True`
    (tensors only, never arbitrary pickled objects): {name: float32 numpy}."""
    folder = pathlib.Path(folder)
    binary = folder / "pytorch_model.bin"
    if (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file() \
            or not binary.is_file():
        return read_weights(folder)
    from kformer.data.torch_weights import read_pytorch_bin  # torch is a backend: data/, not models/

    return read_pytorch_bin(binary)


def _embedding_name(weights):
    """The name the token table is stored under; every other copy must be equal (they are one tied table)."""
    present = [name for name in EMBEDDINGS if name in weights]
    if not present:
        raise ValueError(f"The checkpoint has no token table (one of {list(EMBEDDINGS)}); it was not loaded.")
    for other in present[1:]:
        if weights[other].shape != weights[present[0]].shape or not np.array_equal(weights[other],
                                                                                   weights[present[0]]):
            raise ValueError(f"The checkpoint's {other!r} differs from {present[0]!r}, but a Marian checkpoint with "
                             "`share_encoder_decoder_embeddings` ties them; it was not loaded.")
    return present[0], present[1:]


def decoding_defaults(folder, config, vocabulary, padding):
    """`translate`'s defaults from `generation_config.json` (or config.json): beam width, length, and no
    from-scratch guards. `bad_words_ids` other than `[[pad_token_id]]` (never generated anyway) are refused."""
    path = pathlib.Path(folder) / "generation_config.json"
    settings = read_json(path) if path.is_file() else config
    file = path.name if path.is_file() else "config.json"
    bad = settings.get("bad_words_ids")
    if bad not in (None, [[padding]]):
        raise ValueError(f"{file}: `bad_words_ids`={str(bad)[:80]} cannot be represented by kformer yet (it never "
                         f"generates the padding id, [[{padding}]]); the checkpoint was not loaded.")
    end = config.get("eos_token_id", 0)
    forced = settings.get("forced_eos_token_id")
    if forced not in (None, end):
        raise ValueError(f"{file}: `forced_eos_token_id`={forced!r} differs from `eos_token_id`={end!r}; kformer "
                         "ends a translation cut at `max_length` with its end token only. The checkpoint was not "
                         "loaded.")
    for name, default in (("early_stopping", False), ("renormalize_logits", False)):
        if settings.get(name, default) != default:
            raise ValueError(f"{file}: `{name}`={settings[name]!r} cannot be represented by kformer yet (its beam "
                             f"search is transformers' with `{name}={default}`); the checkpoint was not loaded.")
    beams = settings.get("num_beams", 1)
    length = settings.get("max_length", 512)
    for name, value in (("num_beams", beams), ("max_length", length)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{file}: `{name}`={value!r} must be a positive int.")
    penalty = settings.get("length_penalty", 1.0)
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not np.isfinite(penalty):
        raise ValueError(f"{file}: `length_penalty`={penalty!r} must be a finite number.")
    sampler = {"name": "beam", "num_beams": beams, "length_penalty": float(penalty)} if beams > 1 else {"name": "greedy"}
    return {"sampler": sampler, "max_word_pieces": None,
            "no_repeat_ngram_size": int(settings.get("no_repeat_ngram_size") or 0),
            "max_length": length - 1,  # transformers counts the decoder's start token in `max_length`
            "end_at_max_length": forced is not None}


def load(folder, config, task=None, **kwargs):
    """A Marian checkpoint folder -> `Translator` with the checkpoint's weights and, when the folder holds
    `source.spm`, `target.spm` and `vocab.json`, a `kformer.data.marian.MarianPreprocessor`.

    Args:
        folder: the checkpoint folder.
        config: its config.json as a dict.
        task: None or `"translation"`.
        **kwargs: `dropout` (default: config.json's), `name`, `dtype`, `preprocessor` (False: none;
            or one to attach instead), `target_language` (a multilingual checkpoint's `">>spa<<"`)
            and `sequence_length` (the preprocessor's; default `max_position_embeddings`).

    Returns:
        `Translator` whose logits equal `MarianMTModel`'s.
    """
    folder = pathlib.Path(folder)
    if task not in TASKS:
        raise ValueError(f"Marian checkpoints load as one task (translation). Received: task={task!r}; expected one "
                         f"of {list(TASKS)}.")
    check_options("Marian", kwargs, OPTIONS)
    args = model_arguments(config)
    weights = read_checkpoint_weights(folder)
    embedding_name, copies = _embedding_name(weights)
    check_sizes(weights, {"encoder_layers": (args["num_encoder_layers"], r"model\.encoder\.layers\.(\d+)\."),
                          "decoder_layers": (args["num_decoder_layers"], r"model\.decoder\.layers\.(\d+)\."),
                          "vocab_size": (args["vocabulary_size"], embedding_name, 0),
                          "d_model": (args["hidden_dim"], embedding_name, 1),
                          "encoder_ffn_dim": (args["intermediate_dim"], "model.encoder.layers.0.fc1.bias", 0)})
    preprocessor = kwargs.pop("preprocessor", None)
    target_language = kwargs.pop("target_language", None)
    sequence_length = kwargs.pop("sequence_length", None) or args["sequence_length"]
    if preprocessor is None:
        preprocessor = _default_preprocessor(folder, config, args, sequence_length, target_language)
    args.update(kwargs)
    model = Translator(**args, preprocessor=preprocessor or None)
    entries = table(model, embedding_name)
    pairs = to_kformer(weights, entries)  # every tensor's shape checked before any assignment
    used = {entry.name for entry in entries} | set(copies) | set(COMPUTED)
    unknown = sorted(name for name in weights if name not in used)
    if unknown:
        raise ValueError(f"The checkpoint holds tensors a Marian `Translator` has no place for: {unknown[:5]} "
                         f"({len(unknown)} in all); it was not loaded.")
    assign_all(pairs)
    return model


def _default_preprocessor(folder, config, args, sequence_length, target_language):
    if not any((folder / name).is_file() for name in ("source.spm", "target.spm", "vocab.json")):  # weights alone
        if target_language is not None:
            raise ValueError(f"`target_language`={target_language!r} needs the checkpoint's tokenizer, but {folder} "
                             "lacks source.spm, target.spm or vocab.json.")
        return None
    from kformer.data.marian import MarianPreprocessor, MarianTokenizer

    tokenizer = MarianTokenizer.from_folder(folder)
    if tokenizer.vocabulary_size != args["vocabulary_size"]:
        raise ValueError(f"{folder / 'vocab.json'} holds ids up to {tokenizer.vocabulary_size - 1}, but config.json's "
                         f"`vocab_size` is {args['vocabulary_size']}; the checkpoint was not loaded.")
    if tokenizer.padding_id != args["padding_id"] or tokenizer.end_id != config.get("eos_token_id"):
        raise ValueError(f"{folder / 'vocab.json'}: <pad> is {tokenizer.padding_id} and </s> {tokenizer.end_id}, but "
                         f"config.json says `pad_token_id`={args['padding_id']}, `eos_token_id`="
                         f"{config.get('eos_token_id')}; the checkpoint was not loaded.")
    defaults = decoding_defaults(folder, config, args["vocabulary_size"], args["padding_id"])
    defaults["max_length"] = min(defaults["max_length"], sequence_length)
    return MarianPreprocessor(tokenizer, sequence_length=sequence_length, target_language=target_language,
                              decoding_defaults=defaults)



def save(task, folder, overwrite=False):
    """Write a Marian `Translator` as a Hugging Face folder (`MarianMTModel`) that transformers opens.

    `config.json`, `model.safetensors` (one token table, `model.shared.weight`, and
    `final_logits_bias`), `generation_config.json` and, with a `MarianPreprocessor`, `source.spm`,
    `target.spm`, `vocab.json` and `tokenizer_config.json`. What Marian cannot represent (interleaved
    or learned positions, pre-norm blocks, separate or untied tables, id 0 as padding: Marian starts
    its decoder from `<pad>` and never masks target padding) is a ValueError naming the attribute,
    raised before anything is written.

    Args:
        task: the `Translator`.
        folder: the folder to write (atomically).
        overwrite: bool. Replace a non-empty `folder`. Defaults to `False`.

    Returns:
        `pathlib.Path(folder)`.
    """
    from kformer.models.pretrained.common import refuse, to_hf, write_folder, write_json

    required = (("position", "sinusoidal", "Marian adds fixed sinusoids"),
                ("sinusoid_layout", "halves", "Marian lays its sinusoids out as [sin | cos] halves"),
                ("normalize_first", False, "Marian's blocks normalize after each residual (post-norm)"),
                ("tie_output_embedding", True, "Marian's output projection is its token table"))
    for attribute, value, reason in required:
        if getattr(task, attribute) != value:
            raise refuse(task, attribute, getattr(task, attribute), reason)
    if task.vocabulary_size is None:
        raise refuse(task, "vocabulary_size", None, "Marian checkpoints kformer writes share one table for the "
                                                    "encoder, the decoder and the output")
    if task.padding_id == 0:
        raise refuse(task, "padding_id", 0, "Marian starts its decoder from its padding id and never masks target "
                                           "padding; a translator trained here pads with id 0 and starts from [START]")
    names = {kformer: hf for hf, kformer in ACTIVATIONS.items() if hf != "swish"}
    if not isinstance(task.activation, str) or task.activation not in names:
        raise refuse(task, "activation", task.activation, f"Marian computes one of {sorted(names)}")
    preprocessor = task.preprocessor
    if preprocessor is not None and type(preprocessor).__name__ != "MarianPreprocessor":
        raise refuse(task, "preprocessor", type(preprocessor).__name__, "transformers' MarianTokenizer is "
                     "kformer.data.marian.MarianPreprocessor's; set the preprocessor to None to save the weights alone")
    tensors = to_hf(table(task))
    if not task.output_bias:  # a translator without the bias: Marian's zeros
        tensors["final_logits_bias"] = np.zeros((1, task.vocabulary_size), np.float32)
    end = 0 if preprocessor is None else preprocessor.end_token_id
    generation = task.generation_config
    config = {"model_type": "marian", "architectures": ["MarianMTModel"], "vocab_size": task.vocabulary_size,
              "decoder_vocab_size": task.vocabulary_size, "d_model": task.hidden_dim,
              "encoder_layers": task.num_encoder_layers, "decoder_layers": task.num_decoder_layers,
              "encoder_attention_heads": task.num_heads, "decoder_attention_heads": task.num_heads,
              "encoder_ffn_dim": task.intermediate_dim, "decoder_ffn_dim": task.intermediate_dim,
              "max_position_embeddings": task.sequence_length, "activation_function": names[task.activation],
              "scale_embedding": True, "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
              "pad_token_id": task.padding_id, "decoder_start_token_id": task.padding_id, "eos_token_id": end,
              "forced_eos_token_id": end if generation.end_at_max_length else None,
              "dropout": float(task.dropout), "attention_dropout": 0.0,
              "activation_dropout": 0.0, "is_encoder_decoder": True, "dtype": "float32"}
    beam = generation.sampler if isinstance(generation.sampler, BeamSampler) else None
    settings = {"bad_words_ids": [[task.padding_id]], "decoder_start_token_id": task.padding_id,
                "eos_token_id": end, "pad_token_id": task.padding_id, "num_beams": beam.num_beams if beam else 1,
                "max_length": (generation.max_length or task.sequence_length - 1) + 1,
                "length_penalty": beam.length_penalty if beam else 1.0}
    if generation.end_at_max_length:
        settings["forced_eos_token_id"] = end
    files = {"config.json": write_json(config), "generation_config.json": write_json(settings),
             "model.safetensors": tensors}
    if preprocessor is not None:
        tokenizer = preprocessor.tokenizer
        files.update({"source.spm": tokenizer.source_model, "target.spm": tokenizer.target_model,
                      "vocab.json": json.dumps(tokenizer.token_ids, ensure_ascii=False).encode("utf-8"),
                      "tokenizer_config.json": write_json({
                          "tokenizer_class": "MarianTokenizer", "model_max_length": preprocessor.sequence_length,
                          "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                          "separate_vocabs": False})})
    return write_folder(folder, files, overwrite)
