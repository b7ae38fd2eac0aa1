"""Attention maps of kformer encoder/decoder blocks, one panel per head."""

import numpy as np

from kformer.blocks import TransformerDecoderBlock
from kformer.viz._common import grid, pyplot, remove_unused, to_numpy
from kformer.viz._scores import BLOCKS, attention_scores, block_calls, encode, find_block, token_sources

MAX_TICKS = 64  # label every token up to this many; beyond, matplotlib picks the ticks
# Padding-mask call arguments of each side (explicit first, then the Keras mask).
MASK_ARGUMENTS = {"encoder_block": ("padding_mask", "mask"), "decoder": ("decoder_padding_mask", "mask"),
                  "encoder": ("encoder_padding_mask", "encoder_sequence_mask")}


def plot_attention(model_or_layer, inputs, layer=0, attention="self", head=None, *, targets=None,
                   tokens=None, index=0, cmap="viridis", figsize=None):
    """Attention weights of one block: queries (rows) x keys (columns), one panel per head.

    The model runs eagerly on `inputs` (keras ops, any backend) up to the
    block, which is then called with `return_attention_scores=True`, so the
    maps are exactly the probabilities the model uses. With a tokenizer
    (the task's preprocessor) the axes show the tokens; padding is left out.

    Args:
        model_or_layer: a kformer task (`Translator`, `TextClassifier`,
            `BertTextClassifier`, `BertPretrainer`, `BertBackbone`,
            `ViTImageClassifier`, `CausalLM`) or a `TransformerEncoderBlock` /
            `TransformerDecoderBlock`.
        inputs: for a task, raw inputs (texts, images) when it has a
            preprocessor, or model inputs (arrays or a dict of them). For a
            block, its call arguments: a tensor `(batch, seq, dim)`, a tuple of
            positional ones, or a dict (`{"decoder_sequence": ...,
            "encoder_sequence": ..., "decoder_padding_mask": ...}`).
        layer: which block of a task: an int index into `encoder_blocks`
            (into `decoder_blocks` for `attention="cross"` or a model without
            encoder blocks), a block name (`"encoder_0"`, `"decoder_1"`) or the
            block itself. Defaults to `0`.
        attention: `"self"` or `"cross"` (decoder blocks with an encoder).
        head: int, or None for every head in a grid. Defaults to None.
        targets: target texts for a `Translator` given source texts; without
            them a decoder block sees the model's own greedy translation.
        tokens: labels for the axes, overriding the tokenizer's: a list of
            str (queries and keys of self-attention) or a pair
            `(query_tokens, key_tokens)`, one per position before padding is removed.
        index: int. Which example of the batch. Defaults to `0`.
        cmap: matplotlib colormap name. Defaults to `"viridis"`.
        figsize: `(width, height)` in inches, or None to fit the tokens.

    Returns:
        `matplotlib.figure.Figure`: one axes per head plus a colorbar.

    Example:

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from kformer.data.preprocessors import TextClassifierPreprocessor
    >>> from kformer.data.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer
    >>> from kformer.models import TextClassifier
    >>> tokenizer = WordPieceTokenizer(list(SPECIAL_TOKENS) + ["a", "fine", "film"])
    >>> model = TextClassifier(vocabulary_size=10, sequence_length=6, hidden_dim=8, num_heads=2,
    ...                        intermediate_dim=16, num_layers=1,
    ...                        preprocessor=TextClassifierPreprocessor(tokenizer, 6))
    >>> fig = plot_attention(model, ["A fine film"], layer="encoder_0")
    >>> len(fig.axes)  # two heads and a colorbar
    3
    >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
    ['a', 'fine', 'film']
    """
    if attention not in ("self", "cross"):
        raise ValueError(f"`attention` must be 'self' or 'cross'. Received: attention={attention!r}")
    if isinstance(model_or_layer, BLOCKS):
        block, sources = model_or_layer, {}
        args, kwargs = ((), dict(inputs)) if isinstance(inputs, dict) else (
            (tuple(inputs), {}) if isinstance(inputs, (tuple, list)) else ((inputs,), {}))
    else:
        owner, block = find_block(model_or_layer, layer, attention)
        feed = encode(model_or_layer, inputs, targets, isinstance(block, TransformerDecoderBlock))
        [(args, kwargs)] = block_calls(owner, [block], feed)
        sources = token_sources(model_or_layer, feed)
    scores = attention_scores(block, args, kwargs)
    if attention not in scores:
        raise ValueError(f"Block {block.name!r} has no cross-attention (it is not an encoder-decoder "
                         "block). Received: attention='cross'")
    scores = scores[attention]  # (batch, heads, q_len, k_len)
    if not 0 <= index < len(scores):
        raise ValueError(f"`index` must pick one of the {len(scores)} examples. Received: index={index}")
    if head is not None and not 0 <= head < scores.shape[1]:
        raise ValueError(f"`head` must be None or in [0, {scores.shape[1]}). Received: head={head}")

    decoder = isinstance(block, TransformerDecoderBlock)
    sides = (("decoder", "encoder" if attention == "cross" else "decoder") if decoder
             else ("encoder_block", "encoder_block"))
    if tokens is not None and (len(tokens) != 2 or isinstance(tokens[0], str)):
        tokens = (tokens, tokens)
    labels, keep = [], []
    for axis, side in enumerate(sides):
        given = None if tokens is None else list(tokens[axis])
        side_labels, side_keep = _side(model_or_layer, sources.get(side.replace("_block", "")), given,
                                       [kwargs.get(name) for name in MASK_ARGUMENTS[side]],
                                       scores.shape[2 + axis], index)
        labels.append(side_labels)
        keep.append(side_keep)
    if not (keep[0].any() and keep[1].any()):
        raise ValueError(f"Example {index} has no real (non-padding) tokens to show.")
    heads = list(range(scores.shape[1])) if head is None else [head]
    maps = scores[index][heads][:, keep[0]][:, :, keep[1]]  # (shown heads, real queries, real keys)
    title = f"{block.name}: {attention}-attention" + (f" (example {index})" if len(scores) > 1 else "")
    hidden = 1.0 - float(maps.sum(-1).mean())  # attended padding (an unmasked model), not drawn
    if hidden > 0.01:
        title += f"\n{hidden:.0%} of the attention falls on padding (not shown)"
    return _draw(maps, heads, labels, title, cmap, figsize)


