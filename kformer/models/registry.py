"""Named model presets: `build(name, **overrides)`, `list_models()`, `preset=`.

A builder is a function returning a task model; `@builder` gives it a
`preset="..."` argument and `@register(name, **kwargs)` adds a named preset
of it. Overrides replace the preset's values, also when spelled differently:
`expand` lets separate arguments replace a preset's shared one (a preset's
`vocabulary_size` yields to `encoder_vocabulary_size`), and `aliases` accepts
renamed arguments (with a DeprecationWarning), and `sizes` reads vocabulary
sizes from a `preprocessor=` argument unless the caller passes them. `get_preset(name)` is the
resolved keyword arguments a recipe saves beside the model.

Builders renamed in 0.2 (`RENAMED`) keep their old names for one release:
calling one warns, and `presets_of` still takes the old name.
"""

import functools
import warnings

_REGISTRY = {}
# Builders renamed in 0.2 (named after a data set or a size before): old name -> new name, until 0.3.
RENAMED = {"imdb_classifier": "text_classifier", "mini_bert": "bert", "mini_bert_pretraining": "bert_pretrainer",
           "mini_bert_classifier": "bert_text_classifier"}


def builder(fn=None, *, expand=None, aliases=None, sizes=None):
    """Decorator: `fn(preset=None, **kwargs)` fills unset kwargs from the preset.

    Args:
        fn: the builder function (when used without arguments).
        expand: dict `shared_name -> (separate names)`: when a caller passes a
            separate name, the preset's shared value fills the other separate
            names instead of conflicting with them.
        aliases: dict `old_name -> new_name` of renamed arguments.
        sizes: function `preprocessor -> dict` of arguments (vocabulary
            sizes) read from a `preprocessor=` argument; used only when the
            caller passes none of them.

    Example:

    >>> @builder(aliases={"size": "side"})
    ... def square(side=1, name=None):
    ...     return side * side
    >>> square(side=3), square(size=4)  # `size` is the old name (a DeprecationWarning)
    (9, 16)
    >>> from kformer.models import translator  # a preset's shared vocabulary fills the side not given
    >>> translator(preset="transformer_tiny", encoder_vocabulary_size=50).decoder_embedding.vocabulary_size
    8000
    """
    expand, aliases = dict(expand or {}), dict(aliases or {})

    def wrap(fn):
        @functools.wraps(fn)
        def build_with_preset(preset=None, **kwargs):
            kwargs = _rename(fn.__name__, kwargs, aliases)
            if sizes is not None and kwargs.get("preprocessor") is not None:
                try:
                    derived = sizes(kwargs["preprocessor"])
                except AttributeError:  # not a preprocessor: the task's own check says so
                    derived = {}
                kwargs = _sizes_from_preprocessor(kwargs, derived, expand)
            if preset is not None:
                preset_fn, preset_kwargs = _lookup(preset)
                if preset_fn is not build_with_preset:
                    raise ValueError(
                        f"Preset {preset!r} belongs to `{preset_fn.__name__}`, not `{fn.__name__}`. "
                        f"Received: preset={preset!r}; presets of `{fn.__name__}`: "
                        f"{', '.join(presets_of(build_with_preset))}")
                kwargs = {**_expand(preset_kwargs, kwargs, expand), "name": preset, **kwargs}
            return fn(**kwargs)

        build_with_preset.aliases = aliases
        return build_with_preset

    return wrap(fn) if fn is not None else wrap


def deprecated_alias(old_name, fn):
    """`fn` under its old name: calling it warns (DeprecationWarning naming the new name), then calls `fn`.

    Args:
        old_name: str. The name `fn` had before it was renamed.
        fn: the function under its new name.

    Example:

    >>> import warnings
    >>> from kformer.models import text_classifier
    >>> old = deprecated_alias("imdb_classifier", text_classifier)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     model = old(preset="imdb_tiny", vocabulary_size=100, sequence_length=8)
    >>> type(model).__name__, str(caught[0].message)
    ('TextClassifier', '`kformer.models.imdb_classifier` is renamed `kformer.models.text_classifier`.')
    """
    @functools.wraps(fn)
    def renamed(*args, **kwargs):
        warnings.warn(f"`kformer.models.{old_name}` is renamed `kformer.models.{fn.__name__}`.",
                      DeprecationWarning, stacklevel=2)
        return fn(*args, **kwargs)

    renamed.__name__ = renamed.__qualname__ = old_name
    renamed.__doc__ = f"Deprecated: the old name of `{fn.__name__}` (renamed in 0.2, removed in 0.3)."
    return renamed


