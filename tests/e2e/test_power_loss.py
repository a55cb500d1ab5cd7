"""A power cut: every process and mount gone, the run dir (tmpfs) emptied, the root dir kept; edgelet brings the pods back."""

from __future__ import annotations

import signal
import subprocess

import pytest

from edgelet.testing.cleanup import kill_processes_mentioning, unmount_under
from tests.e2e.conftest import wait_for
from tests.e2e.test_agent import pod_yaml

pytestmark = pytest.mark.privileged


def power_cut(agent) -> None:
    """What a reboot leaves: no containers, no conmon, no mounts, an empty /run; /var/lib and /var/log intact."""
    agent.stop(signal.SIGKILL)
    for c in agent.runc_list():
        subprocess.run(["runc", "--root", str(agent.paths.runc_root), "kill", c["id"], "KILL"], capture_output=True)
    kill_processes_mentioning(str(agent.paths.root_dir.parent))
    for c in agent.runc_list():
        subprocess.run(["runc", "--root", str(agent.paths.runc_root), "delete", "-f", c["id"]], capture_output=True)
    unmount_under(agent.paths.root_dir.parent)
    subprocess.run(["rm", "-rf", str(agent.paths.run_dir)], check=True)
    agent.paths.run_dir.mkdir()


def test_pods_come_back_after_a_power_cut(agent):
    agent.start()
    agent.write_manifest("a.yaml", pod_yaml("svc", "exec sleep 300", containers=2))
    agent.write_manifest("b.yaml", pod_yaml("job", "echo done", restart="OnFailure"))
    before = wait_for(lambda: (r := agent.pod("svc")) and r["ready"] == "2/2" and r, what="svc running")
    wait_for(lambda: (r := agent.pod("job")) and r["status"] == "Completed", what="job completed")
    power_cut(agent)
    agent.start()
    fresh = lambda: agent.snapshot()["agent_pid"] == agent.proc.pid  # noqa: E731 (pods.json survived the cut)
    after = wait_for(lambda: fresh() and (r := agent.pod("svc")) and r["ready"] == "2/2" and r, timeout=30,
                     what="svc back")
    assert after["uid"] == before["uid"]
    running = [c for c in agent.containers_of("svc") if c["status"] == "running"]
    assert len(running) == 3, "pause sandbox and two containers run again"
    # A completed OnFailure pod is not run again: conmon's persist dir (in the root dir) kept its exit code.
    job = wait_for(lambda: fresh() and (r := agent.pod("job")) and r["status"] == "Completed" and r, timeout=30,
                   what="job completed")
    assert job["restarts"] == 0
    assert not (agent.paths.root_dir / "pods" / job["uid"] / "containers" / "c0" / "1").exists(), "not run again"
    out = agent.cli("pods")
    assert "svc-testnode" in out and "job-testnode" in out
