"""No function in kformer/ other than a constructor takes more than 12 parameters.

Options that travel together get an object (`GenerationConfig`, a sampler) instead of another keyword.
Counted from the source's AST: every named parameter, `*args` and `**kwargs` count one each; `self` and
`cls` do not.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "kformer"  # read, not imported
MAX_PARAMETERS = 12
pytestmark = pytest.mark.once("the source files' ASTs, nothing imported")


def parameter_count(function):
    args = function.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def test_no_function_but_a_constructor_takes_more_than_12_parameters():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
                if parameter_count(node) > MAX_PARAMETERS:
                    long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}: {parameter_count(node)}")
    assert not long, "more than 12 parameters (group them in an object):\n" + "\n".join(long)


def test_the_count_leaves_out_self_and_counts_star_arguments():
    (method,) = ast.parse("class A:\n    def f(self, a, *b, c=1, **d): pass").body[0].body
    assert parameter_count(method) == 4