def _rename(builder_name, kwargs, aliases):
    for old, new in aliases.items():
        if old in kwargs:
            if new in kwargs:
                raise ValueError(f"`{old}` is the old name of `{new}`: pass only `{new}`. Received: "
                                 f"{old}={kwargs[old]!r}, {new}={kwargs[new]!r}")
            warnings.warn(f"`{builder_name}({old}=...)` is renamed `{new}`.", DeprecationWarning, stacklevel=3)
            kwargs = {**kwargs, new: kwargs[old]}
            del kwargs[old]
    return kwargs


def _sizes_from_preprocessor(kwargs, derived, expand):
    """Add the preprocessor's sizes unless the caller passed any of them (or their shared form)."""
    related = set(derived)
    for shared, separate in expand.items():
        if related & ({shared} | set(separate)):
            related |= {shared} | set(separate)
    return kwargs if related & set(kwargs) else {**kwargs, **derived}


def _expand(preset_kwargs, kwargs, expand):
    preset_kwargs = dict(preset_kwargs)
    for shared, separate in expand.items():
        if shared in preset_kwargs and shared not in kwargs and any(s in kwargs for s in separate):
            value = preset_kwargs.pop(shared)
            for name in separate:
                preset_kwargs.setdefault(name, value)
    return preset_kwargs


def register(name, **preset):
    """Decorator: register the builder under `name` with default kwargs `preset`.

    Args:
        name: str. The preset name (`<task>_<size>`); must be new.
        **preset: the builder's keyword arguments for this preset.

    Example:

    >>> register("transformer_tiny", hidden_dim=8)(lambda **kwargs: None)
    Traceback (most recent call last):
    ...
    ValueError: A model named 'transformer_tiny' is already registered.
    """

    def wrap(fn):
        if name in _REGISTRY:
            raise ValueError(f"A model named {name!r} is already registered.")
        _REGISTRY[name] = (fn, dict(preset))
        return fn

    return wrap


def list_models():
    """Sorted names of every registered preset.

    Example:

    >>> "transformer_tiny" in list_models()
    True
    """
    return sorted(_REGISTRY)


def presets_of(fn):
    """Names of the presets registered for builder `fn` (a function or its name, old names too)."""
    fn = RENAMED.get(fn, fn) if isinstance(fn, str) else fn
    return sorted(name for name, (f, _) in _REGISTRY.items() if fn in (f, f.__name__))


def get_preset(name):
    """The keyword arguments of preset `name` (a copy), with its builder's name.

    Args:
        name: str. A registered preset.

    Example:

    >>> get_preset("transformer_base")["hidden_dim"]
    512
    """
    fn, preset = _lookup(name)
    return {"builder": fn.__name__, **preset}


def build(name, **overrides):
    """Build preset `name`, with `overrides` replacing its keyword arguments.

    Args:
        name: str. A registered preset (`list_models()`).
        **overrides: the builder's keyword arguments, replacing the preset's.

    Example:

    >>> model = build("imdb_tiny", vocabulary_size=100, sequence_length=16)
    >>> type(model).__name__, model.name
    ('TextClassifier', 'imdb_tiny')
    """
    fn, _ = _lookup(name)
    return fn(preset=name, **overrides)


def _lookup(name):
    if name not in _REGISTRY:
        known = ", ".join(list_models()) or "none registered"
        raise ValueError(f"Unknown model preset. Received: name={name!r}; known presets: {known}")
    return _REGISTRY[name]
