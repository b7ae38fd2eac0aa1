"""GPT-Neo checkpoints in the Hugging Face layout (`GPTNeoForCausalLM`, `model_type: "gpt_neo"`) as a `CausalLM`.

GPT-Neo is GPT-2's decoder with global and local (sliding-window) self-attention layers, unscaled
attention scores and no query, key or value biases; `CausalLM` has each as an argument
(`attention_types`, `attention_window`, `attention_scale=1.0`, `use_qkv_bias=False`). The mapping,
one decoder block `i` (torch `Linear` weights are `(out, in)`, transposed to Keras's `(in, out)`):

    transformer.wte / wpe                 -> embedding (token table, tied output projection) / positions
    h.i.ln_1, h.i.ln_2                    -> decoder_i self_attention_norm, feed_forward_norm
    h.i.attn.attention.q/k/v_proj (E, E)  -> query, key, value kernels (E, heads, head_dim), no biases
    h.i.attn.attention.out_proj (E, E)    -> attention_output kernel (heads, head_dim, E) and bias
    h.i.mlp.c_fc, h.i.mlp.c_proj          -> feed_forward mlp_in, mlp_out
    transformer.ln_f                      -> final_norm

Every config value kformer cannot represent exactly is refused (file, field, value) before any
weight is read or assigned. As for GPT-2, kformer keeps id 0 for padding, so `generate` never
produces id 0 and a prompt must not contain it (the logits are unaffected).
"""

from kformer.models.pretrained.common import LINEAR, Entry, field, linear, norm
from kformer.models.pretrained.gpt2 import (ACTIVATIONS, _activation_name, _end_token_id, _tokenizer_files,
                                            load_causal_lm)

# The causal-mask buffers some checkpoints hold (`attn.attention.bias`, `attn.attention.masked_bias`): not weights.
BUFFERS = (".attn.attention.bias", ".attn.attention.masked_bias")


