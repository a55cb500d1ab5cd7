"""The README and its pages stay true: the two commands come first, the settings table matches the code, every subcommand is documented."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from edgelet.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text()
CLI = (REPO / "docs" / "cli.md").read_text()


def test_two_commands_come_first() -> None:
    first = README.index("make run")
    assert first < README.index("## A Raspberry Pi in three steps")
    assert "make test" in README[first : README.index("## A Raspberry Pi in three steps")]


def test_readme_is_short_and_links_every_page() -> None:
    # A newcomer reads it in five minutes; the detail lives in docs/, one page a subject.
    assert len(README.splitlines()) <= 150
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"docs/{page.name}" in README, page.name


def test_settings_table_is_generated_from_the_code() -> None:
    sys.path.insert(0, str(REPO / "tools"))
    try:
        from settings_table import settings_table
    finally:
        sys.path.pop(0)
    block = re.search(r"<!-- settings-table:.*?-->\n(.*?)\n<!-- /settings-table -->", CONFIGURATION, re.S)
    assert block is not None, "docs/configuration.md lost its settings-table markers"
    assert block.group(1) == settings_table(), (
        "run `python tools/settings_table.py` and paste it into docs/configuration.md"
    )


def test_every_subcommand_is_documented() -> None:
    for name in COMMANDS:
        assert f"edgelet {name}" in CLI, name
