"""`from_pretrained`: published checkpoints (Hugging Face layout, keras-hub presets) as kformer tasks,
exact to the reference.

A folder holding `config.json`, `model.safetensors` (or sharded safetensors with their index)
and the tokenizer files, or an `hf://org/name` handle downloaded once into a cache folder
(`kformer.models.pretrained.common.cache_dir`). The family is `config.json`'s `model_type`.
A keras-hub preset folder (`config.json` with `class_name`, `model.weights.h5`, `assets/`), or a
`kaggle://owner/model/framework/variation[/version]` handle, is read by
`kformer.models.pretrained.keras_hub` (BERT, GPT-2 and ViT).

`save` (a task's `save_pretrained`) writes the same layout back, so a model trained in kformer
opens in `transformers`; each family module keeps one table of (Hugging Face tensor, kformer
variable, transform) that serves both directions.
"""

import os

from kformer.models import task as task_module
from kformer.models.pretrained.common import read_config, resolve

FAMILIES = ("bert", "gpt2", "gpt_neo", "marian", "vit", "whisper")


def from_pretrained(source, task=None, adapter=None, **kwargs):
    """Load a published checkpoint as a kformer task with its preprocessor.

    Args:
        source: a local checkpoint folder (Hugging Face layout or a keras-hub preset), an
            `hf://org/name` handle or a `kaggle://owner/model/framework/variation[/version]` handle.
        task: which head, where the checkpoint allows several (BERT: "backbone", "fill_mask",
            "text_classification"); None picks the checkpoint's own.
        adapter: a peft LoRA adapter folder (`adapter_config.json`, `adapter_model.safetensors`) trained
            on this checkpoint, applied to the loaded task (`kformer.models.pretrained.peft`): its
            outputs then equal the peft model's, and only the adapters and a classifier's head train.
            Defaults to None.
        **kwargs: the family's options: BERT `num_classes` (a new classification head) and
            `sequence_length` (the preprocessor's, at most the checkpoint's positions); ViT
            `num_classes` (a new head when it differs; required for a keras-hub `ViTBackbone`
            preset without a classifier task) and `class_names`; Marian `target_language` (a
            multilingual checkpoint's `">>spa<<"`) and `sequence_length`.

    Returns:
        The kformer task, its weights equal to the checkpoint's.

    Example:

    >>> bert = from_pretrained("hf://google-bert/bert-base-uncased")  # doctest: +SKIP
    >>> bert.fill_mask("The movie was [MASK].")  # doctest: +SKIP
    >>> vit = from_pretrained("kaggle://keras/vit/keras/vit_base_patch16_224_imagenet", num_classes=10)  # doctest: +SKIP
    >>> from_pretrained("/no/such/checkpoint")
    Traceback (most recent call last):
    ...
    ValueError: `source` must be a checkpoint folder (config.json and weights). Received: source='/no/such/checkpoint' (does not exist)
    """
    if adapter is not None and (not isinstance(adapter, (str, os.PathLike)) or not os.fspath(adapter)):
        raise ValueError(f"`adapter` must be the path of a peft adapter folder. Received: adapter={adapter!r}")
    model = _load(source, task, **kwargs)
    if adapter is not None:
        from kformer.models.pretrained import peft

        peft.load_adapter(model, resolve(adapter), family_of(model))  # a folder, or an `hf://` repository
    return model


def _load(source, task, **kwargs):
    folder = resolve(source)
    config = read_config(folder)
    from kformer.models.pretrained import keras_hub

    if keras_hub.is_preset(config):
        return keras_hub.load(folder, config, task=task, **kwargs)
    model_type = config.get("model_type")
    if model_type == "bert":
        from kformer.models.pretrained import bert as family
    elif model_type == "gpt2":
        from kformer.models.pretrained import gpt2 as family
    elif model_type == "gpt_neo":
        from kformer.models.pretrained import gpt_neo as family
    elif model_type == "vit":
        from kformer.models.pretrained import vit as family
    elif model_type == "marian":
        from kformer.models.pretrained import marian as family
    elif model_type == "whisper":
        from kformer.models.pretrained import whisper as family
    else:
        raise ValueError(f"{folder / 'config.json'}: `model_type`={model_type!r} is not a family kformer loads; "
                         f"expected one of {list(FAMILIES)}.")
    return family.load(folder, config, task=task, **kwargs)


def save(task, folder, overwrite=False, adapter_only=False):
    """Write a kformer task as a Hugging Face checkpoint folder that `transformers` opens.

    `config.json`, `model.safetensors` and the tokenizer (or image processor) files of the
    family: BERT (`BertBackbone`, `BertPretrainer`, `BertTextClassifier`), GPT-2 (`CausalLM`; GPT-Neo
    when it has no query, key and value biases, `use_qkv_bias=False`), ViT (`ViTImageClassifier`) or
    Marian (a `Translator` loaded from one, or built with its options) or Whisper (`SpeechToText`). The folder is written atomically (a temporary sibling folder, then
    a rename). A model the family cannot represent exactly is a ValueError naming the attribute,
    raised before anything is written.

    Args:
        task: the kformer model.
        folder: str or path. The folder to write; a non-empty one is refused unless `overwrite`.
        overwrite: bool. Replace a non-empty `folder`. Defaults to `False`.
        adapter_only: bool. Write the LoRA adapters (and a classifier's head) as a peft adapter
            folder (`adapter_config.json`, `adapter_model.safetensors`) that
            `peft.PeftModel.from_pretrained` reads, instead of the merged checkpoint. Defaults to `False`.

    Returns:
        `pathlib.Path(folder)`, which `from_pretrained` and transformers' `from_pretrained` read.

    Example:

        classifier.save_pretrained("exported/imdb_bert")
        transformers.BertForSequenceClassification.from_pretrained("exported/imdb_bert")
    """
    family = family_of(task)
    if not isinstance(overwrite, bool):
        raise ValueError(f"`overwrite` must be a bool. Received: overwrite={overwrite!r}")
    if adapter_only:
        from kformer.models.pretrained import peft

        return peft.save_adapter(task, folder, family, overwrite=overwrite)
    return family.save(task, folder, overwrite=overwrite)


def family_of(task):
    """The family module that writes `task`: its `save`, and `table(task)`, the tensor table `save` writes."""
    from kformer.models.bert import BertBackbone, BertPretrainer, BertTextClassifier
    from kformer.models.gpt import CausalLM
    from kformer.models.speech_to_text import SpeechToText
    from kformer.models.translator import Translator
    from kformer.models.vit import ViTImageClassifier

    if isinstance(task, (BertBackbone, BertPretrainer, BertTextClassifier)):
        from kformer.models.pretrained import bert as family
    elif isinstance(task, CausalLM) and not task.use_qkv_bias:  # GPT-Neo's attention
        from kformer.models.pretrained import gpt_neo as family
    elif isinstance(task, CausalLM):
        from kformer.models.pretrained import gpt2 as family
    elif isinstance(task, ViTImageClassifier):
        from kformer.models.pretrained import vit as family
    elif isinstance(task, Translator):
        from kformer.models.pretrained import marian as family
    elif isinstance(task, SpeechToText):
        from kformer.models.pretrained import whisper as family
    else:
        raise ValueError(f"{type(task).__name__} has no Hugging Face family kformer writes (supported: BertBackbone, "
                         "BertPretrainer, BertTextClassifier, CausalLM, SpeechToText (Whisper), Translator (Marian), "
                         "ViTImageClassifier); "
                         "nothing was written.")
    return family


task_module.PRETRAINED_WRITERS["huggingface"] = save  # `KformerModel.save_pretrained`
