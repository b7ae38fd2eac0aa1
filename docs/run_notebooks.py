"""Run the notebooks top to bottom and keep the executed copies the docs site renders.

    python docs/run_notebooks.py               # every notebook under notebooks/
    python docs/run_notebooks.py quickstart    # one of them

Each notebook runs with its default parameters (nothing is overridden), in a `python3` kernel whose
working directory is `notebooks/`, on the TensorFlow backend. The executed copy is written to
`docs/notebooks/NAME.executed.ipynb`: outputs only as text, PNG images and plain results (widget
state, HTML twins, run metadata and TensorFlow's C++ start-up log lines are dropped; consecutive
printed text is joined), with the commit, date, machine and backend of the run in its metadata. The notebooks themselves stay committed without outputs
(tests/test_notebook.py). `docs/hooks.py` renders the executed copy and stops the site build when
its code cells differ from the notebook's: rerun this script after changing a notebook.
"""

import argparse
import datetime
import os
import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
OUT = ROOT / "docs" / "notebooks"
KEEP = ("text/plain", "image/png")  # the MIME types a page shows; the rest is dropped
# TensorFlow's C++ (absl) log lines, `I0000 00:00:1796216089.334982    4923 port.cc:153] ...`, and absl's notice
C_LOG = re.compile(r"^([IWEF]\d{4} [\d:.]+ +\d+ [\w.-]+:\d+\] .*|WARNING: All log messages before absl::.*)\n?",
                   re.M)


def executed_path(name):
    """`docs/notebooks/NAME.executed.ipynb`, the executed copy of `notebooks/NAME.ipynb`."""
    return OUT / f"{name}.executed.ipynb"


def code_cells(notebook):
    """The source of each code cell, in order: what must match between a notebook and its run."""
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]


def compact(notebook):
    """Drop what a page does not show: cell and output metadata, widget state, non-kept MIME types."""
    for key in ("widgets", "papermill"):
        notebook.metadata.pop(key, None)
    for cell in notebook.cells:
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.outputs:
            if output.output_type in ("display_data", "execute_result"):
                output.data = {k: v for k, v in output.data.items() if k in KEEP}
                output.metadata = {}
                if not output.data:
                    continue
            elif output.output_type == "stream":
                output.text = C_LOG.sub("", output.text)
                if not output.text:
                    continue
                if kept and kept[-1].output_type == "stream" and kept[-1].name == output.name:
                    kept[-1].text += output.text  # one block per run of printed text
                    continue
            kept.append(output)
        cell.outputs = kept
    return notebook


def run(name, timeout):
    """Execute `notebooks/NAME.ipynb` and write its compacted copy; returns the copy's path."""
    import nbformat

    sys.path.insert(0, str(ROOT))
    from benchmarks import notebooks, provenance

    # The kernel inherits this environment: the TensorFlow backend, TensorFlow's C++ log turned down.
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    notebook = compact(notebooks.execute(NOTEBOOKS / f"{name}.ipynb", timeout=timeout))
    notebook.metadata["kformer_run"] = {
        "command": f"python docs/run_notebooks.py {name}", "commit": provenance.commit(),
        "date": datetime.date.today().isoformat(), "machine": provenance.machine(), "backend": "tensorflow"}
    target = executed_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".tmp", delete=False,
                                     encoding="utf-8") as f:
        nbformat.write(notebook, f)
    os.replace(f.name, target)  # a reader never sees half a file
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebooks to run (default: every notebooks/*.ipynb)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds a cell may take")
    args = parser.parse_args(argv)
    names = args.names or sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    failed = []
    for name in names:
        if not (NOTEBOOKS / f"{name}.ipynb").is_file():
            parser.error(f"no notebooks/{name}.ipynb")
        print(f"running notebooks/{name}.ipynb ...", flush=True)
        try:
            path = run(name, args.timeout)
        except Exception as error:  # one failing notebook does not stop the others
            print(f"notebooks/{name}.ipynb failed, {executed_path(name).name} left as it was:\n{error}",
                  file=sys.stderr)
            failed.append(name)
            continue
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
