"""Attention scores of the kformer blocks inside a task model, computed eagerly with keras ops.

Inside a functional model a block's inputs are the tensors of its call node.
A sub-model from the model's inputs to those tensors (and to the Keras masks
that the model passes along implicitly) gives their values; calling the block
on them with `return_attention_scores=True` gives the scores the model
computes. Blocks are found through the task's attributes (`encoder_blocks`,
`decoder_blocks`, `backbone`), never by layer-name lookups.
"""

import inspect

import keras
import numpy as np

from kformer.blocks import TransformerDecoderBlock, TransformerEncoderBlock
from kformer.models.task import KformerModel
from kformer.viz._common import to_numpy

BLOCKS = (TransformerEncoderBlock, TransformerDecoderBlock)


def parts(model):
    """(functional model holding the blocks, encoder blocks, decoder blocks) of a kformer model
    (its `transformer_blocks()`)."""
    found = model.transformer_blocks() if isinstance(model, KformerModel) else None
    if found is None or not (found[1] or found[2]):
        raise ValueError("`model_or_layer` must be a kformer task or backbone with Transformer blocks (its "
                         "`transformer_blocks()`) or a kformer encoder/decoder block. "
                         f"Received: {type(model).__name__}")
    return found


def find_block(model, layer, attention="self"):
    """(owner, block) for `layer`: an int index, a block name such as "decoder_1", or a block.

    An int indexes `encoder_blocks`; with `attention="cross"`, or in a model
    without encoder blocks, it indexes `decoder_blocks`.
    """
    owner, encoder, decoder = parts(model)
    if isinstance(layer, (int, np.integer)) and not isinstance(layer, bool):
        stack = decoder if attention == "cross" or not encoder else encoder
        if not -len(stack) <= layer < len(stack):
            raise ValueError(f"`layer` must index the {len(stack)} {stack[0].name.split('_')[0]} blocks. "
                             f"Received: layer={layer}")
        return owner, stack[layer]
    for block in encoder + decoder:
        if block is layer or (isinstance(layer, str) and block.name == layer):
            return owner, block
    names = [block.name for block in encoder + decoder]
    raise ValueError(f"`layer` must be an int, a block name ({', '.join(names)}) or one of the model's "
                     f"blocks. Received: layer={layer!r}")


def encode(model, inputs, targets=None, need_targets=False):
    """Model inputs from raw `inputs` (texts, images) with the task's preprocessor; others unchanged.

    A `Translator` gets decoder ids from `targets` (texts); without them, from
    its own translation when `need_targets`, else just `[START]`.
    """
    preprocessor = getattr(model, "preprocessor", None)
    raw = preprocessor is not None and preprocessor.is_raw(inputs)
    translation = raw and hasattr(preprocessor, "target_tokenizer")
    if targets is not None and not translation:
        raise ValueError("`targets` (target texts) needs a Translator with a preprocessor and source texts "
                         f"as `inputs`. Received: targets={targets!r} for {type(model).__name__}")
    if not raw:
        return inputs
    if hasattr(preprocessor, "image_size") and not isinstance(inputs, (list, tuple)):
        # As a list, each image is resized eagerly: the traced batch path keeps the channels of the
        # first size it saw (an RGB image after a grayscale one would stay RGB).
        inputs = [inputs] if np.ndim(inputs) == 3 else list(inputs)
    if not translation:
        return preprocessor.encode(inputs)
    from kformer.data.preprocessors import as_strings  # TensorFlow, as the preprocessor itself

    sources = [inputs] if isinstance(inputs, str) else list(inputs)
    if targets is None:
        targets = model.translate(sources) if need_targets else [""] * len(sources)
    targets = [targets] if isinstance(targets, str) else list(targets)
    if len(targets) != len(sources):
        raise ValueError(f"`targets` must have one text per source. Received: {len(targets)} targets "
                         f"for {len(sources)} sources")
    x, _ = preprocessor(as_strings(sources), as_strings(targets, "targets"))
    return {name: np.asarray(value) for name, value in x.items()}


