"""`from_pretrained`: published checkpoints (Hugging Face layout) as kformer tasks, exact to the reference.

A folder holding `config.json`, `model.safetensors` (or sharded safetensors with their index)
and the tokenizer files, or an `hf://org/name` handle downloaded once into a cache folder
(`kformer.models.pretrained.common.cache_dir`). The family is `config.json`'s `model_type`.
"""

from kformer.models.pretrained.common import read_config, resolve

FAMILIES = ("bert", "gpt2", "vit")


def from_pretrained(source, task=None, **kwargs):
    """Load a published checkpoint as a kformer task with its preprocessor.

    Args:
        source: a local checkpoint folder or an `hf://org/name` handle.
        task: which head, where the checkpoint allows several (BERT: "backbone", "fill_mask",
            "text_classification"); None picks the checkpoint's own.
        **kwargs: the family's options (BERT text classification: `num_classes`).

    Returns:
        The kformer task, its weights equal to the checkpoint's.

    Example:

    >>> bert = from_pretrained("hf://google-bert/bert-base-uncased")  # doctest: +SKIP
    >>> bert.fill_mask("The movie was [MASK].")  # doctest: +SKIP
    >>> from_pretrained("/no/such/checkpoint")
    Traceback (most recent call last):
    ...
    ValueError: `source` must be a checkpoint folder (config.json and weights). Received: source='/no/such/checkpoint' (does not exist)
    """
    folder = resolve(source)
    config = read_config(folder)
    model_type = config.get("model_type")
    if model_type == "bert":
        from kformer.models.pretrained import bert as family
    elif model_type == "gpt2":
        from kformer.models.pretrained import gpt2 as family
    elif model_type == "vit":
        from kformer.models.pretrained import vit as family
    else:
        raise ValueError(f"{folder / 'config.json'}: `model_type`={model_type!r} is not a family kformer loads; "
                         f"expected one of {list(FAMILIES)}.")
    return family.load(folder, config, task=task, **kwargs)
