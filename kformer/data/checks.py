"""Argument checks shared by the data loaders: errors name the argument and the value."""


def check_one_of(name, value, choices):
    """Raise a ValueError naming `name` unless `value` is one of `choices`.

    Args:
        name: str. The argument's name, for the message.
        value: the value received.
        choices: the allowed values.

    Example:

    >>> check_one_of("split", "dev", ("train", "test"))
    Traceback (most recent call last):
    ...
    ValueError: `split` must be one of ('train', 'test'). Received: split='dev'
    """
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {tuple(choices)}. Received: {name}={value!r}")


def check_max_examples(max_examples):
    """Raise a ValueError unless `max_examples` is None or an int >= 1.

    Args:
        max_examples: the value received.

    Example:

    >>> check_max_examples(0)
    Traceback (most recent call last):
    ...
    ValueError: `max_examples` must be an int >= 1. Received: max_examples=0
    """
    if max_examples is not None and (not isinstance(max_examples, int) or isinstance(max_examples, bool)
                                     or max_examples < 1):
        raise ValueError(f"`max_examples` must be an int >= 1. Received: max_examples={max_examples!r}")
