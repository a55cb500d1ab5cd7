"""Graceful node shutdown through logind's delay lock, on a real agent with real pods.

The test machines run no logind, so the test starts a D-Bus of its own and
edgelet.testing.logind on it, and points the agent at it with
DBUS_SYSTEM_BUS_ADDRESS: the agent speaks real D-Bus to it.
"""

from __future__ import annotations

import queue
import shutil
import subprocess
import sys
import threading

import pytest

from edgelet.testing.logind import start_bus
from tests.e2e.conftest import IMAGE, wait_for

pytestmark = [
    pytest.mark.privileged,
    pytest.mark.skipif(shutil.which("dbus-daemon") is None, reason="needs dbus-daemon (apt: dbus-daemon)"),
]


def _manifest(name: str, extra: str = "") -> str:
    # Ignores SIGTERM: only the shutdown's cap on its 60 s grace period gets it stopped in time.
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 60
{extra}  containers:
  - name: app
    image: {IMAGE}
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
"""


class StandIn:
    def __init__(self, address: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgelet.testing.logind", address],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.next(30) == "ready"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def next(self, timeout: float) -> str:
        return self.lines.get(timeout=timeout)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()


@pytest.fixture
def logind(tmp_path):
    bus, address = start_bus(tmp_path)
    stand_in = StandIn(address)
    yield address, stand_in
    for proc in (stand_in.proc, bus):
        proc.kill()
        proc.communicate()  # reaps it and closes its pipes


def _running(agent, name: str) -> bool:
    return any(
        c.get("status") == "running" and (c.get("annotations") or {}).get("io.edgelet.kind") == "container"
        for c in agent.containers_of(name)
    )


def _status(agent, name: str) -> tuple[str | None, str | None]:
    row = agent.pod(name)
    st = (row or {}).get("pod", {}).get("status") or {}
    return st.get("phase"), st.get("reason")


def test_shutdown_stops_regular_then_critical_pods_within_the_grace_period_then_releases_the_lock(agent, logind):
    address, stand_in = logind
    agent.start(
        "--shutdown-grace-period=8s",
        "--shutdown-grace-period-critical-pods=3s",
        env={"DBUS_SYSTEM_BUS_ADDRESS": address},
    )
    agent.write_manifest("regular.yaml", _manifest("regular"))
    agent.write_manifest("critical.yaml", _manifest("critical", "  priorityClassName: system-node-critical\n"))
    assert stand_in.next(60) == "inhibited"
    for name in ("regular", "critical"):
        wait_for(lambda n=name: _running(agent, n), timeout=90, what=f"{name} to run")

    stand_in.send("shutdown")
    # The lock is released only once every pod is down (or out of time: 8 s for both groups).
    assert stand_in.next(60) == "released"
    assert not _running(agent, "regular") and not _running(agent, "critical")
    wait_for(lambda: _status(agent, "regular") == ("Failed", "Terminated"), timeout=30, what="regular's status")
    assert (
        agent.pod("regular")["pod"]["status"]["message"] == "Pod was terminated in response to imminent node shutdown."
    )
    log = agent.log()
    # Regular pods first, the critical one in the second group.
    assert log.index("Shutting down pods pods=1 grace=5.0") < log.index("Shutting down pods pods=1 grace=3.0")

    # Called off: the lock is taken again and the pods start again.
    stand_in.send("cancel")
    assert stand_in.next(60) == "inhibited"
    for name in ("regular", "critical"):
        wait_for(lambda n=name: _running(agent, n), timeout=90, what=f"{name} to run again")


def test_without_logind_a_plain_stop_leaves_the_pods_running(agent, tmp_path):
    # No bus at this address: no lock, and SIGTERM outside a system shutdown stops only the agent.
    agent.start(
        "--shutdown-grace-period=5s",
        "--shutdown-grace-period-critical-pods=1s",
        env={"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path}/none"},
    )
    agent.write_manifest("regular.yaml", _manifest("regular"))
    wait_for(lambda: _running(agent, "regular"), timeout=90, what="regular to run")
    wait_for(
        lambda: "only on SIGTERM during a system shutdown" in agent.log(), timeout=30, what="the fallback to be logged"
    )
    assert agent.stop() == 0
    assert _running(agent, "regular")
