"""One error root: every exception edgelet defines is an EdgeletError, and the trees in the docstrings are true.

`edgelet/errors.py` draws the roots (one per package or module that fails
in its own ways); each package's `errors.py` draws its own part. A class
that is not where the map says is a class a caller cannot find.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import edgelet
from edgelet.errors import EdgeletError

PACKAGE = Path(edgelet.__file__).parent


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(edgelet.__path__, "edgelet."):
        if info.name.startswith(("edgelet.testing", "edgelet.__main__")):
            continue
        names.append(info.name)
    return names


def _exceptions() -> list[type[BaseException]]:
    found = []
    for name in _modules():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                found.append(obj)
    return found


def test_every_exception_edgelet_defines_is_an_edgelet_error() -> None:
    # Private control-flow signals (a leading underscore) never leave their module.
    outside = sorted(
        f"{c.__module__}.{c.__qualname__}"
        for c in _exceptions()
        if not c.__name__.startswith("_") and not issubclass(c, EdgeletError)
    )
    assert outside == []


def test_the_root_map_names_every_root_where_it_lives() -> None:
    doc = edgelet.errors.__doc__ or ""
    named = set(re.findall(r"[├└]── ([\w.]+)", doc))
    roots = {
        f"{c.__module__.removeprefix('edgelet.')}.{c.__qualname__}"
        for c in _exceptions()
        if EdgeletError in c.__bases__ and not c.__name__.startswith("_")
    }
    assert roots, "no roots found"
    assert sorted(roots - named) == [], "roots missing from edgelet/errors.py"
    assert sorted(named - roots) == [], "edgelet/errors.py names classes that are no roots"


def test_each_packages_tree_names_its_classes() -> None:
    for path in sorted(PACKAGE.glob("*/errors.py")):
        module = importlib.import_module(f"edgelet.{path.parent.name}.errors")
        doc = module.__doc__ or ""
        classes = [
            n
            for n, c in vars(module).items()
            if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == module.__name__
        ]
        missing = [n for n in classes if not re.search(rf"\b{re.escape(n)}\b", doc)]
        assert missing == [], f"{path.relative_to(PACKAGE)} does not draw {missing}"
