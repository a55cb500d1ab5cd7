"""An agent killed between a container's `runc create` and its `runc start` (issue 21): the next agent starts
the created instance, whose conmon waits, instead of killing and replacing it."""

from __future__ import annotations

import signal

import pytest

from edgelet.runtime.layout import ANN_CONTAINER_NAME
from edgelet.util.crashpoint import ENV as CRASH_ENV
from tests.e2e.conftest import wait_for
from tests.e2e.test_agent import pod_yaml

pytestmark = pytest.mark.privileged


def _status(agent, name: str) -> dict:
    row = agent.pod(name) or {}
    statuses = ((row.get("pod") or {}).get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else {}


def _instances(agent, pod: str) -> list[dict]:
    return [c for c in agent.containers_of(pod) if (c.get("annotations") or {}).get(ANN_CONTAINER_NAME) == "c0"]


def test_a_container_created_by_a_killed_agent_is_started_by_the_next_one(agent):
    agent.write_manifest("svc.yaml", pod_yaml("svc", "exec sleep 3600"))
    agent.start(env={CRASH_ENV: "container.create"})
    wait_for(lambda: agent.proc.poll() is not None, timeout=90, what="the agent to die at container.create")
    assert agent.proc.returncode == -signal.SIGKILL, agent.log()[-2000:]
    agent.proc = None
    agent._log.close()
    created = _instances(agent, "svc")
    assert [c["status"] for c in created] == ["created"], created

    agent.start()
    status = wait_for(
        lambda: (s := _status(agent, "svc")) and "running" in (s.get("state") or {}) and s,
        timeout=60,
        what="svc's container running under the new agent",
    )
    assert status["restartCount"] == 0, status
    assert not status.get("lastState"), status
    running = _instances(agent, "svc")
    assert [(c["id"], c["status"]) for c in running] == [(created[0]["id"], "running")], "the same instance, started"
    assert "Starting a container created by the previous agent" in agent.log()
    agent.stop()


def test_a_created_container_whose_conmon_died_with_the_agent_is_replaced(runtime_handler, agent):
    """Killed while conmon ran the container's `runc create` (before the agent read conmon's answer), the
    agent takes that conmon along (its answer meets a closed pipe): runc holds the instance created with
    nobody to record its exit. Started as it is, a pod that exits 3 showed exit code 255
    (ContainerStatusUnknown) for good, its bundle without runc state or exit file (chaos campaign, seed 21).
    It is killed and replaced by one under a live conmon instead: the exit reads 3. Under crun, conmon runs
    the agent's sealed copy of it by a descriptor of its own: the create goes through with the agent gone, and
    now and then conmon's answer is in the pipe before the agent is: that conmon lives, and its instance is
    started (seen once in make test); the exit reads 3 either way."""
    agent.write_manifest("fail.yaml", pod_yaml("fail", "echo failing; exit 3", restart="Never"))
    # The pod has no pause process (no sandbox conmon), so the first answer is the container's.
    agent.start(env={CRASH_ENV: "conmon.answer:1"})
    wait_for(lambda: agent.proc.poll() is not None, timeout=90, what="the agent to die at conmon.answer")
    assert agent.proc.returncode == -signal.SIGKILL, agent.log()[-2000:]
    agent.proc = None
    agent._log.close()
    created = wait_for(
        lambda: (c := _instances(agent, "fail")) and c[0]["status"] == "created" and c,
        timeout=30,
        what="runc create to finish",
    )
    assert len(created) == 1, created

    agent.start()
    terminated = wait_for(
        lambda: (s := _status(agent, "fail")) and (s.get("state") or {}).get("terminated"),
        timeout=60,
        what="fail's container to terminate under the new agent",
    )
    assert terminated["exitCode"] == 3, terminated
    if runtime_handler == "runc":
        # crun's create is quick: now and then conmon's answer is in the pipe before the agent is gone, and that
        # conmon lives on waiting for its start; starting its instance is then right. runc's never is.
        assert "Starting a container created by the previous agent" not in agent.log()
    agent.stop()
