"""BERT checkpoints in the Hugging Face layout as kformer's `BertBackbone`, `BertPretrainer` or
`BertTextClassifier`, with a `BertPreprocessor` whose ids are the checkpoint tokenizer's.

The computation is Hugging Face's `BertModel` exactly: token + position + segment embeddings,
LayerNorm, post-norm blocks with exact (erf) GELU and 1/sqrt(head_dim) attention, a tanh pooler
on [CLS]; the masked-LM head is Dense + GELU + LayerNorm and the decoder tied to the token
table. A config or tokenizer kformer would compute differently is refused, naming the file, the
field and the value, before any weight is assigned.
"""

import pathlib
import re

import numpy as np

from kformer.models.pretrained.common import (Entry, assign_all, check_sizes, field, linear, norm, read_json,
                                               read_weights, take, to_kformer)

TASKS = ("backbone", "fill_mask", "text_classification")
ARCHITECTURES = {"BertModel": "backbone", "BertForMaskedLM": "fill_mask", "BertForPreTraining": "fill_mask",
                 "BertForSequenceClassification": "text_classification"}
HIDDEN_ACT = {"gelu": "gelu", "gelu_new": "gelu_approximate"}  # config.json -> BertBackbone(activation=)
_IGNORED = ("embeddings.position_ids",)  # a buffer older checkpoints store (0, 1, 2, ...)


