"""Chaos fixtures: a real agent on temp dirs (the e2e one) with a CNI network of its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import agent, busybox_archive, network  # noqa: F401 (fixtures)

PLUGINS = Path("/usr/lib/cni")


@pytest.fixture(autouse=True)
def _crun_ready_when_asked(request: pytest.FixtureRequest) -> None:
    """Under EDGELET_CHAOS_RUNTIME_HANDLER=crun (make chaos-quick-crun), crun is made ready first."""
    if os.environ.get("EDGELET_CHAOS_RUNTIME_HANDLER") == "crun":
        request.getfixturevalue("crun_ready")
