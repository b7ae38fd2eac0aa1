"""A griffe extension for kformer's docstrings, used by the API reference (mkdocs.yml).

- STYLE.md writes the section as `Example:` with the doctest unindented below it; griffe's
  Google-style parser knows `Examples:` with its content indented, and would render the doctest as
  prose (its `>>>` lines as Markdown). The section is rewritten that way before parsing.
- A namedtuple documented by `Name.__doc__ = \"\"\"...\"\"\"` (`kformer.export.Signature`) gets that
  docstring, which static analysis would not see.
"""

import ast
import re

import griffe

_SECTIONS = ("Args", "Arguments", "Call arguments", "Returns", "Raises", "Yields", "Attributes", "Note",
             "Notes", "Example", "Examples", "References", "Warning", "Warnings", "See also")
_HEADING = re.compile(rf"^(?:{'|'.join(_SECTIONS)}):[ \t]*$")


def rewrite(text):
    """`text` with each unindented `Example:` section as an indented `Examples:` section."""
    out, inside = [], False
    for line in text.splitlines():
        if _HEADING.match(line):
            inside = line.startswith("Example")
            out.append("Examples:" if inside else line)
        elif inside and not line.strip() and out[-1] == "Examples:":
            continue  # griffe ends a section at a blank line right after its heading
        else:
            out.append(("    " + line) if inside and line.strip() else line)
    return "\n".join(out)


class KformerDocstrings(griffe.Extension):
    """Rewrite `Example:` sections; pick up `Name.__doc__ = "..."` assignments."""

    def on_module_members(self, *, node, mod, **kwargs):
        for statement in getattr(node, "body", []):
            if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                    and isinstance(target := statement.targets[0], ast.Attribute) and target.attr == "__doc__"
                    and isinstance(target.value, ast.Name) and target.value.id in mod.members
                    and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)):
                member = mod.members[target.value.id]
                if not member.is_alias and member.docstring is None:
                    member.docstring = griffe.Docstring(rewrite(_dedent(statement.value.value)),
                                                        lineno=statement.lineno, parent=member)

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)


def _dedent(text):
    import inspect

    return inspect.cleandoc(text)
