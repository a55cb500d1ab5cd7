"""A power cut: every process and mount gone, the run dir (tmpfs) emptied, the root dir kept; edgelet brings the pods back."""

from __future__ import annotations

import signal
import subprocess

import pytest

from edgelet.testing.cleanup import kill_processes_mentioning, unmount_under
from tests.e2e.conftest import IMAGE, wait_for
from tests.e2e.test_agent import pod_yaml

pytestmark = pytest.mark.privileged


def power_cut(agent) -> None:
    """What a reboot leaves: no containers, no conmon, no mounts, an empty /run; /var/lib and /var/log intact."""
    agent.stop(signal.SIGKILL)
    for c in agent.runc_list():  # every handler's
        subprocess.run([*agent.runtime_argv(c["id"]), "kill", c["id"], "KILL"], capture_output=True)
    kill_processes_mentioning(str(agent.paths.root_dir.parent))
    for c in agent.runc_list():
        subprocess.run([*agent.runtime_argv(c["id"]), "delete", "-f", c["id"]], capture_output=True)
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
    after = wait_for(
        lambda: fresh() and (r := agent.pod("svc")) and r["ready"] == "2/2" and r, timeout=30, what="svc back"
    )
    assert after["uid"] == before["uid"]
    running = [c for c in agent.containers_of("svc") if c["status"] == "running"]
    assert len(running) == 2, "both containers run again (their sandbox has no pause process)"
    # In a new sandbox: the old one's namespaces went with the power, its record with the next sync.
    new_sandbox = (agent.paths.root_dir / "pods" / after["uid"] / "sandbox" / "id").read_text().strip()
    assert {c["annotations"]["io.kubernetes.cri.sandbox-id"] for c in running} == {new_sandbox}
    assert {"ipc", "uts"} <= {p.name for p in (agent.paths.run_dir / "ns" / new_sandbox).iterdir()}
    # A completed OnFailure pod is not run again: conmon's persist dir (in the root dir) kept its exit code.
    job = wait_for(
        lambda: fresh() and (r := agent.pod("job")) and r["status"] == "Completed" and r,
        timeout=30,
        what="job completed",
    )
    assert job["restarts"] == 0
    assert not (agent.paths.root_dir / "pods" / job["uid"] / "containers" / "c0" / "1").exists(), "not run again"
    out = agent.cli("pods")
    assert "svc-testnode" in out and "job-testnode" in out


# --- every file edgelet writes for itself, corrupted in turn (issue 16.2) ----------------------------

CORRUPTIONS = [
    ("state/pods.json", "root", b'{"pods": [{"name": "half'),
    ("events.json", "run", b"\x00\x00garbage"),
    ("images/images.json", "root", b'{"version": 1, "images": [{"id": '),
    ("images/imported.json", "root", b"not json at all"),
]


@pytest.mark.parametrize("rel, base, data", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupt_file_is_treated_as_absent_and_the_pods_keep_running(agent, rel, base, data):
    manifest = f"""apiVersion: v1
kind: Pod
metadata:
  name: steady
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {IMAGE}
    command: ["sh", "-c", "exec sleep 3600"]
"""
    agent.start()
    agent.write_manifest("steady.yaml", manifest)
    wait_for(lambda: (r := agent.pod("steady")) and r["status"] == "Running", timeout=90, what="steady runs")
    wait_for(
        lambda: (agent.paths.root_dir / rel).exists() if base == "root" else (agent.paths.run_dir / rel).exists(),
        timeout=30,
        what=f"{rel} written",
    )
    (before,) = [c["id"] for c in agent.containers_of("steady") if c["annotations"]["io.edgelet.kind"] == "container"]
    assert agent.stop() == 0
    target = (agent.paths.root_dir if base == "root" else agent.paths.run_dir) / rel
    target.write_bytes(data)
    leftover = target.with_name(f".{target.name}.abc123xy")  # a write_atomic a crash interrupted
    leftover.write_bytes(b"partial")

    agent.start()
    wait_for(lambda: "edgelet started" in agent.log().split("Stopping edgelet")[-1], timeout=60, what="restart")
    wait_for(
        lambda: (r := agent.pod("steady")) and r["status"] == "Running" and r["restarts"] == 0,
        timeout=90,
        what="steady running on, as before",
    )
    (after,) = [c["id"] for c in agent.containers_of("steady") if c["annotations"]["io.edgelet.kind"] == "container"]
    assert after == before  # adopted, not restarted
    assert not leftover.exists()
    if rel == "images/images.json":
        # Set aside, and the import dir's archive imported again: the image is usable.
        assert list((agent.paths.root_dir / "images").glob("images.json.corrupt-*"))
        wait_for(lambda: "edgelet.local/busybox" in agent.cli("images"), timeout=60, what="image imported again")