def load(folder, config, task=None, num_classes=None, sequence_length=None, **kwargs):
    """A BERT checkpoint folder as a kformer task with its preprocessor.

    Args:
        folder: the checkpoint folder (`config.json`, `model.safetensors`, and `tokenizer.json`
            or `vocab.txt` + `tokenizer_config.json`).
        config: `config.json` as a dict.
        task: None (the checkpoint's own: `architectures`, else its tensors), `"backbone"`
            (the `BertBackbone`; no preprocessor, but the folder's tokenizer is still checked),
            `"fill_mask"` (`BertPretrainer`; needs the
            `cls.predictions.*` masked-LM head) or `"text_classification"` (`BertTextClassifier`).
        num_classes: int. For `"text_classification"` from a checkpoint without a classifier:
            a new, randomly initialized head of that many classes. With a classifier it must
            equal the checkpoint's (or be None).
        sequence_length: int. The preprocessor's length; defaults to `max_position_embeddings`.
        **kwargs: none other is accepted (a ValueError names it).

    Returns:
        The task (or backbone), its weights the checkpoint's. Parts the checkpoint lacks are
        randomly initialized: the pooler of a `BertForMaskedLM` checkpoint (so `pooled_output`
        is not the reference's), the next-sentence head unless the checkpoint has
        `cls.seq_relationship` (neither changes `fill_mask` or `mlm_logits`), and a new
        classifier head.

    Example (a folder written by `transformers`' `save_pretrained`, or an `hf://` handle):

        model = kformer.models.pretrained.from_pretrained("checkpoints/bert-base-uncased")
        model.fill_mask("The movie was [MASK].", top_k=3)
    """
    from kformer.models.bert import BertBackbone, BertPretrainer, BertTextClassifier

    if kwargs:
        raise ValueError(f"BERT checkpoints take `task`, `num_classes` and `sequence_length`. Received: "
                         f"{sorted(kwargs)}")
    folder = pathlib.Path(folder)
    args = backbone_arguments(config)
    weights = read_weights(folder)
    file = "model.safetensors" if (folder / "model.safetensors").is_file() else "the safetensors shards"
    weights = {_modern_name(k): v for k, v in weights.items()}
    prefix = _prefix(weights, folder, file)
    own = _checkpoint_task(config, weights, prefix)
    task = own if task is None else task
    if task not in TASKS:
        raise ValueError(f"`task` must be None or one of {TASKS}. Received: task={task!r}")
    if task == "fill_mask" and "cls.predictions.transform.dense.weight" not in weights:
        raise ValueError(f"{folder / file} has no masked-LM head (`cls.predictions.*`): task='fill_mask' needs a "
                         "BertForMaskedLM or BertForPreTraining checkpoint. Use task='backbone' or "
                         "task='text_classification' (with num_classes).")
    has_classifier = own == "text_classification" and "classifier.weight" in weights
    if task == "text_classification":
        num_classes, class_names = _classes(folder, config, weights, num_classes, has_classifier, file)
    elif num_classes is not None:
        raise ValueError(f"`num_classes` applies to task='text_classification' only. Received: "
                         f"num_classes={num_classes!r}, task={task!r}")
    preprocessor = None
    if task != "backbone":
        preprocessor = load_preprocessor(folder, config, sequence_length, mask_positions=task == "fill_mask")
    elif sequence_length is not None:
        raise ValueError("`sequence_length` sets the preprocessor's length: task='backbone' has no preprocessor "
                         "(use `load_preprocessor`).")
    elif (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file():
        load_tokenizer(folder, config)  # checked against the weights all the same

    e = f"{prefix}embeddings."
    check_sizes(weights, {"num_hidden_layers": (args["num_layers"], rf"{re.escape(prefix)}encoder\.layer\.(\d+)\."),
                          "vocab_size": (args["vocabulary_size"], f"{e}word_embeddings.weight", 0),
                          "hidden_size": (args["hidden_dim"], f"{e}word_embeddings.weight", 1),
                          "max_position_embeddings": (args["sequence_length"], f"{e}position_embeddings.weight", 0),
                          "type_vocab_size": (args["num_segments"], f"{e}token_type_embeddings.weight", 0),
                          "intermediate_size": (args["intermediate_dim"],
                                                f"{prefix}encoder.layer.0.intermediate.dense.bias", 0)}, file)
    backbone = BertBackbone(**args)
    table = backbone_table(backbone, prefix, pooler=f"{prefix}pooler.dense.weight" in weights)
    _check_unused(weights, prefix, file)
    if task == "backbone":
        model = backbone
    elif task == "fill_mask":
        model = BertPretrainer(backbone, preprocessor=preprocessor)
        _check_mlm(weights, prefix, file)
        table += mlm_table(model, nsp="cls.seq_relationship.weight" in weights)
    else:
        dropout = config.get("classifier_dropout")
        dropout = args["dropout"] if dropout is None else dropout
        model = BertTextClassifier(backbone, num_classes=num_classes, dropout=dropout, class_names=class_names,
                                   preprocessor=preprocessor)
        if has_classifier:
            table += linear(model.head, "classifier", args["hidden_dim"], num_classes)
    assign_all(to_kformer(weights, table, file))
    fresh = [name for name, given in (("pooler", f"{prefix}pooler.dense.weight" in weights),
                                      ("nsp_logits", task != "fill_mask" or "cls.seq_relationship.weight" in weights))
             if not given]
    if fresh:  # trained with LoRA adapters, as a new head is (`kformer.models.lora`)
        model.new_layers = tuple(fresh)
    return model


def backbone_arguments(config):
    """`config.json` -> `BertBackbone` arguments; a ValueError naming any field kformer computes otherwise.

    Args:
        config: `config.json` as a dict.

    Example:

    >>> args = backbone_arguments({"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
    ...                            "num_attention_heads": 2, "intermediate_size": 64,
    ...                            "max_position_embeddings": 64, "type_vocab_size": 2})
    >>> args["hidden_dim"], args["sequence_length"], args["layer_norm_epsilon"]
    (32, 64, 1e-12)
    >>> backbone_arguments({"hidden_act": "relu"})
    Traceback (most recent call last):
    ...
    ValueError: config.json: `hidden_act`='relu' cannot be represented exactly by kformer ...
    """
    for name, default, allowed in (("hidden_act", "gelu", set(HIDDEN_ACT)),
                                   ("position_embedding_type", "absolute", {"absolute", None}),
                                   ("is_decoder", False, {False, None}), ("add_cross_attention", False, {False, None})):
        field(config, name, default, allowed=allowed)
    args = {"activation": HIDDEN_ACT[config.get("hidden_act", "gelu")]}
    for name, key in (("vocab_size", "vocabulary_size"), ("hidden_size", "hidden_dim"),
                      ("num_hidden_layers", "num_layers"), ("num_attention_heads", "num_heads"),
                      ("intermediate_size", "intermediate_dim"), ("max_position_embeddings", "sequence_length"),
                      ("type_vocab_size", "num_segments")):
        value = config.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"config.json: `{name}`={value!r} must be a positive int.")
        args[key] = value
    if args["hidden_dim"] % args["num_heads"]:
        raise ValueError(f"config.json: `hidden_size`={args['hidden_dim']} is not divisible by "
                         f"`num_attention_heads`={args['num_heads']}.")
    for name, key, default in (("hidden_dropout_prob", "dropout", 0.1),
                               ("attention_probs_dropout_prob", "attention_dropout", 0.1),
                               ("layer_norm_eps", "layer_norm_epsilon", 1e-12)):
        value = config.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1 or (
                key == "layer_norm_epsilon" and value <= 0):
            raise ValueError(f"config.json: `{name}`={value!r} is out of range.")
        args[key] = float(value)
    return args


