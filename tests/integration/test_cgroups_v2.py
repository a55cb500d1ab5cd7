"""Real cgroup v2: the v2 writer, the usage reader and the controller detection on a cgroup2 mount the test makes.

This machine runs cgroup v1 (and the hybrid `unified` mount holds no controller, all being bound to v1
hierarchies), so the kernel gives a real unified hierarchy with only what is free: cpu.stat and the core
files, no cpu, memory or pids controller. That is the Raspberry Pi case (v2 without memory) and worse;
the writer must build the pod tree, leave out the limits it cannot apply, and clean up; detection must see
exactly what is there. The test works inside a unique child of the mount (as a delegated subtree would be)
and never writes the hierarchy's root.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from edgelet.cgroups import CgroupV2, detect
from edgelet.cgroups.controllers import admit, available_controllers
from edgelet.cgroups.qos import PodResources, pod_cgroup_path
from edgelet.cgroups.stats import read_oom_kills, read_usage

pytestmark = pytest.mark.privileged


@pytest.fixture
def v2_root(tmp_path: Path):
    """A unique cgroup under a fresh cgroup2 mount of this kernel's unified hierarchy; removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount cgroup2")
    mnt = tmp_path / "cgroup2"
    mnt.mkdir()
    out = subprocess.run(["mount", "-t", "cgroup2", "none", str(mnt)], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount cgroup2 here: {out.stderr.strip()}")
    top = mnt / f"edgelet-test-{secrets.token_hex(5)}"
    top.mkdir()
    try:
        yield top
    finally:
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            d.rmdir()
        top.rmdir()
        subprocess.run(["umount", str(mnt)], check=True)


def test_the_v2_writer_builds_the_pod_tree_on_a_real_unified_hierarchy(v2_root: Path):
    cg = detect(v2_root, remove_attempts=1500, remove_interval=0.02)  # a killed task leaves slowly on a busy machine
    assert isinstance(cg, CgroupV2)
    free = available_controllers(v2_root)
    assert free == frozenset((v2_root / "cgroup.controllers").read_text().split())
    root = "/kubepods"
    pod = pod_cgroup_path(root, "Burstable", "u1")
    cg.create_pod(root, PodResources(cpu_shares=2048, memory_limit=1 << 30, pids_limit=4096))
    cg.create_pod(
        pod, PodResources(cpu_shares=256, cpu_quota=50000, cpu_period=100000, memory_limit=64 << 20, pids_limit=100)
    )
    target = v2_root / pod.strip("/")
    assert target.is_dir() and cg.exists(pod)
    # Each limit is written where the kernel offers its controller, and left out (not failed) where not.
    files = {"cpu": ("cpu.weight", "10"), "memory": ("memory.max", str(64 << 20)), "pids": ("pids.max", "100")}
    for controller, (name, expected) in files.items():
        if controller in free:
            assert (target / name).read_text().strip() == expected
        else:
            assert not (target / name).exists()
    # What the kernel offers is delegated down the tree to the pod (and so to runc's container cgroups).
    for level in (v2_root / "kubepods", v2_root / "kubepods" / "burstable", target):
        enabled = set((level / "cgroup.subtree_control").read_text().split())
        assert enabled == {c for c in ("cpuset", "cpu", "io", "memory", "hugetlb", "pids") if c in free}

    # A real process inside: seen by pids(), its CPU time read back from cpu.stat (a core file on v2).
    # It spins only once inside (a line on stdin lets it go), so the CPU time is charged to the new cgroup.
    proc = subprocess.Popen(
        ["sh", "-c", "read go; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 60"], stdin=subprocess.PIPE
    )
    try:
        ctr = target / "c1"
        ctr.mkdir()
        (ctr / "cgroup.procs").write_text(str(proc.pid))
        assert cg.pids(pod) == {proc.pid}
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        deadline = time.monotonic() + 60
        while (
            (usage := read_usage(f"{pod}/c1", v2_root)) is not None and not usage.cpu_ns and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert usage is not None and usage.cpu_ns is not None and usage.cpu_ns > 0
        # No memory controller: no OOM counter to read, and no guess either.
        if "memory" not in free:
            assert read_oom_kills(f"{pod}/c1", v2_root) is None
    finally:
        proc.kill()
        proc.wait()
    cg.remove_pod(pod)
    assert not target.exists()
    cg.remove_pod(root)
    assert not (v2_root / "kubepods").exists()


def test_detection_on_the_real_mount_refuses_what_it_cannot_limit(v2_root: Path):
    free = available_controllers(v2_root)
    verdict = admit(frozenset({"memory"}), free, allow_missing=False, v2=True)
    if "memory" in free:
        assert verdict is None
    else:
        assert verdict is not None and verdict.refused and "cgroup_enable=memory" in verdict.message
