"""Rules import-linter cannot state: processes start in one module, time comes from the Clock, and no object
writes another's private attributes (wiring goes through constructor arguments: edgelet/wiring.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "edgelet"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "testing" not in p.relative_to(PACKAGE).parts)

SPAWNERS = {
    ("subprocess", "Popen"),
    ("subprocess", "run"),
    ("subprocess", "call"),
    ("subprocess", "check_call"),
    ("subprocess", "check_output"),
    ("asyncio", "create_subprocess_exec"),
    ("asyncio", "create_subprocess_shell"),
    ("os", "system"),
    ("os", "fork"),
    ("os", "posix_spawn"),
    ("os", "posix_spawnp"),
    ("os", "popen"),
}
CLOCK_CALLS = {("time", "time"), ("time", "monotonic"), ("time", "sleep"), ("asyncio", "sleep")}

# Where the rule does not apply, and why.
SPAWN_ALLOWED = {"util/proc.py"}
CLOCK_ALLOWED = {
    "util/clock.py",  # the Clock itself
    "cli/logs.py",  # `edgelet logs -f` without an agent: a synchronous poll of a file, nothing to test with time
}


def _calls(path: Path, wanted: set[tuple[str, str]]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and (node.func.value.id, node.func.attr) in wanted
        ):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.func.value.id}.{node.func.attr}()")
    return found


@pytest.mark.parametrize(
    "rule, wanted, allowed",
    [
        ("processes start only in util/proc.py", SPAWNERS, SPAWN_ALLOWED),
        ("time comes from the Clock", CLOCK_CALLS, CLOCK_ALLOWED),
    ],
)
def test_rule(rule: str, wanted: set[tuple[str, str]], allowed: set[str]) -> None:
    offending = [hit for p in SOURCES if str(p.relative_to(PACKAGE)) not in allowed for hit in _calls(p, wanted)]
    assert not offending, f"{rule}; found: {offending}"


def test_the_rules_see_what_they_look_for() -> None:
    assert _calls(PACKAGE / "util" / "proc.py", SPAWNERS)
    assert _calls(PACKAGE / "util" / "clock.py", CLOCK_CALLS)


# Where an object's private attribute is written from outside it, and why.
PRIVATE_WRITES_ALLOWED = {
    # inotify_simple keeps its C library handle in this module global and has no other way to be given one:
    # without it, its first watch runs `ldconfig -p` in a subprocess to find libc.
    ("util/inotify.py", "inotify_simple._libc"),
}


def _private_writes(source: str, module: str) -> list[tuple[str, str]]:
    """`x._attr = ...` (also augmented, annotated, deleted, or setattr with a literal name) where x is not the
    method's own self or cls: (module, target) pairs."""
    found = []
    for node in ast.walk(ast.parse(source, module)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
            and not _is_own(node.args[0])
        ):
            found.append((module, f"{ast.unparse(node.args[0])}.{node.args[1].value}"))
        for target in targets:
            for sub in ast.walk(target):  # also inside tuple targets: a, b._x = ...
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.ctx, ast.Store | ast.Del)
                    and _is_private(sub.attr)
                    and not _is_own(sub.value)
                ):
                    found.append((module, ast.unparse(sub)))
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_own(obj: ast.expr) -> bool:
    return isinstance(obj, ast.Name) and obj.id in ("self", "cls")


def _module_private_writes(path: Path) -> list[tuple[str, str]]:
    return _private_writes(path.read_text(), str(path.relative_to(PACKAGE)))


def test_no_object_writes_another_objects_private_attributes() -> None:
    offending = [
        f"{module}: {target}"
        for p in SOURCES
        for module, target in _module_private_writes(p)
        if (module, target) not in PRIVATE_WRITES_ALLOWED
    ]
    assert not offending, f"wire through constructor arguments (edgelet/wiring.py); found: {offending}"


def test_the_private_write_rule_sees_what_it_looks_for() -> None:
    sample = """
class Agent:
    def __init__(self, workers, loop):
        self._own = 1
        self._count += 1
        cls._registry = {}
        workers._on_result = loop.on_result
        self.workers._on_terminated: object = loop.on_terminated
        a, loop._state = 1, 2
        setattr(workers, "_hook", None)
        setattr(self, "_mine", None)
        del workers._gone
        workers.public = 1
"""
    found = {target for _, target in _private_writes(sample, "sample.py")}
    assert found == {
        "workers._on_result",
        "self.workers._on_terminated",
        "loop._state",
        "workers._hook",
        "workers._gone",
    }
    assert set(PRIVATE_WRITES_ALLOWED) <= {hit for p in SOURCES for hit in _module_private_writes(p)}, (
        "an exception no longer needed: remove it"
    )
