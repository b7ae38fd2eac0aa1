"""GPT-2 checkpoints in the Hugging Face layout (`GPT2LMHeadModel`, `model_type: "gpt2"`) as a `CausalLM`.

The mapping, one decoder block `i` (Hugging Face's `Conv1D` kernels are `(in, out)`, as Keras's):

    transformer.wte / wpe             -> embedding (token table, tied output projection) / positions
    h.i.ln_1, h.i.ln_2                -> decoder_i self_attention_norm, feed_forward_norm
    h.i.attn.c_attn (E, 3E)           -> query, key, value kernels (E, heads, head_dim), split in that order
    h.i.attn.c_proj (E, E)            -> attention_output kernel (heads, head_dim, E)
    h.i.mlp.c_fc, h.i.mlp.c_proj      -> feed_forward mlp_in, mlp_out
    transformer.ln_f                  -> final_norm

Every config value kformer cannot represent exactly is refused (file, field, value) before any
weight is read or assigned. Known difference in `generate` (not in the logits): kformer keeps id
0 for padding, so generation never produces id 0 (GPT-2's `"!"`) and a prompt must not contain it.
"""

import json
import pathlib
import re

import numpy as np

from kformer.models.gpt import CausalLM
from kformer.models.pretrained.common import (Entry, assign_all, check_options, check_sizes, field, norm,
                                              read_weights, to_kformer)

ACTIVATIONS = {"gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate", "gelu": "gelu"}
TASKS = (None, "causal_lm", "text_generation")
OPTIONS = ("dropout", "name", "dtype", "preprocessor")
END_TOKEN = "<|endoftext|>"  # GPT-2's end of text (and bos, unk)
BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers of older checkpoints, not weights