def _side(model, source, given, masks, length, index):
    """(tick labels, bool keep mask) of one axis: tokens from ids, padding from ids or masks."""
    ids, tokenizer = source if source is not None else (None, None)
    keep = np.ones(length, bool)
    mask = next((m for m in masks if m is not None), None)
    if ids is not None:
        ids = to_numpy(ids)[index]
        keep = ids != getattr(model, "padding_id", 0)
    elif mask is not None:
        keep = to_numpy(mask)[index].astype(bool)
    if given is not None:
        if len(given) != length:
            raise ValueError(f"`tokens` must give one label per position ({length}). Received: {len(given)}")
        labels = given
    elif ids is not None and tokenizer is not None:
        labels = [tokenizer.vocabulary[i] if i < len(tokenizer.vocabulary) else "[UNK]" for i in ids]
    elif getattr(getattr(model, "patch_embedding", None), "use_class_token", False):
        labels = ["[CLS]"] + [f"p{i}" for i in range(length - 1)]  # ViT: class token, then patches
    else:
        labels = [str(i) for i in range(length)]  # positions
    return [label for label, k in zip(labels, keep) if k], keep


def _draw(maps, heads, labels, title, cmap, figsize):
    plt = pyplot()
    rows, columns = grid(len(heads), 4)
    width, height = (float(np.clip(0.22 * n + 1.4, 2.4, 6.5)) for n in (maps.shape[2], maps.shape[1]))
    fig, axes = plt.subplots(rows, columns, squeeze=False, layout="constrained",
                             figsize=figsize or (width * columns + 1.0, height * rows + 0.6))
    axes = remove_unused(axes, len(heads))
    vmax = float(maps.max()) or 1.0
    for ax, h, weights in zip(axes, heads, maps):
        image = ax.imshow(weights, vmin=0.0, vmax=vmax, cmap=cmap, interpolation="nearest")
        ax.set_title(f"head {h}")
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        for axis, names, set_ticks in ((1, labels[1], ax.set_xticks), (0, labels[0], ax.set_yticks)):
            if len(names) <= MAX_TICKS:
                set_ticks(range(len(names)), names, rotation=90 if axis else 0, fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    fig.suptitle(title)
    return fig