def load_tokenizer(folder, config):
    """The checkpoint's tokenizer as a kformer `WordPieceTokenizer` with the checkpoint's ids.

    Read from `tokenizer.json` (what Hugging Face loads first) or else `vocab.txt` with
    `tokenizer_config.json` (`do_lower_case`, default True). A tokenizer kformer would split
    differently (another normalizer, prefix, special tokens) is a ValueError naming the file.

    Args:
        folder: the checkpoint folder.
        config: its `config.json` as a dict (`vocab_size` must equal the vocabulary's size).

    Example:

        tokenizer = load_tokenizer(folder, read_config(folder))
        tokenizer.token_to_id("[CLS]")  # 101 for Google's BERT vocabularies
    """
    from kformer.data.wordpiece import BERT_SPECIAL_TOKENS, WordPieceTokenizer

    folder = pathlib.Path(folder)
    if (folder / "tokenizer.json").is_file():
        path = folder / "tokenizer.json"
        vocabulary, lowercase = _read_tokenizer_json(path)
    elif (folder / "vocab.txt").is_file():
        path = folder / "vocab.txt"
        try:
            vocabulary = path.read_text(encoding="utf-8").split("\n")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path} is not UTF-8 text ({err}).") from None
        if vocabulary and vocabulary[-1] == "":
            vocabulary.pop()
        settings = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
        lowercase = field(settings, "do_lower_case", True, allowed={True, False}, file="tokenizer_config.json")
        field(settings, "strip_accents", None, allowed={None, lowercase}, file="tokenizer_config.json")
        field(settings, "tokenize_chinese_chars", True, allowed={True}, file="tokenizer_config.json")
        for name, token in (("unk_token", "[UNK]"), ("cls_token", "[CLS]"), ("sep_token", "[SEP]"),
                            ("pad_token", "[PAD]"), ("mask_token", "[MASK]")):
            value = settings.get(name, token)
            value = value.get("content") if isinstance(value, dict) else value
            field({name: value}, name, allowed={token}, file="tokenizer_config.json")
    else:
        raise ValueError(f"{folder} holds neither tokenizer.json nor vocab.txt: no tokenizer to load.")
    if len(vocabulary) != config.get("vocab_size"):
        raise ValueError(f"{path} holds {len(vocabulary)} tokens, but config.json's `vocab_size` is "
                         f"{config.get('vocab_size')!r}: the tokenizer and the weights do not match.")
    if vocabulary[0] != "[PAD]":
        raise ValueError(f"{path}: token 0 is {vocabulary[0]!r}; kformer pads with id 0, which must be '[PAD]'.")
    try:
        return WordPieceTokenizer(vocabulary, special_tokens=BERT_SPECIAL_TOKENS,
                                  normalizer="bert_uncased" if lowercase else "bert_cased")
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def load_preprocessor(folder, config, sequence_length=None, mask_positions=False):
    """A `BertPreprocessor` over `load_tokenizer`, `sequence_length` at most `max_position_embeddings`.

    Args:
        folder: the checkpoint folder.
        config: its `config.json` as a dict.
        sequence_length: int or None (`max_position_embeddings`).
        mask_positions: bool. For fill-mask. Defaults to `False`.

    Example:

        preprocessor = load_preprocessor(folder, read_config(folder), sequence_length=128)
        preprocessor.encode(["A fine film."])["token_ids"]
    """
    from kformer.data.preprocessors import BertPreprocessor

    limit = config.get("max_position_embeddings")
    if sequence_length is None:
        sequence_length = limit
    if not isinstance(sequence_length, int) or isinstance(sequence_length, bool) or not 2 <= sequence_length <= limit:
        raise ValueError(f"`sequence_length` must be an int in [2, {limit}] (config.json's "
                         f"`max_position_embeddings`). Received: sequence_length={sequence_length!r}")
    return BertPreprocessor(load_tokenizer(folder, config), sequence_length, mask_positions=mask_positions)


