"""Training curves: loss and every metric per epoch, train and validation on shared axes."""

import csv
import math
import os

from kformer.viz._common import grid, pyplot, remove_unused


def plot_history(csv_or_history, figsize=None):
    """One panel per metric (loss first), train and validation (`val_` prefix) on the same axes.

    Args:
        csv_or_history: a Keras `History` (what `model.fit` returns), a dict
            `{"loss": [...], "val_loss": [...], ...}` (optionally with an
            `"epoch"` list), or the path of a `keras.callbacks.CSVLogger` file
            (the recipes' `training_log.csv`, with an `epoch` column).
        figsize: `(width, height)` in inches, or None (4.2 x 3.2 per panel).

    Returns:
        `matplotlib.figure.Figure`: one axes per metric. Epochs are counted
        from 1 (Keras logs them from 0).

    Example:

    >>> import matplotlib; matplotlib.use("Agg")
    >>> fig = plot_history({"loss": [0.9, 0.6, 0.5], "val_loss": [1.0, 0.8, 0.7],
    ...                     "accuracy": [0.5, 0.7, 0.8], "val_accuracy": [0.4, 0.6, 0.7]})
    >>> [ax.get_title() for ax in fig.axes], [len(ax.get_lines()) for ax in fig.axes]
    (['loss', 'accuracy'], [2, 2])
    """
    logs, epochs = _logs(csv_or_history)
    names = [k for k in logs if not k.startswith("val_")]
    names += [k[4:] for k in logs if k.startswith("val_") and k[4:] not in logs]  # validation only
    names.sort(key=lambda name: name != "loss")  # loss first, the rest in logged order
    if not names:
        raise ValueError(f"The history holds no metrics. Received: {type(csv_or_history).__name__} "
                         f"with keys {sorted(logs)}")
    plt = pyplot()
    rows, columns = grid(len(names), 3)
    fig, axes = plt.subplots(rows, columns, squeeze=False, layout="constrained",
                             figsize=figsize or (4.2 * columns, 3.2 * rows))
    for ax, name in zip(remove_unused(axes, len(names)), names):
        for key, label, style in ((name, "train", "o-"), (f"val_{name}", "validation", "s--")):
            if key in logs:
                ax.plot(epochs, logs[key], style, label=label, markersize=4)
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
        if len(epochs) <= 20:
            ax.set_xticks(epochs)  # every epoch, and no fractional ticks around a single one
        ax.grid(alpha=0.3)
        ax.legend()
    return fig


def _logs(source):
    """({metric: [float per epoch]}, [epoch numbers from 1]) from a History, dict or CSV path."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            raise ValueError(f"The CSV log has no epochs. Received: {os.fspath(source)!r}")
        logs = {key: [_float(row[key]) for row in rows] for key in rows[0] if key}
    elif hasattr(source, "history") and isinstance(source.history, dict):
        logs = {**source.history, "epoch": list(getattr(source, "epoch", None) or [])}
    elif isinstance(source, dict):
        logs = dict(source)
    else:
        raise ValueError("`csv_or_history` must be a Keras History, a dict of per-epoch lists or the path of "
                         f"a CSVLogger file. Received: {type(source).__name__}")
    epochs = logs.pop("epoch", None)
    logs = {key: [_float(v) for v in values] for key, values in logs.items()}
    length = max((len(values) for values in logs.values()), default=0)
    if any(len(values) != length for values in logs.values()):
        raise ValueError("Every metric must have one value per epoch. Received lengths "
                         f"{ {key: len(values) for key, values in logs.items()} }")
    if epochs and len(epochs) == length:
        return logs, [int(float(e)) + 1 for e in epochs]
    return logs, list(range(1, length + 1))


def _float(value):
    try:
        return float(value)
    except (TypeError, ValueError):  # an empty CSV cell (metric not logged that epoch)
        return math.nan
