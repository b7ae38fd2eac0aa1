"""The decoding settings of a SavedModel export: a `GenerationConfig`, checked against the task."""

import warnings

import numpy as np

from kformer.generation.config import GenerationConfig
from kformer.generation.samplers import BeamSampler, TopPSampler

EXPORT_LEGACY = ("max_length", "num_beams", "top_p", "temperature", "no_repeat_ngram_size", "max_length_ratio",
                 "max_length_offset", "max_word_pieces")


def check_export_options(task, preprocessor, generation=None, legacy=None, *, xla=False):
    """Validate a SavedModel export's decoding settings -> the options the signatures read.

    Args:
        task: the exported task (its `task_type`, `generation_config`,
            `decoding_limits()`).
        preprocessor: the preprocessor the export uses.
        generation: a `GenerationConfig` or None (`task.generation_config`);
            only translation and text generation decode.
        legacy: dict of 0.2's decoding keywords (`max_length`, `num_beams`,
            `top_p`, `temperature`, `no_repeat_ngram_size`,
            `max_length_ratio`, `max_length_offset`, `max_word_pieces`),
            applied to `generation` with a DeprecationWarning.
        xla: bool. Translation: also write `translate_xla`.

    Returns:
        dict: `generation` (the config's `to_dict()`), `max_length` (its
        resolved length), `xla` (when true); `{}` for a task that does not decode.

    Example:

    >>> from kformer import models
    >>> check_export_options(models.vit(preset="vit_tiny"), None)
    {}
    """
    task_type = task.task_type
    legacy = dict(legacy or {})
    unknown = sorted(set(legacy) - set(EXPORT_LEGACY))
    if unknown:
        raise TypeError(f"save_for_serving() got an unexpected keyword argument {unknown[0]!r}")
    if not isinstance(xla, bool) or (xla and task_type != "translation"):
        raise ValueError(f"`xla` must be a bool, and True only for translation (the `translate_xla` signature). "
                         f"Received: xla={xla!r} for a {task_type} task")
    if task_type not in ("translation", "text_generation", "speech_to_text"):
        given = {**legacy, **({"generation": generation} if generation is not None else {})}
        if given:
            name = sorted(given)[0]
            raise ValueError(f"`{name}` is for translation, text generation and speech to text. Received: "
                             f"{name}={given[name]!r} "
                             f"for a {task_type} task")
        return {}
    config = task.generation_config if generation is None else generation
    if not isinstance(config, GenerationConfig):
        raise ValueError(f"`generation` must be a `kformer.generation.GenerationConfig` or None. Received: "
                         f"generation={generation!r}")
    if legacy:
        warnings.warn(f"save_for_serving's {sorted(legacy)} are deprecated (removed in 0.3): pass "
                      "`generation=task.generation_config.replace(...)`.", DeprecationWarning, stacklevel=4)
        config = _apply_export_legacy(config, legacy, task_type)
    if config.max_length is None and config.max_new_tokens is None:
        config = config.replace(max_length=preprocessor.sequence_length)
    limit = task.decoding_limits()["position_limit"]
    if task_type == "text_generation" and config.max_length is not None and (
            config.max_length < 2 or (limit and config.max_length > limit)):
        raise ValueError(f"`max_length` must be an int in [2, {limit or 'inf'}] (prompt included). "
                         f"Received: max_length={config.max_length}")
    config.resolve(task.decoding_family, np.ones((1, 1), "int32"), **task.decoding_limits())  # names a bad setting
    options = {"generation": config.to_dict(), "max_length": config.max_length or config.max_new_tokens}
    if xla:
        options["xla"] = True
    return options


def _apply_export_legacy(config, legacy, task_type):
    """`config` with 0.2's export keywords applied (their old meanings and defaults)."""
    changes = {}
    if legacy.get("max_length") is not None:
        changes["max_length"] = legacy["max_length"]
    if "num_beams" in legacy:
        if task_type != "translation":
            raise ValueError(f"`num_beams` is for translation. Received: num_beams={legacy['num_beams']!r}")
        penalty = config.sampler.length_penalty if isinstance(config.sampler, BeamSampler) else 0.6
        changes["sampler"] = BeamSampler(num_beams=legacy["num_beams"], length_penalty=penalty)
    if "top_p" in legacy or "temperature" in legacy:
        if task_type != "text_generation":
            name = "top_p" if "top_p" in legacy else "temperature"
            raise ValueError(f"`{name}` is for text generation. Received: {name}={legacy[name]!r}")
        top_p, temperature = legacy.get("top_p", 0.9), legacy.get("temperature", 1.0)
        if not isinstance(top_p, (int, float)) or isinstance(top_p, bool) or not 0 < top_p <= 1:
            raise ValueError(f"`top_p` must be a float in (0, 1]. Received: top_p={top_p!r}")
        if not isinstance(temperature, (int, float)) or not 0 < temperature < float("inf"):
            raise ValueError(f"`temperature` must be a finite float > 0. Received: temperature={temperature!r}")
        changes["sampler"] = TopPSampler(p=top_p, temperature=temperature)
    if legacy.get("no_repeat_ngram_size") is not None:
        changes["no_repeat_ngram_size"] = legacy["no_repeat_ngram_size"]
    for name in ("max_length_ratio", "max_length_offset", "max_word_pieces"):
        if name in legacy:
            changes[name] = legacy[name]
    return config.replace(**changes)
