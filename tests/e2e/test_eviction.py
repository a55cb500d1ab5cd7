"""Node-pressure eviction on a real agent: the order, the critical pod kept, the static pods started again.

The node's signals come from a file the test writes (EDGELET_TEST_EVICTION_SIGNALS):
real pressure cannot be made on a shared machine without hurting it. Everything
else is real: the pods' cgroups, their kill, their status and their return.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged

Gi = 1 << 30


def _manifest(name: str, extra_spec: str = "", resources: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
{extra_spec}  containers:
  - name: app
    image: {IMAGE}
    command: ["sleep", "3600"]
{resources}"""


PODS = {
    "besteffort": _manifest("besteffort"),
    # Requests far above what `sleep` uses: not over its requests, so after the BestEffort pod.
    "burstable": _manifest(
        "burstable",
        resources="    resources:\n      requests:\n        memory: 256Mi\n      limits:\n        memory: 512Mi\n",
    ),
    "critical": _manifest("critical", extra_spec="  priorityClassName: system-node-critical\n"),
}


def _signals(path: Path, memory_available: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"memory.available": [memory_available, 16 * Gi]}))
    tmp.rename(path)


def _phase(agent, name: str) -> tuple[str | None, str | None]:
    row = agent.pod(name)
    if row is None:
        return None, None
    status = row["pod"].get("status") or {}
    return status.get("phase"), status.get("reason")


def _running(agent, name: str) -> bool:
    return any(
        c.get("status") == "running" and (c.get("annotations") or {}).get("io.edgelet.kind") == "container"
        for c in agent.containers_of(name)
    )


def test_memory_pressure_evicts_in_order_keeps_the_critical_pod_and_restarts_the_others(agent, tmp_path):
    signals = tmp_path / "signals.json"
    _signals(signals, 8 * Gi)
    agent.start(
        "--eviction-hard=memory.available<1Gi",
        "--eviction-monitoring-interval=1s",
        "--eviction-pressure-transition-period=3s",
        env={"EDGELET_TEST_EVICTION_SIGNALS": str(signals)},
    )
    for name, text in PODS.items():
        agent.write_manifest(f"{name}.yaml", text)
    for name in PODS:
        wait_for(lambda n=name: _running(agent, n), timeout=90, what=f"{name} to run")

    _signals(signals, 256 << 20)
    wait_for(lambda: _phase(agent, "besteffort") == ("Failed", "Evicted"), timeout=60, what="besteffort evicted")
    wait_for(lambda: _phase(agent, "burstable") == ("Failed", "Evicted"), timeout=60, what="burstable evicted")
    assert not _running(agent, "besteffort") and not _running(agent, "burstable")
    row = agent.pod("besteffort")
    assert "The node was low on resource: memory." in row["pod"]["status"]["message"]
    events = agent.cli("events", "-o", "json")
    assert any(e["reason"] == "Evicted" and e["object"]["name"] == "besteffort-testnode" for e in json.loads(events))
    # The CLI as a user reads it (issue 23): the pod's reason in STATUS, the pressure in the Node's conditions,
    # its events by the short name without the agent's --hostname-override.
    rows = {line.split()[1]: line.split() for line in agent.cli("pods").splitlines()[1:] if line.strip()}
    assert rows["besteffort-testnode"][3] == "Evicted"
    assert re.search(r"\n  MemoryPressure +True +KubeletHasInsufficientMemory ", agent.cli("node"))
    assert "Evicted" in agent.cli("events", "--for", "besteffort")
    # BestEffort first: it was evicted while the burstable pod still ran.
    log = agent.log()
    assert log.index("besteffort") < log.rindex("Evicting pod")
    assert _running(agent, "critical") and _phase(agent, "critical")[0] == "Running"

    _signals(signals, 8 * Gi)
    for name in ("besteffort", "burstable"):
        wait_for(
            lambda n=name: _running(agent, n) and _phase(agent, n) == ("Running", None),
            timeout=90,
            what=f"{name} to run again",
        )
    assert _running(agent, "critical")
    wait_for(
        lambda: re.search(r"\n  MemoryPressure +False ", agent.cli("node")),
        timeout=60,
        what="MemoryPressure False again",
    )


def test_a_bad_threshold_stops_the_start_with_the_flag_named(agent):
    done = agent.run_once("--eviction-hard=memory.free<1Gi")
    assert done.returncode == 1, done.stderr
    assert "--eviction-hard: unknown signal 'memory.free'" in done.stderr
    assert agent.runc_list() == []
