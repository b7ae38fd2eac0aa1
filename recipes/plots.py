"""The figures in every version folder: `curves.png` (loss and metrics per epoch) and `attention.png`
(and `expert_load.png` for a model with mixture-of-experts layers).

A figure is a view of the run, not the run: when matplotlib is missing
(`pip install kformer[viz]`) or a plot fails, the recipe says so and still
writes the version. `--no-plots` skips them.
"""

import pathlib
import traceback

CURVES = "curves.png"
ATTENTION = "attention.png"
EXPERT_LOAD = "expert_load.png"
DPI = 100


def write(folder, *, log=None, attention=None, expert_load=None):
    """Write `curves.png` from the CSV log at `log` and `attention.png` from `attention()`.

    Args:
        folder: the version folder being written.
        log: path of the run's `keras.callbacks.CSVLogger` file, or None.
        attention: a function taking no arguments that returns a matplotlib
            Figure (an attention map of the trained model), or None.
        expert_load: the same for `expert_load.png` (the per-expert load of
            each mixture-of-experts layer), or None.

    Returns:
        {file name: what it shows} for the figures written.
    """
    try:
        import matplotlib
    except ImportError:
        print("note: matplotlib is not installed, so no plots were written "
              "(pip install kformer[viz]; or pass --no-plots)", flush=True)
        return {}
    matplotlib.use("Agg")  # files only; never a window
    from kformer import viz

    jobs = {}
    if log is not None and pathlib.Path(log).is_file():
        jobs[CURVES] = ("training curves: loss and metrics per epoch, train and validation",
                        lambda: viz.plot_history(log))
    if attention is not None:
        jobs[ATTENTION] = ("attention map of the trained model on one example", attention)
    if expert_load is not None:
        jobs[EXPERT_LOAD] = ("per-expert load of each mixture-of-experts layer (share of the last training "
                             "batch's token choices, kept and dropped over capacity)", expert_load)
    written = {}
    for name, (caption, make) in jobs.items():
        if _save(make, pathlib.Path(folder) / name):
            written[name] = caption
    return written


def _save(make, path):
    import matplotlib.pyplot as plt

    try:
        fig = make()
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
        return True
    except Exception:  # a plot must never cost the trained model
        print(f"warning: could not write {path.name}; the version is written without it:\n"
              f"{traceback.format_exc()}", flush=True)
        return False
