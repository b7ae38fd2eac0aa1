"""Named model presets: `build(name, **overrides)` and `list_models()`.

A builder is a function returning a functional `keras.Model`; `register` adds
it under a name with its preset keyword arguments. The builders themselves
(translator, classifiers, mini-BERT, ViT) register here as they land.
"""

_REGISTRY = {}


def register(name, **preset):
    """Decorator: register `fn` under `name` with default keyword arguments `preset`."""

    def wrap(fn):
        if name in _REGISTRY:
            raise ValueError(f"A model named {name!r} is already registered.")
        _REGISTRY[name] = (fn, dict(preset))
        return fn

    return wrap


def list_models():
    """Sorted names of every registered preset."""
    return sorted(_REGISTRY)


def get_preset(name):
    """The resolved keyword arguments of preset `name` (a copy)."""
    _check_name(name)
    return dict(_REGISTRY[name][1])


def build(name, **overrides):
    """Build preset `name`, with `overrides` replacing its keyword arguments."""
    _check_name(name)
    fn, preset = _REGISTRY[name]
    return fn(**{**preset, **overrides})


def _check_name(name):
    if name not in _REGISTRY:
        known = ", ".join(list_models()) or "none registered yet"
        raise ValueError(f"Unknown model preset. Received: name={name!r}; known presets: {known}")
