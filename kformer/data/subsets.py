"""Deterministic subsets of labelled data."""

import numpy as np


def balanced_order(labels, seed=0):
    """Fixed-seed shuffle that interleaves the classes.

    Every prefix of the returned order holds each class equally often (to
    within one) until the rarest class runs out, so `order[:n]` is a balanced
    subset. Returns int64 indices `(n,)`.

    Args:
        labels: int array `(n,)`.
        seed: int. Defaults to `0`.

    Example:

    >>> import numpy as np
    >>> labels = np.array([0, 0, 0, 1, 1, 1])
    >>> sorted(labels[balanced_order(labels)[:4]].tolist())
    [0, 0, 1, 1]
    """
    labels = np.asarray(labels)
    order = np.random.default_rng(seed).permutation(len(labels))
    rank = np.zeros(len(labels), np.int64)  # k for the k-th example of its class in `order`
    shuffled = labels[order]
    for label in np.unique(labels):
        hits = shuffled == label
        rank[hits] = np.arange(hits.sum())
    return order[np.argsort(rank, kind="stable")]
