"""Prints docs/configuration.md's settings table from edgelet.settings.KEYS, so the docs cannot drift from the code.

`python tools/settings_table.py` prints it; tests/unit/test_readme.py checks docs/configuration.md holds exactly this.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgelet.settings import KEYS, format_duration


def _default(spec) -> str:
    value = spec.default
    if value is None or value == ():
        return "-"
    if spec.metavar == "DURATION":
        return f"`{format_duration(value)}`"
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return f"`{','.join(value)}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def settings_table() -> str:
    rows = ["| TOML key / `EDGELET_` env | flag | default | meaning |", "| --- | --- | --- | --- |"]
    for key, spec in KEYS.items():
        flags = ", ".join(f"`{f}`" for f in spec.flags)
        meaning = spec.help.replace("|", "\\|")
        rows.append(f"| `{key}` / `EDGELET_{key.upper()}` | {flags} | {_default(spec)} | {meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_table())
