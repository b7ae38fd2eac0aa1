"""Argument checks shared by the data loaders: errors name the argument and the value."""


def check_one_of(name, value, choices):
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {tuple(choices)}. Received: {name}={value!r}")


def check_max_examples(max_examples):
    if max_examples is not None and max_examples < 1:
        raise ValueError(f"`max_examples` must be >= 1. Received: max_examples={max_examples}")
