"""MkDocs hooks: preset tables from the registry and the notebooks as pages, filled at build time.

- `<!-- table: presets BUILDER -->...<!-- /table -->` becomes the presets of `kformer.models.BUILDER`
  (`all`: every builder with its presets), read from `kformer.models.registry` as the site builds, so
  a new preset appears without editing a page.
- `<!-- notebook: notebooks/NAME.ipynb -->` becomes the notebook's cells with the outputs of a real run:
  markdown as written, code as Python blocks, each followed by its printed text, results and PNG
  figures, read from `docs/notebooks/NAME.executed.ipynb`, which `python docs/run_notebooks.py` writes
  (the notebooks themselves are stored without outputs, tests/test_notebook.py). The build stops when
  that copy is missing or its code cells differ from the notebook's. `<!-- notebook: PATH code-only -->`
  shows the code alone, for a notebook no run here can execute.
- `<!-- api: PACKAGE -->` becomes a `::: PACKAGE.MODULE` reference for every public module of the
  package (found on disk), so the API reference grows with the code.
- `<!-- builders: PACKAGE -->` documents the functions that share their name with a submodule.
- Every other generated block must already match its files (`python docs/gen_tables.py --check`,
  run by tests/test_docs.py); the build stops on a block that does not.
"""

import json
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import gen_tables  # noqa: E402
import run_notebooks  # noqa: E402

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # a core dependency; the registry is plain Python
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def presets(builder):
    from kformer.models import registry

    if builder == "all":
        builders = sorted({registry.get_preset(name)["builder"] for name in registry.list_models()})
        return gen_tables.table(["builder", "presets"], [
            (f"`models.{b}`", ", ".join(f"`{p}`" for p in registry.presets_of(b))) for b in builders])
    names = registry.presets_of(builder)
    if not names:
        raise ValueError(f"No presets registered for builder {builder!r}: fix the page's presets table.")
    rows = []
    for name in names:
        args = {k: v for k, v in registry.get_preset(name).items() if k != "builder"}
        rows.append((f"`{name}`", ", ".join(f"`{k}={v!r}`" for k, v in args.items())))
    return gen_tables.table(["preset", "arguments"], rows)


def executed_notebook(path, executed=None):
    """The executed copy of notebook `path` (`docs/notebooks/NAME.executed.ipynb` unless `executed` names
    another), after checking that it ran exactly the notebook's code cells; raises ValueError otherwise."""
    path = ROOT / path
    executed = pathlib.Path(executed) if executed else run_notebooks.executed_path(path.stem)
    command = f"`python docs/run_notebooks.py {path.stem}`"
    if not executed.is_file():
        raise ValueError(f"{path.name} has no executed copy ({executed.name}): run {command}.")
    ran = json.loads(executed.read_text(encoding="utf-8"))
    ours = run_notebooks.code_cells(json.loads(path.read_text(encoding="utf-8")))
    theirs = run_notebooks.code_cells(ran)
    if ours != theirs:
        changed = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        raise ValueError(f"{executed.name} is stale: code cell {changed + 1} of {path.name} differs from the one "
                         f"that ran ({len(ours)} code cells now, {len(theirs)} then); run {command}.")
    return ran


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _text(text, title="output"):
    text = ANSI.sub("", "".join(text)).rstrip("\n")
    return f'```text title="{title}"\n{text}\n```' if text.strip() else ""


def _outputs(cell):
    """A code cell's outputs as markdown: printed text and plain results as text blocks, PNGs inline."""
    parts = []
    for output in cell.get("outputs", []):
        kind, data = output["output_type"], output.get("data", {})
        if kind == "stream":
            parts.append(_text(output["text"], "output" if output["name"] == "stdout" else output["name"]))
        elif kind == "error":
            parts.append(_text(f"{output['ename']}: {output['evalue']}", "error"))
        elif "image/png" in data:
            png = "".join(data["image/png"]).replace("\n", "")
            parts.append(f'<img alt="a figure the cell drew" src="data:image/png;base64,{png}">')
        elif "text/plain" in data:
            parts.append(_text(data["text/plain"]))
    return [p for p in parts if p]


def notebook(argument):
    path, *options = argument.split()
    if options not in ([], ["code-only"]):
        raise ValueError(f"notebook {path}: unknown options {options}; the only one is `code-only`.")
    if options:
        cells = json.loads((ROOT / path).read_text(encoding="utf-8"))["cells"]
        parts = [f"*Rendered from `{path}` as code only, without outputs (the page says why). Run it with "
                 "Jupyter after `pip install -e \".[notebook]\"`.*"]
    else:
        cells = executed_notebook(path)["cells"]
        parts = [f"*Rendered from `{path}` with the outputs of its last run by `python docs/run_notebooks.py` "
                 "(top to bottom, default parameters, TensorFlow backend, on a CPU); the site build stops when "
                 "the notebook's code changes without a rerun. Run it yourself with Jupyter after "
                 "`pip install -e \".[notebook]\"`.*"]
    for c in cells:
        source = "".join(c["source"])
        if c["cell_type"] == "markdown":
            parts.append(source)
        elif c["cell_type"] == "code" and source.strip():
            parts.append(f"```python\n{source}\n```")
            parts.extend(_outputs(c))
    return "\n\n".join(parts) + "\n"


def api(package):
    folder = ROOT.joinpath(*package.split("."))
    modules = sorted(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for path in folder.rglob("*.py")
                     if not any(part.startswith("_") for part in path.relative_to(folder).parts[:-1])
                     and (path.name == "__init__.py" or not path.name.startswith("_")))
    return "\n\n".join(f"::: {m}" for m in modules if m != package) + "\n"


def builders(package):
    """`::: module.name` for each public function of `package` that shares its name with a submodule
    (`kformer.models.bert`): griffe documents the submodule under that name, not the function."""
    import importlib
    import inspect

    module = importlib.import_module(package)
    names = [n for n in module.__all__ if inspect.isfunction(getattr(module, n))
             and ROOT.joinpath(*package.split("."), f"{n}.py").is_file()]
    return "\n\n".join(f"::: {getattr(module, n).__module__}.{getattr(module, n).__qualname__}"
                         for n in sorted(names)) + "\n"


def on_page_markdown(markdown, page, config, files):
    def fill(match):
        name, arg = match.group("name"), match.group("arg")
        body = presets(arg) if name == "presets" else match.group("body")
        if name != "presets" and body != gen_tables.render(name, arg):
            raise ValueError(f"{page.file.src_path}: the {name} {arg or ''} table differs from "
                             "benchmarks/results/; run `python docs/gen_tables.py`.")
        return match.group(1) + body + match.group(5)

    markdown = gen_tables.BLOCK.sub(fill, markdown)
    for marker, expand in (("<!-- notebook: ", notebook), ("<!-- api: ", api),
                           ("<!-- builders: ", builders)):
        while marker in markdown:
            start = markdown.index(marker)
            end = markdown.index("-->", start)
            markdown = markdown[:start] + expand(markdown[start + len(marker):end].strip()) + markdown[end + 3:]
    return markdown
