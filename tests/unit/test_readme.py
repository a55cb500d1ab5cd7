"""The README stays true: the two commands come first, the settings table matches the code, every subcommand is documented."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from edgelet.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def test_two_commands_come_first() -> None:
    first = README.index("make run")
    assert first < README.index("## Configuration")
    assert "make test" in README[first:README.index("## Configuration")]


def test_settings_table_is_generated_from_the_code() -> None:
    sys.path.insert(0, str(REPO / "tools"))
    try:
        from settings_table import settings_table
    finally:
        sys.path.pop(0)
    block = re.search(r"<!-- settings-table:.*?-->\n(.*?)\n<!-- /settings-table -->", README, re.S)
    assert block is not None, "README lost its settings-table markers"
    assert block.group(1) == settings_table(), "run `python tools/settings_table.py` and paste it into README.md"


def test_every_subcommand_is_documented() -> None:
    cli = README[README.index("## CLI"):]
    for name in COMMANDS:
        assert f"edgelet {name}" in cli, name
