"""Samplers: how the next token is chosen from a step's logits, as keras-hub's `Sampler` objects.

`GreedySampler`, `TopKSampler` and `TopPSampler` choose one token a row a
step (`next_tokens`); `BeamSampler` names the beam search, which
`kformer.generation.search` runs as a loop of its own. The same object
decodes in process and in an exported graph. A sampler of your own
subclasses `Sampler` and implements `next_tokens(logits, uniform)` in
`keras.ops`; make it a frozen dataclass (or hashable by value) so the
compiled loop is reused for equal settings.

Sampling draws with the uniforms `generate` makes with numpy from its seed
(inverse CDF), so the same seed gives the same tokens on every backend.
"""

import dataclasses
import math

from keras import ops

NEG_INF = -1e9  # the logit of a token that must not be chosen


def _check_number(name, value, low, high, low_open=True):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not (low < value if low_open else low <= value) or value > high:
        bounds = f"{'(' if low_open else '['}{low}, {high}]"
        raise ValueError(f"`{name}` must be a finite number in {bounds}. Received: {name}={value!r}")
    return float(value)


def _check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"`{name}` must be an int >= {low}. Received: {name}={value!r}")
    return value


class Sampler:
    """Chooses each row's next token from a step's logits.

    Subclasses implement `next_tokens`. `kformer.models.generate` calls it
    once a step inside its loop, after the bans (padding, suppressed ids,
    repeated n-grams, ...), which set a token's logit to a large negative number.

    Example:

    >>> import dataclasses, numpy as np
    >>> @dataclasses.dataclass(frozen=True)
    ... class Lowest(Sampler):  # a sampler of one's own: the least likely token that is not banned
    ...     def next_tokens(self, logits, uniform):
    ...         return ops.cast(ops.argmin(ops.where(logits < -1e8, 1e9, logits), axis=-1), "int32")
    >>> ops.convert_to_numpy(Lowest().next_tokens(np.array([[0.0, 2.0, -1.0]]), None)).tolist()
    [2]
    """

    name = "custom"

    def next_tokens(self, logits, uniform):
        """float32 logits `(batch, vocab)` and uniforms in [0, 1) `(batch,)` -> int32 token ids `(batch,)`."""
        raise NotImplementedError(f"{type(self).__name__} must implement `next_tokens(logits, uniform)`")

    def for_vocabulary(self, vocabulary_size):
        """This sampler, fitted to a vocabulary (`TopKSampler` keeps at most `vocabulary_size`)."""
        return self


@dataclasses.dataclass(frozen=True)
class GreedySampler(Sampler):
    """The most likely token (`argmax`).

    Example:

    >>> import numpy as np
    >>> ops.convert_to_numpy(GreedySampler().next_tokens(np.array([[0.1, 3.0, 0.2]]), None)).tolist()
    [1]
    """

    name = "greedy"

    def next_tokens(self, logits, uniform):
        return ops.cast(ops.argmax(logits, axis=-1), "int32")


@dataclasses.dataclass(frozen=True)
class BeamSampler(Sampler):
    """Beam search as transformers' `generate(num_beams=...)` (its default `early_stopping=False`).

    The search keeps `num_beams` running beams and `num_beams` finished
    sequences a row, each finished one scored `log p / length **
    length_penalty` (`length`: generated tokens, the end included; above 0
    favours longer ones). `num_beams=1` is greedy, as in transformers.
    `kformer.generation.search` runs it as its own loop.

    Args:
        num_beams: int >= 1. Defaults to `4`.
        length_penalty: float. Defaults to `0.6`.

    Example:

    >>> BeamSampler(num_beams=5).num_beams
    5
    """

    num_beams: int = 4
    length_penalty: float = 0.6
    name = "beam"

    def __post_init__(self):
        _check_int("num_beams", self.num_beams, 1)
        if isinstance(self.length_penalty, bool) or not isinstance(self.length_penalty, (int, float)) \
                or not math.isfinite(self.length_penalty):
            raise ValueError(f"`length_penalty` must be a finite number. Received: length_penalty={self.length_penalty!r}")
        object.__setattr__(self, "length_penalty", float(self.length_penalty))

    def next_tokens(self, logits, uniform):  # one beam: greedy
        return GreedySampler().next_tokens(logits, uniform)

    def for_vocabulary(self, vocabulary_size):
        if self.num_beams > vocabulary_size:
            raise ValueError(f"`num_beams` must be <= the vocabulary size {vocabulary_size}. "
                             f"Received: num_beams={self.num_beams}")
        return self


