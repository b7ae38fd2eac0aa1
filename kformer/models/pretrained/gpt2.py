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

import pathlib

import numpy as np

from kformer.models.gpt import CausalLM
from kformer.models.pretrained.common import assign_all, field, read_weights, take

ACTIVATIONS = {"gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate", "gelu": "gelu"}
TASKS = (None, "causal_lm", "text_generation")
OPTIONS = ("dropout", "name", "dtype", "preprocessor")
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


def checkpoint_arrays(weights, args):
    """Every kformer weight's array, by role, from the safetensors tensors; a ValueError naming a
    missing or misshapen tensor (nothing is assigned yet). Unknown tensors are refused too."""
    prefix = "transformer." if "transformer.wte.weight" in weights else ""
    e, v, p = args["hidden_dim"], args["vocabulary_size"], args["sequence_length"]
    heads, inner = args["num_heads"], args["intermediate_dim"]
    used = set()

    def get(name, shape):
        used.add(prefix + name)
        return take(weights, prefix + name, shape)

    arrays = {"wte": get("wte.weight", (v, e)), "wpe": get("wpe.weight", (p, e)),
              "ln_f": (get("ln_f.weight", (e,)), get("ln_f.bias", (e,))), "blocks": []}
    for i in range(args["num_layers"]):
        h = f"h.{i}."
        qkv, qkv_bias = get(h + "attn.c_attn.weight", (e, 3 * e)), get(h + "attn.c_attn.bias", (3 * e,))
        arrays["blocks"].append({
            "ln_1": (get(h + "ln_1.weight", (e,)), get(h + "ln_1.bias", (e,))),
            "ln_2": (get(h + "ln_2.weight", (e,)), get(h + "ln_2.bias", (e,))),
            "qkv": [(qkv[:, j * e:(j + 1) * e].reshape(e, heads, e // heads),
                     qkv_bias[j * e:(j + 1) * e].reshape(heads, e // heads)) for j in range(3)],
            "proj": (get(h + "attn.c_proj.weight", (e, e)).reshape(heads, e // heads, e),
                     get(h + "attn.c_proj.bias", (e,))),
            "fc": (get(h + "mlp.c_fc.weight", (e, inner)), get(h + "mlp.c_fc.bias", (inner,))),
            "fc_proj": (get(h + "mlp.c_proj.weight", (inner, e)), get(h + "mlp.c_proj.bias", (e,))),
        })
    if "lm_head.weight" in weights:  # saved tied: must equal the token table
        if not np.array_equal(take(weights, "lm_head.weight", (v, e)), arrays["wte"]):
            raise ValueError("model.safetensors: tensor 'lm_head.weight' differs from 'transformer.wte.weight', but "
                             "config.json's `tie_word_embeddings` is true; kformer ties them.")
        used.add("lm_head.weight")
    unknown = sorted(k for k in weights if k not in used and not k.endswith(BUFFERS))
    if unknown:
        raise ValueError(f"model.safetensors holds tensors a GPT-2 `CausalLM` has no place for: {unknown[:5]} "
                         f"({len(unknown)} in all); the checkpoint was not loaded.")
    return arrays


def pairs(model, arrays):
    """`[(variable, array), ...]` for `assign_all`."""
    embedding = model.token_embedding
    out = [(embedding.token_embedding.embeddings, arrays["wte"]),
           (embedding.position_embedding.position_embeddings, arrays["wpe"]),
           (model.final_norm.gamma, arrays["ln_f"][0]), (model.final_norm.beta, arrays["ln_f"][1])]
    for block, a in zip(model.decoder_blocks, arrays["blocks"]):
        attention, ff = block.self_attention, block.feed_forward
        for norm, (gamma, beta) in ((block.self_attention_norm, a["ln_1"]), (block.feed_forward_norm, a["ln_2"])):
            out += [(norm.gamma, gamma), (norm.beta, beta)]
        for dense, (kernel, bias) in zip((attention.query_dense, attention.key_dense, attention.value_dense),
                                         a["qkv"]):
            out += [(dense.kernel, kernel), (dense.bias, bias)]
        out += [(attention.output_dense.kernel, a["proj"][0]), (attention.output_dense.bias, a["proj"][1])]
        out += [(ff.inner.kernel, a["fc"][0]), (ff.inner.bias, a["fc"][1]),
                (ff.outer.kernel, a["fc_proj"][0]), (ff.outer.bias, a["fc_proj"][1])]
    return out


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
    folder = pathlib.Path(folder)
    if task not in TASKS:
        raise ValueError(f"GPT-2 checkpoints load as one task (a causal LM). Received: task={task!r}; expected one "
                         f"of {list(TASKS)}.")
    unknown = sorted(set(kwargs) - set(OPTIONS))
    if unknown:
        raise ValueError(f"Unknown GPT-2 `from_pretrained` options {unknown}; expected some of {list(OPTIONS)}.")
    args = model_arguments(config)
    arrays = checkpoint_arrays(read_weights(folder), args)
    preprocessor = kwargs.pop("preprocessor", None)
    if preprocessor is None:
        preprocessor = _default_preprocessor(folder, config, args["sequence_length"])
    args.update(kwargs)
    model = CausalLM(**args, preprocessor=preprocessor or None)
    assign_all(pairs(model, arrays))
    return model


def _default_preprocessor(folder, config, sequence_length):
    if not ((folder / "vocab.json").is_file() and (folder / "merges.txt").is_file()):
        return None
    from kformer.data.bpe import GPT2CausalLMPreprocessor

    end = config.get("eos_token_id")
    return GPT2CausalLMPreprocessor.from_folder(folder, sequence_length=sequence_length,
                                                end_token_id=end if isinstance(end, int) else None)
