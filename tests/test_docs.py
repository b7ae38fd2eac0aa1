"""The documentation site builds with warnings as errors, and its figures come from benchmarks/results/.

`mkdocs build --strict` runs once (JAX backend: the site does not depend on it); it fails on a broken
link or anchor, a docstring griffe cannot parse, or a generated table that differs from its results
file. Every public name has a place in the API reference (the site's `objects.inv`). The rest checks
the files themselves on every backend: the README's length, short pages, provenance in every results
row, no benchmark figures in the library's docstrings, the CHANGELOG's form, and notebook pages that
show a run of the committed code (docs/run_notebooks.py's executed copies).
"""

import csv
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import zlib

import pytest

import kformer

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import gen_tables  # noqa: E402
import hooks  # noqa: E402
import run_notebooks  # noqa: E402

FIGURE = re.compile(r"[0-9]+(\.[0-9]+)?x faster|ms a call")


def _inventory(path):
    """Names in a Sphinx `objects.inv` (what mkdocstrings writes for every documented object)."""
    data = path.read_bytes()
    body = zlib.decompress(data.split(b"\n", 4)[4]).decode("utf-8")
    return {line.split(" ", 1)[0] for line in body.splitlines() if line.strip()}


@pytest.mark.only_backend("jax")
def test_site_builds_strictly_with_every_public_name(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings_handlers") is None:
        pytest.skip("mkdocs is not installed: pip install -c constraints.txt -e '.[test]' (or '.[docs]')")
    env = {**os.environ, "KERAS_BACKEND": "jax", "NO_MKDOCS_2_WARNING": "1"}
    site = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    for page in ("index.html", "performance/index.html", "RESULTS/index.html", "decisions/index.html",
                 "notebooks/quickstart/index.html", "api/models/index.html"):
        assert (site / page).is_file(), page
    assert "transformer_tiny" in (site / "tasks" / "translator" / "index.html").read_text()  # from the registry
    quickstart = (site / "notebooks" / "quickstart" / "index.html").read_text()
    assert "docs/run_notebooks.py" in quickstart and quickstart.count('src="data:image/png;base64,') >= 2

    from tests.test_docstrings import public_objects  # the names test_docstrings holds to a docstring

    documented = _inventory(site / "objects.inv")
    missing = []
    for name, obj in public_objects():
        defined = f"{obj.__module__}.{obj.__qualname__}"
        if name not in documented and defined not in documented:
            missing.append(name)
    assert not missing, f"public names missing from the API reference: {missing}"


def test_generated_tables_match_results_files(capsys):
    assert gen_tables.main(["--check"]) == 0, capsys.readouterr().err


def test_every_results_row_says_where_it_came_from():
    files = sorted((ROOT / "benchmarks" / "results").glob("*.csv"))
    assert len(files) >= 5
    for path in files:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        assert rows, path
        for i, row in enumerate(rows):
            for column in gen_tables.PROVENANCE:
                assert (row.get(column) or "").strip(), f"{path.name} row {i + 2}: no {column}"
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"]), f"{path.name} row {i + 2}: date {row['date']!r}"


def test_a_stale_table_is_found(tmp_path):
    page = "<!-- table: csv gpt2_serving_cost.csv -->\n| what | ms |\n|---|---|\n| old | 1 |\n<!-- /table -->\n"
    fresh = gen_tables.regenerate(page)
    assert fresh != page and "GPT2TokenizerFast" in fresh and gen_tables.regenerate(fresh) == fresh
    with pytest.raises(ValueError, match="no row for decision 'nothing'"):
        gen_tables.regenerate("<!-- table: decision nothing -->\n<!-- /table -->")


def test_readme_is_short_and_points_into_the_site():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert "mkdocs serve" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link
    assert not FIGURE.search(readme)


def test_docs_pages_are_short():
    for path in (ROOT / "docs").rglob("*"):
        if path.suffix in (".md", ".py"):
            assert len(path.read_text(encoding="utf-8").splitlines()) <= 400, path
    assert len((ROOT / "docs" / "decisions.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_no_benchmark_figures_in_the_library():
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "kformer").rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if FIGURE.search(line)]
    assert not found, found


def test_changelog_has_unreleased_on_top_and_dated_releases():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "[Unreleased]"
    releases = headings[1:]
    assert releases and all(re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", h) for h in releases), releases
    assert releases[0].startswith(f"[{kformer.__version__}]")
    assert not FIGURE.search(text)


def test_notebook_pages_show_a_run_of_the_committed_code():
    notebook = "notebooks/quickstart.ipynb"
    executed = run_notebooks.executed_path("quickstart")
    assert executed.stat().st_size < 1_000_000, "keep the executed copy small: PNG figures, no widget state"
    page = hooks.notebook(notebook)  # raises if the copy is missing or stale
    assert "python docs/run_notebooks.py" in page and '```text title="output"\n' in page
    assert page.count('<img alt="a figure the cell drew" src="data:image/png;base64,') >= 2
    assert re.search(r"-> '[^']+'", page)  # the translations the run printed
    assert "Traceback" not in page


def test_a_stale_or_missing_executed_notebook_stops_the_build(tmp_path):
    notebook = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text(encoding="utf-8"))
    executed = run_notebooks.executed_path("quickstart")
    copy = tmp_path / "quickstart.ipynb"
    copy.write_text(json.dumps(notebook), encoding="utf-8")
    assert hooks.executed_notebook(copy, executed)["cells"]  # the committed pair agrees
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    code[-1]["source"] = "".join(code[-1]["source"]) + "\nprint('one more line')"
    copy.write_text(json.dumps(notebook), encoding="utf-8")
    with pytest.raises(ValueError, match=f"code cell {len(code)} of quickstart.ipynb differs.*"
                                         r"run `python docs/run_notebooks.py quickstart`"):
        hooks.executed_notebook(copy, executed)
    notebook["cells"].append({"cell_type": "code", "source": "1 + 1", "metadata": {}, "outputs": [],
                              "execution_count": None})
    code[-1]["source"] = run_notebooks.code_cells(json.loads(executed.read_text(encoding="utf-8")))[-1]
    copy.write_text(json.dumps(notebook), encoding="utf-8")
    with pytest.raises(ValueError, match="is stale"):
        hooks.executed_notebook(copy, executed)
    with pytest.raises(ValueError, match=r"no executed copy \(missing.executed.ipynb\): run "
                                         r"`python docs/run_notebooks.py quickstart`"):
        hooks.executed_notebook(copy, tmp_path / "missing.executed.ipynb")
    with pytest.raises(ValueError, match="the only one is `code-only`"):
        hooks.notebook("notebooks/quickstart.ipynb outputs")
    assert "```python" in hooks.notebook("notebooks/quickstart.ipynb code-only")


def test_executed_notebooks_keep_text_plain_results_and_pngs_only():
    nbformat = pytest.importorskip("nbformat")
    cell = nbformat.v4.new_code_cell("plot()", metadata={"tags": ["parameters"],
                                                           "execution": {"shell.execute_reply": "2026-12-02"}})
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=(
                        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
                        "I0000 00:00:1796216089.334982    4923 port.cc:153] oneDNN custom operations are on.\n")),
                    nbformat.v4.new_output("stream", name="stdout", text="hel"),
                    nbformat.v4.new_output("stream", name="stdout", text="lo\n"),
                    nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=",
                                                                  "text/plain": "<Figure>", "text/html": "<b>"},
                                           metadata={"image/png": {"width": 500}}),
                    nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {}})]
    notebook = nbformat.v4.new_notebook(cells=[cell], metadata={"widgets": {"state": {}}})
    compact = run_notebooks.compact(notebook)
    assert "widgets" not in compact.metadata and compact.cells[0].metadata == {"tags": ["parameters"]}
    outputs = compact.cells[0].outputs
    assert [o.output_type for o in outputs] == ["stream", "display_data"]
    assert outputs[1].data == {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"} and outputs[1].metadata == {}
    assert hooks._outputs(compact.cells[0]) == [
        '```text title="output"\nhello\n```', '<img alt="a figure the cell drew" src="data:image/png;base64,iVBORw0KGgo=">']