def _read_tokenizer_json(path):
    """`tokenizer.json` -> (vocabulary list, lowercase), refusing anything but BERT's WordPiece pipeline."""
    from kformer.data.wordpiece import BERT_SPECIAL_TOKENS

    data = read_json(path)
    name = path.name
    normalizer = data.get("normalizer") or {}
    field(normalizer, "type", allowed={"BertNormalizer"}, file=f"{name} normalizer")
    field(normalizer, "clean_text", True, allowed={True}, file=f"{name} normalizer")
    field(normalizer, "handle_chinese_chars", True, allowed={True}, file=f"{name} normalizer")
    lowercase = field(normalizer, "lowercase", True, allowed={True, False}, file=f"{name} normalizer")
    field(normalizer, "strip_accents", None, allowed={None, lowercase}, file=f"{name} normalizer")
    field(data.get("pre_tokenizer") or {}, "type", allowed={"BertPreTokenizer"}, file=f"{name} pre_tokenizer")
    model = data.get("model") or {}
    field(model, "type", allowed={"WordPiece"}, file=f"{name} model")
    field(model, "unk_token", allowed={"[UNK]"}, file=f"{name} model")
    field(model, "continuing_subword_prefix", "##", allowed={"##"}, file=f"{name} model")
    field(model, "max_input_chars_per_word", 100, allowed={100}, file=f"{name} model")
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError(f"{path}: `model.vocab` must map tokens to the ids 0 ... n-1.")
    vocabulary = [None] * len(vocab)
    for token, index in vocab.items():
        vocabulary[index] = token
    for added in data.get("added_tokens") or []:
        content = added.get("content")
        if content not in BERT_SPECIAL_TOKENS or vocab.get(content) != added.get("id") or any(
                added.get(flag) for flag in ("single_word", "lstrip", "rstrip", "normalized")):
            raise ValueError(f"{path}: `added_tokens` entry {added!r} cannot be represented exactly by kformer "
                             f"(supported: {list(BERT_SPECIAL_TOKENS)} at their vocabulary ids, matched as "
                             "written).")
    return vocabulary, lowercase


def _modern_name(name):
    """Older checkpoints name LayerNorm parameters gamma / beta."""
    if ".LayerNorm." in name or name.startswith("LayerNorm."):
        return name[:-len("gamma")] + "weight" if name.endswith(".gamma") else (
            name[:-len("beta")] + "bias" if name.endswith(".beta") else name)
    return name


def _prefix(weights, folder, file):
    if "bert.embeddings.word_embeddings.weight" in weights:
        return "bert."
    if "embeddings.word_embeddings.weight" in weights:
        return ""
    raise ValueError(f"{folder / file} has neither `bert.embeddings.word_embeddings.weight` nor "
                     "`embeddings.word_embeddings.weight`: not a BERT checkpoint.")


