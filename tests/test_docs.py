"""The documentation site builds with warnings as errors, and its figures come from benchmarks/results/.

`mkdocs build --strict` runs once (JAX backend: the site does not depend on it); it fails on a broken
link or anchor, a docstring griffe cannot parse, or a generated table that differs from its results
file. Every public name has a place in the API reference (the site's `objects.inv`). The rest checks
the files themselves on every backend: the README's length, short pages, provenance in every results
row, no benchmark figures in the library's docstrings, the CHANGELOG's form.
"""

import csv
import importlib.util
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
