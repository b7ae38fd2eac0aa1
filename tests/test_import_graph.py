"""kformer's modules import each other without circles, and never import recipes or benchmarks.

The graph comes from `ast`, not from running the imports: every `import` and
`from ... import` of a module, at top level or inside a function, is an edge.
`from kformer.models import registry` points at the submodule
`kformer.models.registry`; `from kformer.models import Translator` points at
the submodule the package re-exports `Translator` from, so a package
`__init__` that only re-exports its submodules makes no circle with them.
"""

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "kformer"  # read, not imported
FORBIDDEN_ROOTS = ("recipes", "benchmarks")
pytestmark = pytest.mark.once("the source files' ASTs, nothing imported")


def module_name(path):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
PACKAGES = {module_name(p) for p in FILES.values() if p.name == "__init__.py"}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in FILES.items()}


def imported_from(name, node):
    """The absolute module of `from <node.module> import ...` written in module `name`."""
    if not node.level:
        return node.module
    package = name if name in PACKAGES else name.rpartition(".")[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def reexports(package):
    """name -> module it comes from, for the `from ... import` lines of a package `__init__`."""
    homes = {}
    for node in TREES[package].body:
        if isinstance(node, ast.ImportFrom):
            source = imported_from(package, node)
            for alias in node.names:
                homes[alias.asname or alias.name] = source
    return homes


def resolve(module, attribute):
    """Where `from module import attribute` leads: a submodule, the defining submodule, or `module`."""
    seen = set()
    while module in PACKAGES and (module, attribute) not in seen:
        seen.add((module, attribute))
        if f"{module}.{attribute}" in FILES:
            return f"{module}.{attribute}"
        source = reexports(module).get(attribute)
        if source is None or not source.startswith("kformer"):
            break
        module = source
    return module


def _forbidden_string(call):
    """The `recipes.` / `benchmarks.` module a `import_module(...)` / `__import__(...)` call names, if any."""
    func = call.func
    callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if callee not in ("import_module", "__import__") or not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.JoinedStr) and first.values:
        first = first.values[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        if first.value.split(".")[0] in FORBIDDEN_ROOTS:
            return first.value
    return None


@functools.cache
def edges():
    """(importer, imported, line, source text) for every kformer -> module import."""
    found = []
    for name, tree in TREES.items():
        lines = FILES[name].read_text().splitlines()
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = imported_from(name, node)
                targets = [resolve(source, alias.name) for alias in node.names]
            elif isinstance(node, ast.Call) and _forbidden_string(node):
                targets = [_forbidden_string(node)]
            for target in dict.fromkeys(targets):
                if target != name:
                    found.append((name, target, node.lineno, lines[node.lineno - 1].strip()))
    return tuple(found)


def circles(graph):
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def test_no_import_circles():
    internal = [e for e in edges() if e[1] in FILES]
    graph = {}
    for importer, imported, _, _ in internal:
        graph.setdefault(importer, set()).add(imported)
    report = []
    for component in circles(graph):
        members = set(component)
        lines = [f"    {FILES[a].relative_to(ROOT.parent)}:{line}: {text}  (-> {b})"
                 for a, b, line, text in internal if a in members and b in members]
        report.append(f"circle of {len(component)} modules: {', '.join(component)}\n" + "\n".join(lines))
    assert not report, "import circles in kformer/:\n" + "\n".join(report)


def test_no_kformer_module_imports_recipes_or_benchmarks():
    bad = [f"    {FILES[a].relative_to(ROOT.parent)}:{line}: {text}  (-> {b})"
           for a, b, line, text in edges() if b.split(".")[0] in FORBIDDEN_ROOTS]
    assert not bad, "kformer imports recipes/benchmarks (they sit above it):\n" + "\n".join(bad)