def _checkpoint_task(config, weights, prefix):
    architectures = config.get("architectures") or []
    if architectures:
        task = ARCHITECTURES.get(architectures[0])
        if task is None:
            raise ValueError(f"config.json: `architectures`={architectures!r} is not a head kformer loads "
                             f"(supported: {sorted(ARCHITECTURES)}); pass task='backbone' for its encoder.")
        return task
    if "cls.predictions.transform.dense.weight" in weights:
        return "fill_mask"
    if "classifier.weight" in weights and f"{prefix}pooler.dense.weight" in weights:
        return "text_classification"
    return "backbone"


def _classes(folder, config, weights, num_classes, has_classifier, file):
    field(config, "problem_type", None, allowed={None, "single_label_classification"})
    id2label = config.get("id2label")
    if has_classifier:
        rows = int(weights["classifier.weight"].shape[0])
        if num_classes is not None and num_classes != rows:
            raise ValueError(f"`num_classes`={num_classes!r}, but {file}'s `classifier.weight` has {rows} classes; "
                             "pass num_classes=None to keep the checkpoint's head.")
        if rows < 2:
            raise ValueError(f"{file}: `classifier.weight` has {rows} class(es); kformer's BertTextClassifier "
                             "needs >= 2 (single-label classification).")
        names = None
        if isinstance(id2label, dict) and id2label:
            if sorted(str(k) for k in id2label) != sorted(str(i) for i in range(rows)):
                raise ValueError(f"config.json: `id2label` has keys {sorted(id2label)}, but `classifier.weight` "
                                 f"has {rows} classes.")
            names = [str(id2label[str(i)] if str(i) in id2label else id2label[i]) for i in range(rows)]
            names = None if len(set(names)) != rows else names
        return rows, names
    if num_classes is None:
        raise ValueError(f"{folder} has no classifier head (`classifier.weight`): task='text_classification' "
                         "needs `num_classes` for a new, randomly initialized head. Received: num_classes=None")
    return num_classes, None


def backbone_table(backbone, prefix="", pooler=True):
    """The `Entry` table of a `BertBackbone`: Hugging Face `BertModel` names under `prefix`."""
    hidden, heads = backbone.hidden_dim, backbone.num_heads
    inner = backbone.intermediate_dim
    e = f"{prefix}embeddings."
    table = [
        Entry(f"{e}word_embeddings.weight", backbone.token_embedding.token_embedding.embeddings,
              (backbone.vocabulary_size, hidden)),
        Entry(f"{e}position_embeddings.weight", backbone.token_embedding.position_embedding.position_embeddings,
              (backbone.sequence_length, hidden)),
        Entry(f"{e}token_type_embeddings.weight", backbone.segment_embedding.embeddings,
              (backbone.num_segments, hidden)),
    ] + norm(backbone.embeddings_norm, f"{e}LayerNorm", hidden)
    for i, block in enumerate(backbone.encoder_blocks):
        b = f"{prefix}encoder.layer.{i}."
        attention = block.self_attention
        for part, dense in (("query", attention.query_dense), ("key", attention.key_dense),
                            ("value", attention.value_dense)):  # kernel (hidden, heads, head_dim)
            table += linear(dense, f"{b}attention.self.{part}", hidden, hidden)
        # the output kernel is (heads, head_dim, hidden)
        table += linear(attention.output_dense, f"{b}attention.output.dense", hidden, hidden)
        table += norm(block.self_attention_norm, f"{b}attention.output.LayerNorm", hidden)
        table += linear(block.feed_forward.inner, f"{b}intermediate.dense", hidden, inner)
        table += linear(block.feed_forward.outer, f"{b}output.dense", inner, hidden)
        table += norm(block.feed_forward_norm, f"{b}output.LayerNorm", hidden)
    if pooler:
        table += linear(backbone.pooler, f"{prefix}pooler.dense", hidden, hidden)
    return table