def model_arguments(config):
    """config.json -> `CausalLM` size arguments; a ValueError naming the field kformer cannot represent."""
    ints = {}
    for name in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
        value = field(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.json: `{name}`={value!r} must be a positive int; the checkpoint was not loaded.")
        ints[name] = value
    if ints["n_embd"] % ints["n_head"]:
        raise ValueError(f"config.json: `n_embd`={ints['n_embd']} is not divisible by `n_head`={ints['n_head']}.")
    inner = field(config, "n_inner")
    if inner is None:
        inner = 4 * ints["n_embd"]
    elif not isinstance(inner, int) or isinstance(inner, bool) or inner < 1:
        raise ValueError(f"config.json: `n_inner`={inner!r} must be a positive int or null.")
    epsilon = field(config, "layer_norm_epsilon", 1e-5)
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or epsilon <= 0:
        raise ValueError(f"config.json: `layer_norm_epsilon`={epsilon!r} must be a positive number.")
    activation = field(config, "activation_function", "gelu_new", allowed=tuple(ACTIVATIONS))
    field(config, "scale_attn_weights", True, allowed=(True,))
    field(config, "scale_attn_by_inverse_layer_idx", False, allowed=(False,))
    field(config, "reorder_and_upcast_attn", False, allowed=(False,))
    field(config, "tie_word_embeddings", True, allowed=(True,))
    field(config, "add_cross_attention", False, allowed=(False,))
    dropout = field(config, "resid_pdrop", 0.1)
    return dict(vocabulary_size=ints["vocab_size"], sequence_length=ints["n_positions"], hidden_dim=ints["n_embd"],
                num_layers=ints["n_layer"], num_heads=ints["n_head"], intermediate_dim=inner,
                layer_norm_epsilon=float(epsilon), activation=ACTIVATIONS[activation], dropout=float(dropout),
                position="learned", tie_output_embedding=True)


def table(model, prefix="transformer."):
    """The `Entry` table of a GPT-2 `CausalLM`: `GPT2LMHeadModel` tensor names under `prefix`.

    `Conv1D` kernels are `(in, out)` as Keras's, so only reshapes (and the fused `c_attn` split
    into query, key and value, in that order) separate the two layouts.
    """
    e, inner = model.hidden_dim, model.intermediate_dim
    embedding = model.token_embedding
    entries = [Entry(prefix + "wte.weight", embedding.token_embedding.embeddings, (model.vocabulary_size, e)),
               Entry(prefix + "wpe.weight", embedding.position_embedding.position_embeddings,
                     (model.sequence_length, e))]
    entries += norm(model.final_norm, prefix + "ln_f", e)
    for i, block in enumerate(model.decoder_blocks):
        h, attention, ff = f"{prefix}h.{i}.", block.self_attention, block.feed_forward
        for j, dense in enumerate((attention.query_dense, attention.key_dense, attention.value_dense)):
            entries += [Entry(h + "attn.c_attn.weight", dense.kernel, (e, 3 * e), part=(j, 3)),  # (E, heads, head_dim)
                        Entry(h + "attn.c_attn.bias", dense.bias, (3 * e,), part=(j, 3))]
        entries += norm(block.self_attention_norm, h + "ln_1", e) + norm(block.feed_forward_norm, h + "ln_2", e)
        entries += [Entry(h + "attn.c_proj.weight", attention.output_dense.kernel, (e, e)),  # (heads, head_dim, E)
                    Entry(h + "attn.c_proj.bias", attention.output_dense.bias, (e,)),
                    Entry(h + "mlp.c_fc.weight", ff.inner.kernel, (e, inner)),
                    Entry(h + "mlp.c_fc.bias", ff.inner.bias, (inner,)),
                    Entry(h + "mlp.c_proj.weight", ff.outer.kernel, (inner, e)),
                    Entry(h + "mlp.c_proj.bias", ff.outer.bias, (e,))]
    return entries


def _check_tensors(weights, entries, prefix, family="GPT-2", buffers=BUFFERS):
    """A saved `lm_head.weight` must equal the token table (tied); an unknown tensor (not one of the
    `buffers`) is refused, naming the `family`."""
    used = {entry.name for entry in entries}
    if "lm_head.weight" in weights:  # saved tied: must equal the token table
        if not np.array_equal(weights["lm_head.weight"], weights.get(prefix + "wte.weight")):
            raise ValueError("model.safetensors: tensor 'lm_head.weight' differs from 'transformer.wte.weight', but "
                             "config.json's `tie_word_embeddings` is true; kformer ties them.")
        used.add("lm_head.weight")
    unknown = sorted(k for k in weights if k not in used and not k.endswith(buffers))
    if unknown:
        raise ValueError(f"model.safetensors holds tensors a {family} `CausalLM` has no place for: {unknown[:5]} "
                         f"({len(unknown)} in all); the checkpoint was not loaded.")


def load(folder, config, task=None, **kwargs):
    """A GPT-2 checkpoint folder -> `CausalLM` with the checkpoint's weights and, when the folder holds
    `vocab.json` and `merges.txt`, a `kformer.data.bpe.GPT2CausalLMPreprocessor`.

    Args:
        folder: the checkpoint folder (config.json, model.safetensors, vocab.json, merges.txt).
        config: its config.json as a dict.
        task: None, `"causal_lm"` or `"text_generation"` (all the same head).
        **kwargs: `dropout` (default: config.json's `resid_pdrop`; kformer has no separate attention-
            probability dropout, so `attn_pdrop` is not applied in training), `name`, `dtype`, and
            `preprocessor` (False: none; or a preprocessor to attach instead).

    Returns:
        `CausalLM` whose logits equal `GPT2LMHeadModel`'s.
    """
    return load_causal_lm(folder, config, task, kwargs, family="GPT-2", model_arguments=model_arguments,
                          table=table, buffers=BUFFERS)


# config.json's name for each `CausalLM` size, per family (errors name the field the user sees)
FIELDS = {"GPT-2": dict(num_layers="n_layer", vocabulary_size="vocab_size", hidden_dim="n_embd",
                        sequence_length="n_positions", intermediate_dim="n_inner"),
          "GPT-Neo": dict(num_layers="num_layers", vocabulary_size="vocab_size", hidden_dim="hidden_size",
                          sequence_length="max_position_embeddings", intermediate_dim="intermediate_size")}


def load_causal_lm(folder, config, task, kwargs, *, family, model_arguments, table, buffers):
    """GPT-2's and GPT-Neo's `load`: check the task and options, build the `CausalLM` from
    `model_arguments(config)`, and assign the weights by `table` (every shape checked first)."""
    folder = pathlib.Path(folder)
    if task not in TASKS:
        raise ValueError(f"{family} checkpoints load as one task (a causal LM). Received: task={task!r}; expected "
                         f"one of {list(TASKS)}.")
    check_options(family, kwargs, OPTIONS)
    args = model_arguments(config)
    weights = read_weights(folder)
    prefix = "transformer." if "transformer.wte.weight" in weights else ""
    names = FIELDS[family]
    check_sizes(weights, {names["num_layers"]: (args["num_layers"], rf"{re.escape(prefix)}h\.(\d+)\."),
                          names["vocabulary_size"]: (args["vocabulary_size"], prefix + "wte.weight", 0),
                          names["hidden_dim"]: (args["hidden_dim"], prefix + "wte.weight", 1),
                          names["sequence_length"]: (args["sequence_length"], prefix + "wpe.weight", 0),
                          names["intermediate_dim"]: (args["intermediate_dim"], prefix + "h.0.mlp.c_fc.bias", 0)})
    preprocessor = kwargs.pop("preprocessor", None)
    if preprocessor is None:
        preprocessor = _default_preprocessor(folder, config, args["sequence_length"])
    args.update(kwargs)
    model = CausalLM(**args, preprocessor=preprocessor or None)
    entries = table(model, prefix)
    pairs = to_kformer(weights, entries)  # every tensor's shape checked before any assignment
    _check_tensors(weights, entries, prefix, family, buffers)
    assign_all(pairs)
    return model


def _default_preprocessor(folder, config, sequence_length):
    if not ((folder / "vocab.json").is_file() and (folder / "merges.txt").is_file()):
        return None
    from kformer.data.bpe import GPT2CausalLMPreprocessor

    end = config.get("eos_token_id")
    vocabulary = config.get("vocab_size")
    if isinstance(end, int) and not isinstance(end, bool) and not 0 <= end < vocabulary:
        raise ValueError(f"config.json: `eos_token_id`={end!r} is not a token id in [0, {vocabulary}) (`vocab_size`); "
                         "the checkpoint was not loaded.")
    return GPT2CausalLMPreprocessor.from_folder(folder, sequence_length=sequence_length,
                                                end_token_id=end if isinstance(end, int) else None)


def save(task, folder, overwrite=False):
    """Write a `CausalLM` as a Hugging Face GPT-2 folder (`GPT2LMHeadModel`).

    `config.json`, `model.safetensors` (the output projection tied to `wte`, as transformers saves
    it) and, with a `GPT2CausalLMPreprocessor`, `vocab.json`, `merges.txt` and
    `tokenizer_config.json`. What GPT-2 cannot represent exactly (rotary positions, an untied
    output projection, another activation or another preprocessor) is a ValueError naming the
    attribute, raised before anything is written. kformer has no attention-probability dropout,
    so `attn_pdrop` is written as 0.

    Args:
        task: the `CausalLM`.
        folder: the folder to write (atomically).
        overwrite: bool. Replace a non-empty `folder`. Defaults to `False`.

    Returns:
        `pathlib.Path(folder)`.
    """
    from kformer.models.pretrained.common import refuse, to_hf, write_folder, write_json

    if task.position != "learned":
        raise refuse(task, "position", task.position, "GPT-2 has learned absolute positions only")
    if task.attention_scale is not None or any(block.attention_window for block in task.decoder_blocks):
        raise refuse(task, "attention_window" if task.attention_scale is None else "attention_scale",
                     task.attention_window if task.attention_scale is None else task.attention_scale,
                     "GPT-2 attends every earlier position with scores scaled by 1 / sqrt(head_dim)")
    if not task.tie_output_embedding:
        raise refuse(task, "tie_output_embedding", False, "GPT-2 ties the output projection to `wte`")
    activation = _activation_name(task, "GPT-2")
    files = _tokenizer_files(task, task.preprocessor)
    end = _end_token_id(task.preprocessor)
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": task.vocabulary_size,
              "n_positions": task.sequence_length, "n_embd": task.hidden_dim, "n_layer": task.num_layers,
              "n_head": task.num_heads, "n_inner": task.intermediate_dim,
              "layer_norm_epsilon": float(task.layer_norm_epsilon), "activation_function": activation,
              "resid_pdrop": float(task.dropout), "embd_pdrop": float(task.dropout), "attn_pdrop": 0.0,
              "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
              "tie_word_embeddings": True, "add_cross_attention": False, "initializer_range": 0.02,
              "bos_token_id": end, "eos_token_id": end, "dtype": "float32"}
    files.update({"config.json": write_json(config), "model.safetensors": to_hf(table(task))})
    return write_folder(folder, files, overwrite)


