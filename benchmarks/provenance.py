"""Where a result came from: the columns every row under `benchmarks/results/` carries.

    from benchmarks import provenance
    provenance.write_csv(path, ["what", "median_ms"], rows)   # rows + command, commit, date, machine, backend
    provenance.results_file("my_script.csv")                  # benchmarks/results/my_script.csv

`docs/gen_tables.py` builds the Performance and Results pages from these files.
"""

import csv
import datetime
import os
import pathlib
import platform
import subprocess
import sys

COLUMNS = ("command", "commit", "date", "machine", "backend")
RESULTS = pathlib.Path(__file__).resolve().parent / "results"
_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "fma", "neon", "asimd")


def machine():
    """`'<CPU model>, <cores> cores, <flags that matter for matmuls>'`, e.g. `'AMD EPYC, 2 cores, avx2 fma'`."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags |= set(value.split())
    except OSError:  # not Linux: the model from platform, no flags
        pass
    present = " ".join(f for f in _FLAGS if f in flags)
    return f"{model}, {os.cpu_count()} cores" + (f", {present}" if present else "")


def commit():
    """The checkout's short commit, with `+dirty` when tracked files other than results differ from it; `unknown`
    outside git."""
    root = pathlib.Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results"],  # a run's own rows leave the code clean
                               cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def values(backend=None):
    """The provenance values, in `COLUMNS` order, for a row measured now by this process."""
    if backend is None:
        backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    command = " ".join([f"KERAS_BACKEND={backend}", "python", _script()] + sys.argv[1:])
    return [command, commit(), datetime.date.today().isoformat(), machine(), backend]


def _script():
    """The running script as the command line named it: `-m package.module` when run as a module, else its
    path, relative to the repository root when inside it."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return f"-m {spec.name}"
    script = pathlib.Path(sys.argv[0]).resolve()
    try:
        return str(script.relative_to(pathlib.Path(__file__).resolve().parents[1]))
    except ValueError:
        return str(script)


def results_file(name):
    """Where a script's rows go: `benchmarks/results/NAME`, or `$KFORMER_RESULTS_DIR/NAME` where that is set
    (the test suite sets it to a temporary folder: a smoke run must not add rows to the measured history)."""
    folder = os.environ.get("KFORMER_RESULTS_DIR")
    return (pathlib.Path(folder) if folder else RESULTS) / name


def write_csv(path, header, rows, backend=None, append=False):
    """Write `rows` under `header` to `path`, each followed by the provenance columns.

    `append=True` adds the rows below a file's earlier runs (its header must be the same), so the
    file keeps the history; the pages show the rows they select.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    extra, full = values(backend), [*header, *COLUMNS]
    keep = append and path.is_file() and path.stat().st_size > 0
    if keep:
        with path.open(newline="") as f:
            found = next(csv.reader(f), None)
        if found != full:
            raise ValueError(f"{path} has the columns {found}, not {full}: write to another file.")
    with path.open("a" if keep else "w", newline="") as f:
        writer = csv.writer(f)
        if not keep:
            writer.writerow(full)
        writer.writerows([*row, *extra] for row in rows)
    return path
