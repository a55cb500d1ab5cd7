"""`edgelet version` names the commit in a git checkout, not `dev` (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgelet.cli.version import source_commit

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")
def test_a_git_checkout_reports_its_commit() -> None:
    commit = source_commit()
    assert commit != "dev" and len(commit.removesuffix("-dirty")) >= 7
