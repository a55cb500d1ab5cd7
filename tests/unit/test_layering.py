"""Rules import-linter cannot state: processes start in one module, time comes from the Clock."""

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
