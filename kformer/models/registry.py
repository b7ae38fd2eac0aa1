"""Named model presets: `build(name, **overrides)`, `list_models()`, `preset=`.

A builder is a function returning a functional `keras.Model`; `@builder`
gives it a `preset="..."` argument, and `@register(name, **kwargs)` adds a
named preset of it. `get_preset(name)` is the resolved keyword arguments a
recipe saves beside the model.
"""

import functools

_REGISTRY = {}


def builder(fn):
    """Decorator: `fn(preset=None, **kwargs)` fills unset kwargs from the preset."""

    @functools.wraps(fn)
    def build_with_preset(preset=None, **kwargs):
        if preset is not None:
            preset_fn, preset_kwargs = _lookup(preset)
            if preset_fn is not build_with_preset:
                raise ValueError(
                    f"Preset {preset!r} belongs to `{preset_fn.__name__}`, not `{fn.__name__}`. "
                    f"Received: preset={preset!r}; presets of `{fn.__name__}`: "
                    f"{', '.join(presets_of(build_with_preset))}"
                )
            kwargs = {**preset_kwargs, "name": preset, **kwargs}
        return fn(**kwargs)

    return build_with_preset


def register(name, **preset):
    """Decorator: register the builder under `name` with default kwargs `preset`."""

    def wrap(fn):
        if name in _REGISTRY:
            raise ValueError(f"A model named {name!r} is already registered.")
        _REGISTRY[name] = (fn, dict(preset))
        return fn

    return wrap


def list_models():
    """Sorted names of every registered preset."""
    return sorted(_REGISTRY)


def presets_of(fn):
    """Names of the presets registered for builder `fn`."""
    return sorted(name for name, (f, _) in _REGISTRY.items() if f is fn)


def get_preset(name):
    """The keyword arguments of preset `name` (a copy), with its builder's name."""
    fn, preset = _lookup(name)
    return {"builder": fn.__name__, **preset}


def build(name, **overrides):
    """Build preset `name`, with `overrides` replacing its keyword arguments."""
    fn, _ = _lookup(name)
    return fn(preset=name, **overrides)


def _lookup(name):
    if name not in _REGISTRY:
        known = ", ".join(list_models()) or "none registered"
        raise ValueError(f"Unknown model preset. Received: name={name!r}; known presets: {known}")
    return _REGISTRY[name]
