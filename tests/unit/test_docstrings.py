"""The frozen build's compiler (packaging/docstrings.py): docstrings gone, asserts, lines and everything else kept."""

from __future__ import annotations

import importlib.util
import traceback
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("_docstrings", REPO / "packaging" / "docstrings.py")
docstrings = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docstrings)

SOURCE = '''"""The module's docstring."""
from __future__ import annotations


class Documented:
    """A class's docstring."""

    def method(self) -> int:
        """A method's docstring."""
        return 1


class OnlyADocstring:
    """Nothing else in the body."""


def only_a_docstring():
    """Returns None, as it did with its docstring."""


async def coroutine():
    """A coroutine's docstring."""
    return 2


def first_is_fstring(x):
    f"not a docstring {x}"
    return "kept"


def annotated(x: NotDefinedAnywhere) -> int:
    return x


def checks(x):
    """Asserts stay."""
    assert x > 0, "x must be positive"
    return x


def fails():
    """The line of the raise is its line in the source."""
    raise ValueError("here")
'''


@pytest.fixture
def module():
    code = docstrings.compile_without_docstrings(SOURCE.encode(), "example.py")
    example = types.ModuleType("example")
    exec(code, example.__dict__)
    return example


@pytest.mark.parametrize(
    "path",
    [
        ("__doc__",),
        ("Documented", "__doc__"),
        ("Documented", "method", "__doc__"),
        ("OnlyADocstring", "__doc__"),
        ("only_a_docstring", "__doc__"),
        ("coroutine", "__doc__"),
        ("checks", "__doc__"),
    ],
)
def test_docstrings_are_gone(module, path) -> None:
    obj = module
    for attr in path:
        obj = getattr(obj, attr)
    assert obj is None


def test_the_code_still_runs_as_written(module) -> None:
    import asyncio

    assert module.Documented().method() == 1
    assert module.only_a_docstring() is None
    assert asyncio.run(module.coroutine()) == 2
    assert module.first_is_fstring(1) == "kept"
    # The module's __future__ import still applies: the annotation is never evaluated.
    assert module.annotated.__annotations__ == {"x": "NotDefinedAnywhere", "return": "int"}


def test_asserts_are_kept(module) -> None:
    assert module.checks(1) == 1
    with pytest.raises(AssertionError, match="x must be positive"):
        module.checks(0)


def test_line_numbers_are_kept(module) -> None:
    with pytest.raises(ValueError) as raised:
        module.fails()
    assert traceback.extract_tb(raised.tb)[-1].lineno == SOURCE.splitlines().index('    raise ValueError("here")') + 1
