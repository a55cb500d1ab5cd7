"""runc and crun pods side by side in a real agent: each pod on the handler its runtimeClassName (or the
agent's default when it was made) names, kept across a SIGKILL, a power cut and a restart with another default;
an unknown runtimeClassName refused."""

from __future__ import annotations

import os
import signal

import pytest

from tests.e2e.conftest import wait_for
from tests.e2e.test_agent import pod_yaml
from tests.e2e.test_power_loss import power_cut

pytestmark = pytest.mark.privileged


def on(handler: str | None, name: str, command: str = "exec sleep 300") -> str:
    text = pod_yaml(name, command)
    return text.replace("spec:\n", f"spec:\n  runtimeClassName: {handler}\n", 1) if handler else text


def handlers_of(agent, pod: str) -> set[str]:
    return {c["handler"] for c in agent.containers_of(pod)}


def running(agent, pod: str) -> dict[str, int]:
    return {c["id"]: c["pid"] for c in agent.containers_of(pod) if c["status"] == "running"}


def test_mixed_pods_are_adopted_after_a_sigkill_and_come_back_after_a_power_cut(agent, crun_ready):
    agent.start()
    agent.write_manifest("a.yaml", on(None, "plain"))  # the default: runc
    agent.write_manifest("b.yaml", on("crun", "fast"))
    agent.write_manifest("c.yaml", on("runc", "named"))
    for pod in ("plain", "fast", "named"):
        wait_for(lambda p=pod: (r := agent.pod(p)) and r["ready"] == "1/1", what=f"{pod} running")
    assert (handlers_of(agent, "plain"), handlers_of(agent, "fast"), handlers_of(agent, "named")) == (
        {"runc"},
        {"crun"},
        {"runc"},
    )
    assert agent.pod("fast")["runtime_handler"] == "crun" and agent.pod("plain")["runtime_handler"] == "runc"
    wide = agent.cli("pods", "-o", "wide")
    assert "RUNTIME" in wide and any("fast-testnode" in line and "crun" in line for line in wide.splitlines())
    assert "Runtime Handler:     crun" in agent.cli("describe", "pod", "fast")
    before = {pod: running(agent, pod) for pod in ("plain", "fast", "named")}

    agent.stop(signal.SIGKILL)
    agent.start()
    for pod in ("plain", "fast", "named"):
        wait_for(lambda p=pod: (r := agent.pod(p)) and r["ready"] == "1/1", what=f"{pod} adopted")
        assert running(agent, pod) == before[pod], f"{pod}: adopted, not restarted"
        assert agent.pod(pod)["restarts"] == 0

    power_cut(agent)
    agent.start()
    fresh = lambda: agent.snapshot()["agent_pid"] == agent.proc.pid  # noqa: E731
    for pod in ("plain", "fast", "named"):
        wait_for(lambda p=pod: fresh() and (r := agent.pod(p)) and r["ready"] == "1/1", timeout=30, what=f"{pod} back")
    assert (handlers_of(agent, "plain"), handlers_of(agent, "fast")) == ({"runc"}, {"crun"})

    # Removal goes through each pod's handler and leaves nothing under either root.
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        (agent.manifests / name).unlink()
    wait_for(lambda: not agent.runc_list(), timeout=30, what="every container of both handlers removed")
    assert agent.stop() == 0


def test_an_agent_restarted_with_another_default_keeps_running_pods_on_theirs(agent, crun_ready):
    agent.start()
    agent.write_manifest("a.yaml", on(None, "old", "exec sleep 300"))
    wait_for(lambda: (r := agent.pod("old")) and r["ready"] == "1/1", what="old running")
    assert handlers_of(agent, "old") == {"runc"}
    before = running(agent, "old")
    assert agent.stop() == 0

    agent.handler = "crun"  # the default changes (an upgrade, an edited config)
    agent.start()
    agent.write_manifest("b.yaml", on(None, "new"))
    wait_for(lambda: (r := agent.pod("new")) and r["ready"] == "1/1", what="new running")
    assert handlers_of(agent, "new") == {"crun"}
    assert running(agent, "old") == before and handlers_of(agent, "old") == {"runc"}
    # A restarted container joins its sandbox's handler, not the new default.
    (pid,) = before.values()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (r := agent.pod("old")) and r["restarts"] == 1 and r["ready"] == "1/1", what="old restarted")
    assert handlers_of(agent, "old") == {"runc"}
    assert agent.pod("old")["runtime_handler"] == "runc"
    assert agent.stop() == 0


def test_an_unknown_runtime_class_name_is_refused_naming_the_handlers(agent):
    agent.start()
    agent.write_manifest("k.yaml", on("kata", "exotic"))
    row = wait_for(lambda: (r := agent.pod("exotic")) and r["phase"] == "Failed" and r, what="the refusal")
    status = row["pod"]["status"]
    assert status["reason"] == "RuntimeClassNotFound"
    assert "runtimeClassName 'kata'" in status["message"] and "runc" in status["message"]
    assert not agent.containers_of("exotic")
    assert "RuntimeClassNotFound" in agent.cli("events")
    assert agent.stop() == 0
