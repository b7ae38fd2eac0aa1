"""Run a notebook top to bottom in a `python3` kernel, as its user would (nbclient): the quickstart's
benchmark, the notebook tests and docs/run_notebooks.py share this."""

import json
import os
import pathlib


def execute(path, parameters=None, cells=(), timeout=900):
    """Execute the notebook at `path` and return it, outputs included (an `nbformat` notebook).

    The kernel inherits this environment (TensorFlow's C++ start-up log turned down unless set) and runs
    in the notebook's folder. `parameters` (name: value): papermill-style, a cell that sets them is
    inserted after the cell tagged "parameters". `cells`: the source of code cells appended at the end
    (to print what a test checks). A failing cell raises `nbclient.exceptions.CellExecutionError`.
    """
    import nbclient
    import nbformat

    path = pathlib.Path(path)
    notebook = nbformat.read(path, as_version=4)
    if parameters:
        index = next(i for i, c in enumerate(notebook.cells) if "parameters" in c.metadata.get("tags", []))
        notebook.cells.insert(index + 1, nbformat.v4.new_code_cell(
            "\n".join(f"{name} = {value!r}" for name, value in parameters.items())))
    notebook.cells.extend(nbformat.v4.new_code_cell(source) for source in cells)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    return notebook


def printed(notebook):
    """An executed notebook's outputs as one text (printed text and plain results, in order) and the number
    of PNG images it shows."""
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    text = "\n".join(o.get("text", "") + json.dumps(o.get("data", {}).get("text/plain", "")) for o in outputs)
    return text, sum("image/png" in o.get("data", {}) for o in outputs)
