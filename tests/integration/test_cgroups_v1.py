"""Real cgroup v1: create a pod cgroup under a unique test parent, move a process in, remove it, leave nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from edgelet.cgroups import CgroupBusyError, CgroupV1, detect
from edgelet.cgroups.qos import PodResources, pod_cgroup_path

pytestmark = pytest.mark.privileged

MOUNT = Path("/sys/fs/cgroup")


@pytest.fixture
def cgroups() -> CgroupV1:
    cg = detect(MOUNT)
    if not isinstance(cg, CgroupV1):
        pytest.skip("this host is not cgroup v1")
    return cg


def _leftovers(cg: CgroupV1, root: str) -> list[Path]:
    return [h / root.strip("/") for h in cg.hierarchies() if (h / root.strip("/")).exists()]


def test_create_and_remove_pod_cgroup(cgroups: CgroupV1, runtime_paths):
    root = runtime_paths.cgroup_root
    path = pod_cgroup_path(root, "Burstable", "0123-test")
    rel = path.strip("/")
    cgroups.create_pod(path, PodResources(cpu_shares=256, cpu_quota=50000, cpu_period=100000, memory_limit=64 * 2**20))
    try:
        for h in cgroups.hierarchies():
            assert (h / rel).is_dir(), h
        cpu = cgroups.hierarchy("cpu")
        assert (cpu / rel / "cpu.shares").read_text().strip() == "256"
        assert (cpu / rel / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (cpu / rel / "cpu.cfs_period_us").read_text().strip() == "100000"
        memory = cgroups.hierarchy("memory")
        assert (memory / rel / "memory.limit_in_bytes").read_text().strip() == str(64 * 2**20)
        cpuset = cgroups.hierarchy("cpuset")
        if cpuset is not None:
            assert (cpuset / rel / "cpuset.cpus").read_text().strip() == (cpuset / "cpuset.cpus").read_text().strip()

        # Idempotent: creating again rewrites values.
        cgroups.create_pod(path, PodResources(cpu_shares=512))
        assert (cpu / rel / "cpu.shares").read_text().strip() == "512"

        # A process in a child cgroup, as runc would leave it.
        proc = subprocess.Popen(["sleep", "30"])
        try:
            for h in cgroups.hierarchies():
                (h / rel / "ctr").mkdir()
                for knob in ("cpuset.cpus", "cpuset.mems"):  # an empty cpuset cannot take a task
                    if (h / rel / knob).exists():
                        (h / rel / "ctr" / knob).write_text((h / rel / knob).read_text())
                (h / rel / "ctr" / "cgroup.procs").write_text(str(proc.pid))
            assert cgroups.pids(path) == {proc.pid}
            busy = CgroupV1(MOUNT, remove_attempts=2, remove_interval=0.0)
            with pytest.raises(CgroupBusyError):
                busy.remove_pod(path)
        finally:
            proc.kill()
            proc.wait()
        cgroups.remove_pod(path)
        for h in cgroups.hierarchies():
            assert not (h / rel).exists(), h
        assert cgroups.pids(path) == set()
        cgroups.remove_pod(path)  # absent is fine
    finally:
        cgroups.remove_pod(path)
        for parent in (f"{root}/burstable", root):
            cgroups.remove_pod(parent)
    assert _leftovers(cgroups, root) == []