def model_arguments(config):
    """config.json -> `CausalLM` arguments; a ValueError naming the field kformer cannot represent."""
    ints = {}
    for name in ("vocab_size", "max_position_embeddings", "hidden_size", "num_layers", "num_heads", "window_size"):
        value = field(config, name, 256 if name == "window_size" else None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.json: `{name}`={value!r} must be a positive int; the checkpoint was not loaded.")
        ints[name] = value
    if ints["hidden_size"] % ints["num_heads"]:
        raise ValueError(f"config.json: `hidden_size`={ints['hidden_size']} is not divisible by "
                         f"`num_heads`={ints['num_heads']}.")
    inner = field(config, "intermediate_size")
    if inner is None:
        inner = 4 * ints["hidden_size"]
    elif not isinstance(inner, int) or isinstance(inner, bool) or inner < 1:
        raise ValueError(f"config.json: `intermediate_size`={inner!r} must be a positive int or null.")
    epsilon = field(config, "layer_norm_epsilon", 1e-5)
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or epsilon <= 0:
        raise ValueError(f"config.json: `layer_norm_epsilon`={epsilon!r} must be a positive number.")
    activation = field(config, "activation_function", "gelu_new", allowed=tuple(ACTIVATIONS))
    field(config, "tie_word_embeddings", True, allowed=(True,))
    types = _layer_types(field(config, "attention_types", [[["global", "local"], 12]]), ints["num_layers"])
    dropout = field(config, "resid_dropout", 0.0)
    if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        raise ValueError(f"config.json: `resid_dropout`={dropout!r} must be a number in [0, 1).")
    return dict(vocabulary_size=ints["vocab_size"], sequence_length=ints["max_position_embeddings"],
                hidden_dim=ints["hidden_size"], num_layers=ints["num_layers"], num_heads=ints["num_heads"],
                intermediate_dim=inner, layer_norm_epsilon=float(epsilon), activation=ACTIVATIONS[activation],
                dropout=float(dropout), position="learned", tie_output_embedding=True,
                attention_window=ints["window_size"], attention_types=types, attention_scale=1.0, use_qkv_bias=False)


def _layer_types(attention_types, num_layers):
    """GPT-Neo's `[[["global", "local"], 6]]` -> one type a layer, exactly `num_layers` of them."""
    try:
        types = [kind for pattern, repeats in attention_types for _ in range(repeats) for kind in pattern]
    except (TypeError, ValueError):
        types = None
    if types is None or len(types) != num_layers or any(kind not in ("global", "local") for kind in types):
        raise ValueError(f"config.json: `attention_types`={attention_types!r} must expand (GPT-Neo's [[types, "
                         f"repeats], ...]) to `num_layers`={num_layers} entries of 'global' / 'local'.")
    return types


def table(model, prefix="transformer."):
    """The `Entry` table of a GPT-Neo `CausalLM`: `GPTNeoForCausalLM` tensor names under `prefix`."""
    e, inner = model.hidden_dim, model.intermediate_dim
    embedding = model.token_embedding
    entries = [Entry(prefix + "wte.weight", embedding.token_embedding.embeddings, (model.vocabulary_size, e)),
               Entry(prefix + "wpe.weight", embedding.position_embedding.position_embeddings,
                     (model.sequence_length, e))]
    entries += norm(model.final_norm, prefix + "ln_f", e)
    for i, block in enumerate(model.decoder_blocks):
        h, attention, ff = f"{prefix}h.{i}.", block.self_attention, block.feed_forward
        for name, dense in (("q", attention.query_dense), ("k", attention.key_dense), ("v", attention.value_dense)):
            entries.append(Entry(f"{h}attn.attention.{name}_proj.weight", dense.kernel, (e, e), LINEAR))
        entries += linear(attention.output_dense, h + "attn.attention.out_proj", e, e)
        entries += norm(block.self_attention_norm, h + "ln_1", e) + norm(block.feed_forward_norm, h + "ln_2", e)
        entries += linear(ff.inner, h + "mlp.c_fc", e, inner) + linear(ff.outer, h + "mlp.c_proj", inner, e)
    return entries


def load(folder, config, task=None, **kwargs):
    """A GPT-Neo checkpoint folder -> `CausalLM` with the checkpoint's weights and, when the folder holds
    `vocab.json` and `merges.txt` (GPT-2's tokenizer), a `kformer.data.bpe.GPT2CausalLMPreprocessor`.

    Args:
        folder: the checkpoint folder (config.json, model.safetensors, vocab.json, merges.txt).
        config: its config.json as a dict.
        task: None, `"causal_lm"` or `"text_generation"` (all the same head).
        **kwargs: `dropout` (default: config.json's `resid_dropout`; `attention_dropout` and
            `embed_dropout` are not applied separately), `name`, `dtype`, and `preprocessor` (False:
            none; or a preprocessor to attach instead).

    Returns:
        `CausalLM` whose logits equal `GPTNeoForCausalLM`'s.
    """
    return load_causal_lm(folder, config, task, kwargs, family="GPT-Neo", model_arguments=model_arguments,
                          table=table, buffers=BUFFERS)


def save(task, folder, overwrite=False):
    """Write a GPT-Neo-style `CausalLM` (`use_qkv_bias=False`) as a Hugging Face GPT-Neo folder.

    `config.json`, `model.safetensors` and, with a `GPT2CausalLMPreprocessor`, the tokenizer files.
    What GPT-Neo cannot represent exactly (scaled scores, rotary positions, an untied output
    projection, another activation, mixture-of-experts blocks) is a ValueError naming the attribute,
    raised before anything is written.

    Args:
        task: the `CausalLM`.
        folder: the folder to write (atomically).
        overwrite: bool. Replace a non-empty `folder`. Defaults to `False`.

    Returns:
        `pathlib.Path(folder)`.
    """
    from kformer.models.pretrained.common import refuse, to_hf, write_folder, write_json

    if task.attention_scale != 1.0:
        raise refuse(task, "attention_scale", task.attention_scale, "GPT-Neo does not scale attention scores")
    if task.position != "learned":
        raise refuse(task, "position", task.position, "GPT-Neo has learned absolute positions only")
    if not task.tie_output_embedding:
        raise refuse(task, "tie_output_embedding", False, "GPT-Neo ties the output projection to `wte`")
    if any(getattr(block, "num_experts", 0) for block in task.decoder_blocks):
        raise refuse(task, "num_experts", task.decoder_blocks[0].num_experts, "GPT-Neo has one MLP a block")
    activation = _activation_name(task, "GPT-Neo")
    windows = [block.attention_window for block in task.decoder_blocks]
    if len({w for w in windows if w is not None}) > 1:
        raise refuse(task, "attention_window", windows, "GPT-Neo's local layers share one window")
    files = _tokenizer_files(task, task.preprocessor)
    end = _end_token_id(task.preprocessor)
    config = {"model_type": "gpt_neo", "architectures": ["GPTNeoForCausalLM"], "vocab_size": task.vocabulary_size,
              "max_position_embeddings": task.sequence_length, "hidden_size": task.hidden_dim,
              "num_layers": task.num_layers, "num_heads": task.num_heads, "intermediate_size": task.intermediate_dim,
              "window_size": task.attention_window or 256,
              "attention_types": [[["global" if w is None else "local"], 1] for w in windows],
              "layer_norm_epsilon": float(task.layer_norm_epsilon), "activation_function": activation,
              "resid_dropout": float(task.dropout), "embed_dropout": float(task.dropout), "attention_dropout": 0.0,
              "tie_word_embeddings": True, "initializer_range": 0.02, "bos_token_id": end, "eos_token_id": end,
              "dtype": "float32"}
    files.update({"config.json": write_json(config), "model.safetensors": to_hf(table(task))})
    return write_folder(folder, files, overwrite)