def _activation_name(task, family):
    """config.json's `activation_function` for `task.activation`; a refusal naming `family` otherwise."""
    from kformer.models.pretrained.common import refuse

    names = {kformer: hf for hf, kformer in ACTIVATIONS.items() if hf != "gelu_pytorch_tanh"}
    if not isinstance(task.activation, str) or task.activation not in names:
        raise refuse(task, "activation", task.activation, f"{family} computes one of {sorted(names)}")
    return names[task.activation]


def _end_token_id(preprocessor):
    """The preprocessor's end-of-text id for config.json, or None (no preprocessor, or a vocabulary
    without <|endoftext|>)."""
    if preprocessor is None:
        return None
    try:
        return int(preprocessor.end_token_id)
    except (KeyError, ValueError, TypeError):
        return None


def _tokenizer_files(task, preprocessor):
    """`vocab.json` + `merges.txt` + `tokenizer_config.json` of a `GPT2CausalLMPreprocessor`."""
    from kformer.models.pretrained.common import refuse, write_json

    if preprocessor is None:
        return {}
    if type(preprocessor).__name__ != "GPT2CausalLMPreprocessor":  # data/ is not imported by models/
        raise refuse(task, "preprocessor", type(preprocessor).__name__, "transformers' GPT-2 tokenizer is the "
                     "byte-level BPE of kformer.data.bpe.GPT2CausalLMPreprocessor; set the preprocessor to None "
                     "to save the weights alone")
    tokenizer = preprocessor.byte_pair_tokenizer
    if getattr(tokenizer, "add_prefix_space", False):
        raise refuse(task, "preprocessor.byte_pair_tokenizer.add_prefix_space", True, "GPT-2 adds no prefix space")
    merges = [m for m in tokenizer.merges if "#version:" not in m.lstrip()]
    vocabulary = {str(token): int(index) for token, index in dict(tokenizer.vocabulary).items()}
    settings = {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False,
                "model_max_length": task.sequence_length}
    if END_TOKEN in vocabulary:
        settings.update(bos_token=END_TOKEN, eos_token=END_TOKEN, unk_token=END_TOKEN)
    return {"vocab.json": json.dumps(vocabulary, ensure_ascii=False).encode("utf-8"),
            "merges.txt": ("#version: 0.2\n" + "".join(m + "\n" for m in merges)).encode("utf-8"),
            "tokenizer_config.json": write_json(settings)}
