"""Compiles a Python module for the frozen build without its docstrings, keeping its asserts and line numbers.

`python -OO` drops docstrings too, but also every assert, so the frozen agent would no longer run exactly the
code the tests ran. Docstrings are about 1 MB of a resident agent (the code objects of some 400 modules hold
them), which on a 512 MB board is worth having back. Used by build.spec; nothing in edgelet reads `__doc__`.
"""

from __future__ import annotations

import ast
from types import CodeType


class _DropDocstrings(ast.NodeTransformer):
    def _drop(self, node):
        self.generic_visit(node)
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            docstring = body.pop(0)
            if not body:  # a body that was only its docstring still needs a statement
                body.append(ast.copy_location(ast.Pass(), docstring))
        return node

    visit_Module = visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _drop


def compile_without_docstrings(source: bytes | str, filename: str) -> CodeType:
    """The module's code object as `compile(source, filename, "exec")` makes it, minus every docstring (module,
    class, function): `__doc__` is None as under -OO, asserts stay, and every remaining node keeps its line."""
    tree = _DropDocstrings().visit(ast.parse(source, filename))
    return compile(tree, filename, "exec", dont_inherit=True, optimize=0)