def token_sources(model, feed):
    """{"encoder": (ids or None, tokenizer or None), "decoder": (...)}: what labels each side's tokens."""
    preprocessor = getattr(model, "preprocessor", None)
    source = getattr(preprocessor, "source_tokenizer", getattr(preprocessor, "tokenizer", None))
    target = getattr(preprocessor, "target_tokenizer", source)
    if isinstance(feed, dict):
        encoder_ids = feed.get("encoder_token_ids", feed.get("token_ids"))
        decoder_ids = feed.get("decoder_token_ids")
    else:
        encoder_ids, decoder_ids = to_numpy(feed), None
        encoder_ids = encoder_ids if encoder_ids.dtype.kind in "iu" else None
    if decoder_ids is None and not parts(model)[1]:
        decoder_ids = encoder_ids  # decoder-only (CausalLM): its blocks read the token ids
    return {"encoder": (encoder_ids, source), "decoder": (decoder_ids, target)}


def block_calls(owner, blocks, inputs):
    """The call arguments `[(args, kwargs), ...]` each block gets when `owner` runs on `inputs`."""
    calls = [_call_arguments(block, _node(owner, block)) for block in blocks]
    tensors = {id(t): t for args, kwargs in calls for t in (*args, *kwargs.values())
               if isinstance(t, keras.KerasTensor)}
    tensors = list(tensors.values())
    needed = _sources(tensors)
    if isinstance(owner.input, dict):  # feed only the inputs these blocks depend on
        names = [name for name, tensor in owner.input.items() if id(tensor) in needed]
        if not isinstance(inputs, dict) or any(name not in inputs for name in names):
            raise ValueError(f"`inputs` must be a dict with the model inputs {names}. Received: "
                             f"{sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__}")
        sub_inputs, inputs = {n: owner.input[n] for n in names}, {n: inputs[n] for n in names}
    else:
        sub_inputs = owner.input
    outputs = keras.Model(sub_inputs, tensors)(inputs, training=False)
    values = dict(zip(map(id, tensors), outputs if len(tensors) > 1 else [outputs]))

    def fill(x):
        return values[id(x)] if isinstance(x, keras.KerasTensor) else x

    return [(tuple(map(fill, args)), {k: fill(v) for k, v in kwargs.items()}) for args, kwargs in calls]


def attention_scores(block, args, kwargs):
    """{"self": (batch, heads, q_len, k_len)[, "cross": ...]} as numpy, from one eager call of `block`."""
    if not isinstance(block, BLOCKS):
        raise ValueError("Attention maps need a kformer TransformerEncoderBlock or TransformerDecoderBlock. "
                         f"Received: {type(block).__name__}")
    outputs = block(*args, **{**kwargs, "training": False, "return_attention_scores": True})
    kinds = ["self"]  # after the call: it builds a new block, and with it any cross-attention
    if isinstance(block, TransformerDecoderBlock) and block.cross_attention is not None:
        kinds.append("cross")
    return dict(zip(kinds, (to_numpy(s).astype("float32") for s in outputs[-len(kinds):])))  # not float16


def _node(owner, block):
    """The node where `owner`'s graph calls `block`."""
    inputs = {id(t) for t in keras.tree.flatten(owner.input)}
    for node in block._inbound_nodes:
        tensors = node.arguments.keras_tensors
        if tensors and _sources(tensors) <= inputs:
            return node
    raise ValueError(f"Block {block.name!r} is not called in the graph of model {owner.name!r}.")


def _call_arguments(block, node):
    """The node's arguments plus the Keras masks `Layer.__call__` fills in from its tensors.

    Keras's rule: one tensor argument gives `mask`; several give `<name>_mask`
    when `call` has such an argument and it was not passed.
    """
    args, kwargs = tuple(node.arguments.args), dict(node.arguments.kwargs)
    signature = inspect.signature(block.call)
    bound = signature.bind_partial(*args, **kwargs).arguments
    tensors = {name: v for name, v in bound.items() if isinstance(v, keras.KerasTensor)}
    for name, tensor in tensors.items():
        mask_name = "mask" if len(tensors) == 1 else f"{name}_mask"
        mask = getattr(tensor, "_keras_mask", None)
        if mask is not None and mask_name in signature.parameters and bound.get(mask_name) is None:
            kwargs[mask_name] = mask
    return args, kwargs


def _sources(tensors):
    """Ids of the `keras.Input` tensors that `tensors` are computed from."""
    seen, found, stack = set(), set(), list(tensors)
    while stack:
        tensor = stack.pop()
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        operation, node_index, _ = tensor._keras_history
        node = operation._inbound_nodes[node_index]
        if node.is_input:
            found.add(id(tensor))
        stack.extend(node.arguments.keras_tensors)
    return found
