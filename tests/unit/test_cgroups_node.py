"""Table tests of node allocatable (reservations, the root pods cgroup's caps) and of the cgroup controller
admission (an injected controller list: Raspberry Pi OS's v2 without memory, v1 without pids, all present)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgelet.cgroups.allocatable import node_allocatable, parse_reserved, pods_cgroup_resources, read_capacity
from edgelet.cgroups.controllers import REASON, admit, available_controllers, needed_controllers, parse_v1_hierarchies
from edgelet.cgroups.qos import PodResources
from tests.unit.test_cgroups_qos import FULL, ctr, pod

MI = 2**20


@pytest.mark.parametrize(
    "pairs, expected",
    [
        ([], {}),
        ([("cpu", "500m"), ("memory", "256Mi")], {"cpu": 500, "memory": 256 * MI}),
        (
            [("cpu", "1"), ("pid", "100"), ("ephemeral-storage", "1Gi")],
            {"cpu": 1000, "pid": 100, "ephemeral-storage": 2**30},
        ),
    ],
)
def test_parse_reserved(pairs, expected):
    assert parse_reserved(pairs) == expected


@pytest.mark.parametrize(
    "pairs, error",
    [
        ([("gpu", "1")], "unknown resource"),
        ([("memory", "x")], "memory=x"),
        ([("cpu", "-100m")], "negative"),
    ],
)
def test_parse_reserved_refuses(pairs, error):
    with pytest.raises(ValueError, match=error):
        parse_reserved(pairs)


CAPACITY = {"cpu": 4000, "memory": 4096 * MI, "pid": 32768}


@pytest.mark.parametrize(
    "reserved, expected",
    [
        ((), CAPACITY),
        (({"cpu": 500, "memory": 512 * MI},), {"cpu": 3500, "memory": 3584 * MI, "pid": 32768}),
        # system-reserved and kube-reserved add up; ephemeral-storage is not part of the capacity read here
        (
            ({"memory": 512 * MI, "pid": 1000}, {"memory": 256 * MI, "ephemeral-storage": 1}),
            {"cpu": 4000, "memory": 3328 * MI, "pid": 31768},
        ),
        (({"memory": 8192 * MI},), {"cpu": 4000, "memory": 0, "pid": 32768}),  # never below zero
    ],
)
def test_node_allocatable(reserved, expected):
    assert node_allocatable(CAPACITY, *reserved) == expected


@pytest.mark.parametrize(
    "allocatable, expected",
    [
        (
            {"cpu": 3500, "memory": 3584 * MI, "pid": 31768},
            PodResources(cpu_shares=3584, memory_limit=3584 * MI, pids_limit=31768),
        ),  # kubelet: MilliCPUToShares(3500)
        ({"cpu": 1000}, PodResources(cpu_shares=1024)),
        ({"cpu": 4000, "memory": 0}, PodResources(cpu_shares=4096)),  # nothing left is no limit written, not 0
    ],
)
def test_pods_cgroup_resources(allocatable, expected):
    assert pods_cgroup_resources(allocatable) == expected


def test_read_capacity(tmp_path: Path):
    (tmp_path / "meminfo").write_text("MemTotal:        1024 kB\nMemFree: 10 kB\n")
    (tmp_path / "pid_max").write_text("4194304\n")
    cap = read_capacity(tmp_path / "meminfo", tmp_path / "pid_max")
    assert cap["memory"] == 1024 * 1024 and cap["pid"] == 4194304 and cap["cpu"] >= 1000
    assert "memory" not in read_capacity(tmp_path / "absent", tmp_path / "absent")


@pytest.mark.parametrize(
    "label, p, pids, expected",
    [
        ("best effort, no pids limit", pod(ctr()), None, set()),
        ("best effort, node pids limit", pod(ctr()), 1024, {"pids"}),
        ("memory limit", pod(ctr(limits={"memory": "64Mi"})), None, {"memory"}),
        ("cpu request", pod(ctr(requests={"cpu": "100m"})), None, {"cpu"}),
        ("guaranteed", pod(ctr(limits=FULL)), 1024, {"cpu", "memory", "pids"}),
        ("an init container's memory limit", pod(ctr(), init=[ctr("i", limits={"memory": "1Gi"})]), None, {"memory"}),
    ],
)
def test_needed_controllers(label, p, pids, expected):
    assert needed_controllers(p, pids) == expected


PI_V2 = frozenset({"cpuset", "cpu", "io", "pids"})  # Raspberry Pi OS without cgroup_enable=memory
ALL = frozenset({"cpuset", "cpu", "io", "memory", "hugetlb", "pids"})


@pytest.mark.parametrize(
    "label, needed, available, allow, refused, fix",
    [
        ("all there", {"cpu", "memory", "pids"}, ALL, False, None, None),
        ("nothing needed", set(), frozenset(), False, None, None),
        ("pi without memory", {"memory", "pids"}, PI_V2, False, True, "cgroup_enable=memory cgroup_memory=1"),
        ("pi without memory, allowed", {"memory"}, PI_V2, True, False, "cgroup_enable=memory cgroup_memory=1"),
        ("pi, a pod without a memory limit runs", {"cpu", "pids"}, PI_V2, False, None, None),
        ("v1 without pids", {"pids"}, frozenset({"cpu", "cpuacct", "memory"}), False, True, "mount the pids"),
    ],
)
def test_admit(label, needed, available, allow, refused, fix):
    verdict = admit(
        frozenset(needed),
        available,
        allow_missing=allow,
        v2=label.startswith("pi"),
        cmdline_file="/boot/firmware/cmdline.txt",
    )
    if refused is None:
        assert verdict is None
        return
    assert verdict is not None and verdict.refused is refused and verdict.reason == REASON
    assert fix in verdict.message
    if refused:
        assert "--allow-missing-cgroup-controllers" in verdict.message
        assert ("/boot/firmware/cmdline.txt" in verdict.message) == ("memory" in needed)
    else:
        assert verdict.message.startswith("running without memory limits")


def test_available_controllers_on_fixture_trees(tmp_path: Path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io pids\n")
    assert available_controllers(v2) == PI_V2
    v1 = tmp_path / "v1"
    for name in ("cpu,cpuacct", "memory", "unified"):
        (v1 / name).mkdir(parents=True)
        (v1 / name / "cgroup.procs").write_text("")
    (v1 / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    assert available_controllers(v1) == {"cpu", "cpuacct", "memory"}
    assert parse_v1_hierarchies(["name=systemd", "net_cls,net_prio"]) == {"name=systemd", "net_cls", "net_prio"}


def test_available_controllers_on_this_host():
    assert {"cpu", "memory", "pids"} <= available_controllers()