def draw(logits, uniform):
    """Inverse-CDF draw from `softmax(logits)` with the given uniforms `(batch,)` -> int32 `(batch,)`."""
    cdf = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)
    index = ops.sum(ops.cast(cdf < uniform[:, None], "int32"), axis=-1)
    return ops.cast(ops.minimum(index, ops.shape(logits)[-1] - 1), "int32")


@dataclasses.dataclass(frozen=True)
class TopKSampler(Sampler):
    """Sample among the `k` most likely tokens, after dividing the logits by `temperature`.

    Args:
        k: int >= 1. Tokens sampled from (at most the vocabulary). Defaults to `50`.
        temperature: float > 0. Below 1 sharpens, above 1 flattens. Defaults to `1.0`.

    Example:

    >>> import numpy as np
    >>> ops.convert_to_numpy(TopKSampler(k=1).next_tokens(np.array([[0.1, 3.0, 0.2]]), np.array([0.5]))).tolist()
    [1]
    """

    k: int = 50
    temperature: float = 1.0
    name = "top_k"

    def __post_init__(self):
        _check_int("k", self.k, 1)
        object.__setattr__(self, "temperature", _check_number("temperature", self.temperature, 0, math.inf))

    def next_tokens(self, logits, uniform):
        logits = logits / self.temperature
        kth = ops.top_k(logits, self.k)[0][:, -1:]
        return draw(ops.where(logits < kth, NEG_INF, logits), uniform)

    def for_vocabulary(self, vocabulary_size):
        return dataclasses.replace(self, k=min(self.k, vocabulary_size))


@dataclasses.dataclass(frozen=True)
class TopPSampler(Sampler):
    """Nucleus sampling: the fewest most likely tokens whose probability reaches `p`, after `temperature`.

    Args:
        p: float in (0, 1]. The probability mass sampled from. Defaults to `0.9`.
        temperature: float > 0. Below 1 sharpens, above 1 flattens. Defaults to `1.0`.

    Example:

    >>> import numpy as np
    >>> ops.convert_to_numpy(TopPSampler(p=0.5).next_tokens(np.array([[0.1, 3.0, 0.2]]), np.array([0.9]))).tolist()
    [1]
    """

    p: float = 0.9
    temperature: float = 1.0
    name = "top_p"

    def __post_init__(self):
        object.__setattr__(self, "p", _check_number("p", self.p, 0, 1))
        object.__setattr__(self, "temperature", _check_number("temperature", self.temperature, 0, math.inf))

    def next_tokens(self, logits, uniform):
        logits = logits / self.temperature
        sorted_logits = ops.top_k(logits, ops.shape(logits)[-1])[0]
        probs = ops.softmax(sorted_logits, axis=-1)
        before = ops.cumsum(probs, axis=-1) - probs  # mass strictly above each token
        cutoff = ops.min(ops.where(before < self.p, sorted_logits, 1e9), axis=-1, keepdims=True)
        return draw(ops.where(logits < cutoff, NEG_INF, logits), uniform)


SAMPLERS = {"greedy": GreedySampler, "beam": BeamSampler, "top_k": TopKSampler, "top_p": TopPSampler}


def get(sampler):
    """A `Sampler` from a sampler or its name (`"greedy"`, `"beam"`, `"top_k"`, `"top_p"`: default settings).

    Example:

    >>> get("top_p")
    TopPSampler(p=0.9, temperature=1.0)
    """
    if isinstance(sampler, Sampler):
        return sampler
    if isinstance(sampler, str) and sampler in SAMPLERS:
        return SAMPLERS[sampler]()
    raise ValueError(f"`sampler` must be a `kformer.generation.Sampler` or one of {tuple(SAMPLERS)}. "
                     f"Received: sampler={sampler!r}")