def mlm_table(model, nsp=True):
    """The `Entry` table of a `BertPretrainer`'s heads (`cls.*`; the decoder is tied to the token table)."""
    hidden, vocab = model.backbone.hidden_dim, model.backbone.vocabulary_size
    p = "cls.predictions."
    table = linear(model.mlm_transform, f"{p}transform.dense", hidden, hidden)
    table += norm(model.mlm_norm, f"{p}transform.LayerNorm", hidden)
    table.append(Entry(f"{p}bias", model.mlm_bias.bias, (vocab,)))
    if nsp:
        table += linear(model.nsp_head, "cls.seq_relationship", hidden, 2)
    return table


def _check_unused(weights, prefix, file):
    """A backbone tensor this loader does not place (e.g. cross-attention) means another computation."""
    used = {f"{prefix}{name}" for name in _IGNORED}
    names = [k for k in weights if k.startswith(f"{prefix}embeddings.") or k.startswith(f"{prefix}encoder.")
             or k.startswith(f"{prefix}pooler.")]
    expected = {f"{prefix}embeddings.{n}" for n in ("word_embeddings.weight", "position_embeddings.weight",
                                                     "token_type_embeddings.weight", "LayerNorm.weight",
                                                     "LayerNorm.bias")}
    expected |= {f"{prefix}pooler.dense.weight", f"{prefix}pooler.dense.bias"}
    layer = f"{prefix}encoder.layer."
    parts = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
             "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")
    for name in names:
        if name in used or name in expected:
            continue
        rest = name[len(layer):] if name.startswith(layer) else None
        index, _, tail = (rest or "").partition(".")
        if rest is not None and index.isdigit() and any(tail in (f"{p}.weight", f"{p}.bias") for p in parts):
            continue
        raise ValueError(f"{file} holds {name!r}, which kformer's BERT has no place for (another architecture or "
                         "option): the checkpoint was not loaded.")


def _check_mlm(weights, prefix, file):
    p = "cls.predictions."
    bias = take(weights, f"{p}bias", (weights[f"{prefix}embeddings.word_embeddings.weight"].shape[0],), file)
    decoder = weights.get(f"{p}decoder.weight")
    if decoder is not None and not np.array_equal(decoder, weights[f"{prefix}embeddings.word_embeddings.weight"]):
        raise ValueError(f"{file}: `{p}decoder.weight` differs from the word embeddings (an untied decoder); "
                         "kformer's BertPretrainer ties them, so the checkpoint was not loaded.")
    if f"{p}decoder.bias" in weights and not np.array_equal(weights[f"{p}decoder.bias"], bias):
        raise ValueError(f"{file}: `{p}decoder.bias` differs from `{p}bias`; kformer has one output bias.")


def save(task, folder, overwrite=False):
    """Write a `BertBackbone`, `BertPretrainer` or `BertTextClassifier` as a Hugging Face BERT folder.

    `config.json` (`BertModel`, `BertForPreTraining` or `BertForSequenceClassification`, with
    `id2label` / `label2id` for a classifier), `model.safetensors` (the masked-LM decoder tied to
    the token table, as transformers saves it) and, for a task with a `BertPreprocessor`,
    `vocab.txt` + `tokenizer_config.json`. A tokenizer transformers' `BertTokenizer` would split
    differently (kformer's own `"kformer"` normalizer, other special tokens, `[PAD]` not id 0,
    `head_tail` truncation) is a ValueError naming the attribute, raised before anything is written.

    Args:
        task: the kformer model.
        folder: the folder to write (atomically).
        overwrite: bool. Replace a non-empty `folder`. Defaults to `False`.

    Returns:
        `pathlib.Path(folder)`.
    """
    from kformer.models.bert import BertBackbone, BertPretrainer, BertTextClassifier
    from kformer.models.pretrained.common import to_hf, write_folder, write_json

    if isinstance(task, BertBackbone):
        backbone, architecture, prefix = task, "BertModel", ""
    elif isinstance(task, (BertPretrainer, BertTextClassifier)):
        backbone, prefix = task.backbone, "bert."
        architecture = "BertForPreTraining" if isinstance(task, BertPretrainer) else "BertForSequenceClassification"
    else:
        raise ValueError(f"Not a BERT task: {type(task).__name__}")
    config = {"model_type": "bert", "architectures": [architecture], "vocab_size": backbone.vocabulary_size,
              "hidden_size": backbone.hidden_dim, "num_hidden_layers": backbone.num_layers,
              "num_attention_heads": backbone.num_heads, "intermediate_size": backbone.intermediate_dim,
              "max_position_embeddings": backbone.sequence_length, "type_vocab_size": backbone.num_segments,
              "hidden_act": {v: k for k, v in HIDDEN_ACT.items()}[backbone.activation],
              "hidden_dropout_prob": float(backbone.dropout),
              "attention_probs_dropout_prob": float(backbone.attention_dropout),
              "layer_norm_eps": float(backbone.layer_norm_epsilon), "position_embedding_type": "absolute",
              "is_decoder": False, "add_cross_attention": False, "pad_token_id": 0, "tie_word_embeddings": True,
              "initializer_range": 0.02, "dtype": "float32"}
    if isinstance(task, BertTextClassifier):
        names = list(task.class_names) if task.class_names else [f"LABEL_{i}" for i in range(task.num_classes)]
        config.update(classifier_dropout=float(task.dropout), problem_type="single_label_classification",
                      id2label={str(i): name for i, name in enumerate(names)},
                      label2id={name: i for i, name in enumerate(names)})
    files = tokenizer_files(task, getattr(task, "preprocessor", None))  # refusals first: nothing written yet
    files.update({"config.json": write_json(config), "model.safetensors": to_hf(table(task))})
    return write_folder(folder, files, overwrite)


