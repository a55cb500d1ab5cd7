"""Chaos fixtures: a real agent on temp dirs (the e2e one) with a CNI network of its own, and the campaign's
figures printed at the end of the pytest run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import agent, busybox_archive, network  # noqa: F401 (fixtures)

PLUGINS = Path("/usr/lib/cni")
SUMMARIES: list[str] = []


def pytest_terminal_summary(terminalreporter) -> None:
    for line in SUMMARIES:
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _crun_ready_when_asked(request: pytest.FixtureRequest) -> None:
    """Under EDGELET_CHAOS_RUNTIME_HANDLER=crun (make chaos-quick-crun), crun is made ready first."""
    if os.environ.get("EDGELET_CHAOS_RUNTIME_HANDLER") == "crun":
        request.getfixturevalue("crun_ready")
