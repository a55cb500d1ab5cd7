"""Pod cgroups on a real agent: kubelet's QoS layout with the pod's limits read back from the kernel, and a
fork bomb held inside its pod by the pids limit while the agent and another pod carry on."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import IMAGE, wait_for

pytestmark = pytest.mark.privileged

CGROUP = Path("/sys/fs/cgroup")


def _pod(name: str, command: str, resources: str = "", pod_resources: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
{pod_resources}  containers:
  - name: app
    image: {IMAGE}
    command: ["sh", "-c", {command!r}]
{resources}"""


def _uid(agent, name: str) -> str:
    row = wait_for(lambda: agent.pod(name), what=f"{name} in the pods table")
    return row["uid"]


def _running(agent, name: str) -> bool:
    return any(c.get("status") == "running" and (c.get("annotations") or {}).get("io.edgelet.kind") == "container"
               for c in agent.containers_of(name))


def test_pods_land_in_their_qos_cgroup_with_their_limits(agent):
    agent.start()
    agent.write_manifest("g.yaml", _pod("guaranteed", "exec sleep 3600",
                                        "    resources:\n      limits: {cpu: 250m, memory: 64Mi}\n"))
    agent.write_manifest("b.yaml", _pod("besteffort", "exec sleep 3600"))
    for name in ("guaranteed", "besteffort"):
        wait_for(lambda n=name: _running(agent, n), timeout=90, what=f"{name} to run")
    root = agent.paths.cgroup_root.strip("/")
    g, b = _uid(agent, "guaranteed"), _uid(agent, "besteffort")
    guaranteed = f"{root}/pod{g}"
    besteffort = f"{root}/besteffort/pod{b}"
    assert (CGROUP / "memory" / guaranteed / "memory.limit_in_bytes").read_text().strip() == str(64 << 20)
    assert (CGROUP / "cpu" / guaranteed / "cpu.cfs_quota_us").read_text().strip() == "25000"
    assert (CGROUP / "cpu" / guaranteed / "cpu.shares").read_text().strip() == "256"
    assert (CGROUP / "cpu" / besteffort / "cpu.shares").read_text().strip() == "2"
    for pod in (guaranteed, besteffort):
        assert (CGROUP / "pids" / pod / "pids.max").read_text().strip() == "1024"  # --pod-max-pids' default
    # The containers are inside their pod's cgroup.
    (ctr,) = [c for c in agent.containers_of("besteffort") if c["annotations"]["io.edgelet.kind"] == "container"]
    assert (CGROUP / "pids" / besteffort / ctr["id"]).is_dir()
    # Their conmons too, in a `conmon` leaf (in every hierarchy, systemd's included): not in the cgroup of
    # the unit that started edgelet, so a runonce unit keeps none behind.
    for pod, uid in ((guaranteed, g), (besteffort, b)):
        pids = [int((bundle / "conmon.pid").read_text()) for bundle in
                (agent.paths.root_dir / "pods" / uid).rglob("*") if (bundle / "conmon.pid").is_file()]
        assert len(pids) == 2  # the sandbox's and the container's
        for pid in pids:
            placed = dict(line.split(":", 2)[1:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
            assert placed["memory"] == placed["name=systemd"] == f"/{pod}/conmon", placed
    (Path(agent.manifests) / "g.yaml").unlink()
    (Path(agent.manifests) / "b.yaml").unlink()
    wait_for(lambda: not (CGROUP / "pids" / guaranteed).exists() and not (CGROUP / "pids" / besteffort).exists(),
             timeout=60, what="the pod cgroups to go with their pods")


def test_a_fork_bomb_stays_inside_its_pod(agent):
    agent.start("--pod-max-pids=64")
    agent.write_manifest("calm.yaml", _pod("calm", "exec sleep 3600"))
    # A pod-level limit lower than the node's wins.
    agent.write_manifest("bomb.yaml", _pod("bomb", "b() { b | b & }; b; sleep 3600",
                                           pod_resources="  resources:\n    limits: {pids: 32}\n"))
    wait_for(lambda: _running(agent, "calm") and _running(agent, "bomb"), timeout=90, what="both pods to run")
    root = agent.paths.cgroup_root.strip("/")
    bomb = f"{root}/besteffort/pod{_uid(agent, 'bomb')}"
    assert (CGROUP / "pids" / bomb / "pids.max").read_text().strip() == "32"
    wait_for(lambda: int((CGROUP / "pids" / bomb / "pids.current").read_text()) >= 30, timeout=60,
             what="the bomb to reach its limit")
    time.sleep(1)  # let it keep trying
    assert int((CGROUP / "pids" / bomb / "pids.current").read_text()) <= 32
    # The agent answers, and the other pod still runs and can start processes.
    assert "calm-testnode" in agent.cli("pods")
    (calm,) = [c for c in agent.containers_of("calm") if c["annotations"]["io.edgelet.kind"] == "container"]
    out = subprocess.run(["runc", "--root", str(agent.paths.runc_root), "exec", calm["id"], "echo", "alive"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "alive", out.stderr
    (Path(agent.manifests) / "bomb.yaml").unlink()
    wait_for(lambda: not (CGROUP / "pids" / bomb).exists(), timeout=90, what="the bomb's pod to be removed")