def table(task):
    """The `Entry` table of a `BertBackbone`, `BertPretrainer` or `BertTextClassifier` (`save`'s names)."""
    from kformer.models.bert import BertBackbone, BertPretrainer

    if isinstance(task, BertBackbone):
        return backbone_table(task)
    table = backbone_table(task.backbone, "bert.")
    if isinstance(task, BertPretrainer):
        return table + mlm_table(task)
    return table + linear(task.head, "classifier", task.backbone.hidden_dim, task.num_classes)


def tokenizer_files(task, preprocessor):
    """`vocab.txt` + `tokenizer_config.json` for a `BertPreprocessor` (none without a preprocessor)."""
    from kformer.data.wordpiece import BERT_SPECIAL_TOKENS
    from kformer.models.pretrained.common import refuse, write_json

    if preprocessor is None:
        return {}
    tokenizer = preprocessor.tokenizer
    if tokenizer.normalizer == "kformer":
        raise refuse(task, "preprocessor.tokenizer.normalizer", "kformer", "transformers' BertTokenizer "
                     "normalizes and splits text differently; use normalizer='bert_uncased' or 'bert_cased'")
    if set(tokenizer.special_tokens) != set(BERT_SPECIAL_TOKENS):
        raise refuse(task, "preprocessor.tokenizer.special_tokens", list(tokenizer.special_tokens),
                     f"transformers' BertTokenizer keeps exactly {list(BERT_SPECIAL_TOKENS)} whole")
    vocabulary = list(tokenizer.vocabulary)
    if vocabulary[0] != "[PAD]" or any("\n" in token or "\r" in token for token in vocabulary):
        raise refuse(task, "preprocessor.tokenizer.vocabulary", vocabulary[:3],
                     "vocab.txt needs '[PAD]' at id 0 and no line breaks inside tokens")
    sides = {"head": "right", "tail": "left"}
    if preprocessor.truncation not in sides:
        raise refuse(task, "preprocessor.truncation", preprocessor.truncation,
                     "transformers truncates one side only ('head' or 'tail')")
    lowercase = tokenizer.normalizer == "bert_uncased"
    settings = {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase, "strip_accents": None,
                "tokenize_chinese_chars": True, "model_max_length": preprocessor.sequence_length,
                "truncation_side": sides[preprocessor.truncation], "padding_side": "right", "unk_token": "[UNK]",
                "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]"}
    return {"vocab.txt": ("\n".join(vocabulary) + "\n").encode("utf-8"), "tokenizer_config.json": write_json(settings)}
