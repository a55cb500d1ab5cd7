"""Smoke suite, run against the venv by `make test` and against the frozen dist/edgelet by `make test-binary`.

EDGELET_BIN (see conftest.edgelet_command) selects the binary; every test
here goes through the command line only, as a user on the device would.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import edgelet_command, wait_for

pytestmark = pytest.mark.privileged

SAMPLES = Path(__file__).resolve().parents[2] / "manifests.d"


def test_version_names_the_build(tmp_path: Path):
    # From outside the repository and with an empty environment: nothing may
    # come from the checkout or a venv (for the frozen binary that is the point).
    out = subprocess.run(
        [*edgelet_command(), "version", "--config", "/dev/null"],
        cwd=tmp_path,
        env={} if os.environ.get("EDGELET_BIN") else None,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith("edgelet ") and "(commit " in first
    if os.environ.get("EDGELET_BIN"):
        assert "(commit dev)" not in first


def test_runonce_samples_then_daemon_adopts_and_lists_them(agent):
    for sample in sorted(SAMPLES.glob("*.yaml")):
        shutil.copy(sample, agent.manifests / sample.name)
    res = agent.run_once("--runonce-timeout", "90s")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "web-testnode" in res.stdout and "hello-once-testnode" in res.stdout

    agent.start()
    # pods.json is still --runonce's until the daemon has started and synced.
    wait_for(lambda: "edgelet started" in agent.log(), what="the daemon to start")
    wait_for(lambda: (r := agent.pod("web")) and r["status"] == "Running" and r["ready"] == "2/2", what="web Running")
    table = wait_for(
        lambda: (t := agent.cli("pods")) and "web-testnode" in t and "hello-once-testnode" in t and t,
        what="edgelet pods listing both samples",
    )
    web = next(line for line in table.splitlines() if "web-testnode" in line)
    assert "Running" in web and "2/2" in web
    assert agent.stop(signal.SIGTERM) == 0
    # Adopted, not restarted: the daemon took over what --runonce started.
    assert [c for c in agent.containers_of("web") if c["status"] == "running"]
