"""Pod cgroups on a real agent: kubelet's QoS layout with the pod's limits read back from the kernel, and a
fork bomb held inside its pod by the pids limit while the agent and another pod carry on."""

from __future__ import annotations

import json
import os
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
    return any(
        c.get("status") == "running" and (c.get("annotations") or {}).get("io.edgelet.kind") == "container"
        for c in agent.containers_of(name)
    )


def test_pods_land_in_their_qos_cgroup_with_their_limits(runtime_handler, agent):
    agent.start()
    agent.write_manifest(
        "g.yaml", _pod("guaranteed", "exec sleep 3600", "    resources:\n      limits: {cpu: 250m, memory: 64Mi}\n")
    )
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
        pids = [
            int((bundle / "conmon.pid").read_text())
            for bundle in (agent.paths.root_dir / "pods" / uid).rglob("*")
            if (bundle / "conmon.pid").is_file()
        ]
        assert len(pids) == 1  # the container's: its sandbox has no pause process, so no conmon
        for pid in pids:
            placed = dict(line.split(":", 2)[1:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
            assert placed["memory"] == placed["name=systemd"] == f"/{pod}/conmon", placed
    (Path(agent.manifests) / "g.yaml").unlink()
    (Path(agent.manifests) / "b.yaml").unlink()
    wait_for(
        lambda: not (CGROUP / "pids" / guaranteed).exists() and not (CGROUP / "pids" / besteffort).exists(),
        timeout=60,
        what="the pod cgroups to go with their pods",
    )


def test_a_fork_bomb_stays_inside_its_pod(agent):
    agent.start("--pod-max-pids=64")
    agent.write_manifest("calm.yaml", _pod("calm", "exec sleep 3600"))
    # A pod-level limit lower than the node's wins.
    agent.write_manifest(
        "bomb.yaml",
        _pod("bomb", "b() { b | b & }; b; sleep 3600", pod_resources="  resources:\n    limits: {pids: 32}\n"),
    )
    wait_for(lambda: _running(agent, "calm") and _running(agent, "bomb"), timeout=90, what="both pods to run")
    root = agent.paths.cgroup_root.strip("/")
    bomb = f"{root}/besteffort/pod{_uid(agent, 'bomb')}"
    assert (CGROUP / "pids" / bomb / "pids.max").read_text().strip() == "32"
    # The kernel counts the forks the limit refused: the bomb has reached it. (Its processes spawn and exit, so
    # pids.current swings, and the whole bomb can die out once forks fail: a poll of it may never see the top.)
    wait_for(lambda: _refused_forks(CGROUP / "pids" / bomb) > 0, timeout=90, what="the bomb to reach its limit")
    time.sleep(1)  # let it keep trying
    peak = CGROUP / "pids" / bomb / "pids.peak"  # Linux 6.1+; the current count on older kernels
    assert int((peak if peak.exists() else peak.with_name("pids.current")).read_text()) <= 32
    # The agent answers, and the other pod still runs and can start processes.
    assert "calm-testnode" in agent.cli("pods")
    (calm,) = [c for c in agent.containers_of("calm") if c["annotations"]["io.edgelet.kind"] == "container"]
    out = subprocess.run(
        ["runc", "--root", str(agent.paths.runc_root), "exec", calm["id"], "echo", "alive"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "alive", out.stderr
    (Path(agent.manifests) / "bomb.yaml").unlink()
    wait_for(lambda: not (CGROUP / "pids" / bomb).exists(), timeout=90, what="the bomb's pod to be removed")


def _refused_forks(cgroup: Path) -> int:
    """The forks refused in `cgroup` and below, by pids.events' `max` (cgroup v1 counts a refusal where the
    forking task is, not where the limit it hit is set)."""
    total = 0
    for events in cgroup.rglob("pids.events"):
        counts = dict(line.split() for line in events.read_text().splitlines())
        total += int(counts.get("max", 0))
    return total


def _status(agent, name: str) -> dict | None:
    row = agent.pod(name)
    return (row.get("pod") or {}).get("status") if row else None


def test_a_memory_hog_is_oom_killed_with_137(runtime_handler, agent):
    agent.start()
    # dd's 64 MiB buffer is touched as it reads /dev/zero: the container's 32 MiB limit kills it.
    agent.write_manifest(
        "hog.yaml",
        f"""apiVersion: v1
kind: Pod
metadata:
  name: hog
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {IMAGE}
    command: ["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"]
    resources:
      limits: {{memory: 32Mi}}
""",
    )
    status = wait_for(
        lambda: (s := _status(agent, "hog")) and s.get("phase") == "Failed" and s, timeout=90, what="the hog to fail"
    )
    (cs,) = status["containerStatuses"]
    terminated = cs["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled"), terminated
    # A memory limit without a cpu one is Burstable; the pod cgroup carries the pod's summed limit, and the
    # container's own cgroup the kill that its counter reported.
    root = agent.paths.cgroup_root.strip("/")
    pod = CGROUP / "memory" / root / "burstable" / f"pod{_uid(agent, 'hog')}"
    assert (pod / "memory.limit_in_bytes").read_text().strip() == str(32 << 20)
    # The kill is kept as the bundle's oom marker (the exited instance's runc state and cgroup are released).
    uid = _uid(agent, "hog")
    assert list(agent.paths.pod_dir(uid).rglob("oom")), "no oom marker in the container's bundle"


def test_reservations_cap_the_whole_pod_tree(agent):
    agent.start("--system-reserved=memory=1Gi,pid=1000", "--kube-reserved=cpu=500m,memory=256Mi")
    agent.write_manifest("b.yaml", _pod("besteffort", "exec sleep 3600"))
    wait_for(lambda: _running(agent, "besteffort"), timeout=90, what="the pod to run")
    root = agent.paths.cgroup_root.strip("/")
    mem_total = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    cpus = os.cpu_count() or 1
    # kubelet's node allocatable on the root pods cgroup: capacity less both reservations, read back from the kernel.
    assert (
        int((CGROUP / "memory" / root / "memory.limit_in_bytes").read_text())
        == (mem_total - (1 << 30) - (256 << 20)) // 4096 * 4096
    )
    assert int((CGROUP / "pids" / root / "pids.max").read_text()) == pid_max - 1000
    assert int((CGROUP / "cpu" / root / "cpu.shares").read_text()) == (cpus * 1000 - 500) * 1024 // 1000
    assert (CGROUP / "cpu" / root / "besteffort" / "cpu.shares").read_text().strip() == "2"
    # The pod sits below the capped root.
    assert (CGROUP / "memory" / root / "besteffort" / f"pod{_uid(agent, 'besteffort')}").is_dir()


def _without_memory_controller(agent) -> list[str]:
    """The agent's argv in a mount namespace of its own where the v1 memory hierarchy is unmounted: what a
    kernel without the memory controller looks like to edgelet, runc and conmon (the host keeps its own)."""
    return [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        'umount -l /sys/fs/cgroup/memory && exec "$@"',
        "sh",
    ]


def test_a_pod_needing_a_missing_controller_fails_at_once_with_the_fix(agent):
    manifest = _pod("limited", "exec sleep 3600", "    resources:\n      limits: {memory: 64Mi}\n")
    agent.write_manifest("limited.yaml", manifest)
    agent.write_manifest("free.yaml", _pod("free", "exec sleep 3600"))
    out = subprocess.run(
        [*_without_memory_controller(agent), *agent.argv("--runonce", "--runonce-timeout=150s")],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    line = next((line for line in out.stdout.splitlines() if "limited-testnode" in line), "")
    assert "CgroupControllersMissing" in line, out.stdout + out.stderr[-3000:]
    assert "memory" in line
    failed = next(line for line in out.stdout.splitlines() if line.startswith("failed: default/limited-testnode"))
    assert "cgroup_enable=memory cgroup_memory=1" in failed  # the summary carries the fix
    assert "RunContainerError" not in out.stdout and "runc" not in line
    status = agent.pod("limited")["pod"]["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "CgroupControllersMissing")
    assert "cgroup_enable=memory cgroup_memory=1" in status["message"]
    assert "--allow-missing-cgroup-controllers" in status["message"]
    assert not agent.containers_of("limited")  # refused before any runc create
    # A pod whose limits the kernel can apply still runs.
    assert _running(agent, "free")
    events = json.loads((agent.paths.run_dir / "events.json").read_text())
    assert any(
        e.get("reason") == "CgroupControllersMissing"
        for e in (events if isinstance(events, list) else events.get("events", []))
    )


def test_allow_missing_controllers_runs_the_pod_without_those_limits_and_warns(agent):
    agent.write_manifest(
        "limited.yaml", _pod("limited", "exec sleep 3600", "    resources:\n      limits: {memory: 64Mi}\n")
    )
    agent.start("--allow-missing-cgroup-controllers", wrapper=tuple(_without_memory_controller(agent)))
    wait_for(lambda: _running(agent, "limited"), timeout=90, what="the pod to run without its memory limit")
    (ctr,) = [c for c in agent.containers_of("limited") if c["annotations"]["io.edgelet.kind"] == "container"]
    spec = json.loads((Path(ctr["bundle"]) / "config.json").read_text())
    assert "memory" not in spec["linux"]["resources"] and spec["linux"]["resources"]["pids"]["limit"] == 1024
    text = wait_for(
        lambda: (t := agent.cli("events")) and "CgroupControllersMissing" in t and t,
        timeout=30,
        what="the warning event",
    )
    assert "running without memory limits" in text
