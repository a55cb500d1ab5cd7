"""cgroup v1 and v2 writers against a temp dir standing in for /sys/fs/cgroup, and detect()."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from edgelet.cgroups import CgroupBusyError, CgroupError, CgroupV1, CgroupV2, detect
from edgelet.cgroups.qos import PodResources
from edgelet.cgroups.stats import parse_oom_kills, read_oom_kills

V1_HIERARCHIES = ("blkio", "cpu,cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "systemd")


def fake_rmdir(path: Path) -> None:
    # A real cgroupfs directory can be removed while its control files
    # exist; in a temp dir they must go first.
    for f in path.iterdir():
        if f.is_file():
            f.unlink()
    path.rmdir()


@pytest.fixture
def v1_mount(tmp_path: Path) -> Path:
    tmp_path = tmp_path / "v1"
    tmp_path.mkdir()
    for name in V1_HIERARCHIES:
        (tmp_path / name).mkdir()
        (tmp_path / name / "cgroup.procs").write_text("")
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-3\n")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.procs").write_text("")
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    (tmp_path / "cpu").symlink_to("cpu,cpuacct")
    return tmp_path


@pytest.fixture
def v2_mount(tmp_path: Path) -> Path:
    tmp_path = tmp_path / "v2"
    tmp_path.mkdir()
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (tmp_path / "cgroup.procs").write_text("")
    return tmp_path


def test_detect(v1_mount: Path, v2_mount: Path, tmp_path: Path):
    assert isinstance(detect(v1_mount), CgroupV1)
    assert isinstance(detect(v2_mount), CgroupV2)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CgroupError):
        detect(empty)


def test_detect_this_host():
    mount = Path("/sys/fs/cgroup")
    if not (mount / "cgroup.controllers").exists() and not (mount / "memory").is_dir():
        pytest.skip("no cgroup mount here")
    assert detect(mount).version in (1, 2)


def test_v1_hierarchies_skip_symlinks_and_unified(v1_mount: Path):
    names = [h.name for h in CgroupV1(v1_mount).hierarchies()]
    assert names == sorted(V1_HIERARCHIES)
    assert CgroupV1(v1_mount).hierarchy("cpuacct").name == "cpu,cpuacct"


def test_v1_create_write_pids_remove(v1_mount: Path):
    cg = CgroupV1(v1_mount, rmdir=fake_rmdir)
    path = "/edgelet/burstable/podabc"
    cg.create_pod(
        path, PodResources(cpu_shares=512, cpu_quota=50000, cpu_period=100000, memory_limit=2**27, pids_limit=1024)
    )
    assert (v1_mount / "pids/edgelet/burstable/podabc/pids.max").read_text() == "1024"
    for name in V1_HIERARCHIES:
        assert (v1_mount / name / "edgelet/burstable/podabc").is_dir()
    pod_cpu = v1_mount / "cpu,cpuacct" / "edgelet/burstable/podabc"
    assert (pod_cpu / "cpu.shares").read_text() == "512"
    assert (pod_cpu / "cpu.cfs_period_us").read_text() == "100000"
    assert (pod_cpu / "cpu.cfs_quota_us").read_text() == "50000"
    assert (v1_mount / "memory/edgelet/burstable/podabc/memory.limit_in_bytes").read_text() == str(2**27)
    # cpuset is filled down every new level, so tasks can join
    assert (v1_mount / "cpuset/edgelet/burstable/podabc/cpuset.cpus").read_text() == "0-3"
    assert (v1_mount / "cpuset/edgelet/cpuset.mems").read_text() == "0"
    assert cg.exists(path)

    # runc's container dirs below the pod, with processes
    ctr = v1_mount / "pids/edgelet/burstable/podabc/ctr1"
    ctr.mkdir()
    (ctr / "cgroup.procs").write_text("101\n102\n")
    (v1_mount / "memory/edgelet/burstable/podabc/cgroup.procs").write_text("7\n")
    assert cg.pids(path) == {7, 101, 102}

    cg.remove_pod(path)
    for name in V1_HIERARCHIES:
        assert not (v1_mount / name / "edgelet/burstable/podabc").exists()
        assert (v1_mount / name / "edgelet/burstable").is_dir()  # parents stay
    assert not cg.exists(path)
    assert cg.pids(path) == set()
    cg.remove_pod(path)  # absent: no error


def test_v1_best_effort_leaves_limits_alone(v1_mount: Path):
    cg = CgroupV1(v1_mount, rmdir=fake_rmdir)
    cg.create_pod("/k/besteffort/podx", PodResources(cpu_shares=2))
    pod_cpu = v1_mount / "cpu,cpuacct/k/besteffort/podx"
    assert (pod_cpu / "cpu.shares").read_text() == "2"
    assert not (pod_cpu / "cpu.cfs_quota_us").exists()
    assert not (v1_mount / "memory/k/besteffort/podx/memory.limit_in_bytes").exists()


def test_refuses_the_root(v1_mount: Path, v2_mount: Path):
    for cg in (CgroupV1(v1_mount), CgroupV2(v2_mount)):
        with pytest.raises(CgroupError):
            cg.remove_pod("/")


def test_remove_retries_busy_then_gives_up(v1_mount: Path):
    calls: list[Path] = []
    sleeps: list[float] = []

    def busy_twice(path: Path) -> None:
        calls.append(path)
        if len(calls) <= 2:
            raise OSError(errno.EBUSY, "Device or resource busy")
        fake_rmdir(path)

    only_one = v1_mount / "only"
    only_one.mkdir()
    (only_one / "pids").mkdir()
    (only_one / "pids" / "cgroup.procs").write_text("")
    cg = CgroupV1(only_one, rmdir=busy_twice, sleep=sleeps.append, remove_interval=0.01)
    cg.create_pod("/p", PodResources())
    cg.remove_pod("/p")
    assert len(calls) == 3 and sleeps == [0.01, 0.01]

    def always_busy(path: Path) -> None:
        raise OSError(errno.EBUSY, "Device or resource busy")

    cg = CgroupV1(only_one, rmdir=always_busy, sleep=sleeps.append, remove_attempts=3)
    cg.create_pod("/q", PodResources())
    with pytest.raises(CgroupBusyError, match="q"):
        cg.remove_pod("/q")


def test_write_errors_carry_the_path(v1_mount: Path):
    (v1_mount / "memory" / "k").mkdir()
    (v1_mount / "memory" / "k" / "pod1").mkdir()
    (v1_mount / "memory" / "k" / "pod1" / "memory.limit_in_bytes").mkdir()  # cannot be written as a file
    with pytest.raises(CgroupError, match="memory.limit_in_bytes") as info:
        CgroupV1(v1_mount).create_pod("/k/pod1", PodResources(memory_limit=1))
    assert isinstance(info.value.__cause__, OSError)


def test_v2_create_write_pids_remove(v2_mount: Path):
    cg = CgroupV2(v2_mount, rmdir=fake_rmdir)
    path = "/kubepods/podabc"
    cg.create_pod(
        path, PodResources(cpu_shares=1024, cpu_quota=200000, cpu_period=100000, memory_limit=2**30, pids_limit=64)
    )
    pod = v2_mount / "kubepods/podabc"
    assert (pod / "pids.max").read_text() == "64"
    enable = "+cpuset +cpu +io +memory +hugetlb +pids"
    assert (v2_mount / "cgroup.subtree_control").read_text() == enable
    assert (v2_mount / "kubepods/cgroup.subtree_control").read_text() == enable
    assert (pod / "cgroup.subtree_control").read_text() == enable
    assert (pod / "cpu.weight").read_text() == "39"
    assert (pod / "cpu.max").read_text() == "200000 100000"
    assert (pod / "memory.max").read_text() == str(2**30)
    (pod / "ctr").mkdir()
    (pod / "ctr" / "cgroup.procs").write_text("55\n")
    assert cg.pids(path) == {55}
    cg.remove_pod(path)
    assert not pod.exists() and (v2_mount / "kubepods").is_dir()
    cg.remove_pod(path)


def test_v2_unlimited_cpu(v2_mount: Path):
    cg = CgroupV2(v2_mount, rmdir=fake_rmdir)
    cg.create_pod("/k/burstable/podb", PodResources(cpu_shares=102, cpu_quota=0, cpu_period=100000))
    pod = v2_mount / "k/burstable/podb"
    assert (pod / "cpu.max").read_text() == "max 100000"
    assert not (pod / "memory.max").exists()


def test_v1_removal_includes_the_hybrid_unified_dir_and_tries_every_hierarchy(v1_mount: Path):
    # runc on a hybrid host also makes the pod's dir in the cgroup2 `unified` mount.
    (v1_mount / "unified/k/podu/ctr").mkdir(parents=True)
    busy = v1_mount / "memory/k/podu"
    busy.mkdir(parents=True)

    def rmdir(path: Path) -> None:
        if path == busy:
            raise OSError(errno.EBUSY, "Device or resource busy")
        fake_rmdir(path)

    cg = CgroupV1(v1_mount, rmdir=rmdir, sleep=lambda s: None, remove_attempts=2)
    cg.create_pod("/k/podu", PodResources())
    with pytest.raises(CgroupBusyError, match="memory"):
        cg.remove_pod("/k/podu")
    assert not (v1_mount / "unified/k/podu").exists(), "the busy memory dir did not stop the others"
    assert not (v1_mount / "pids/k/podu").exists()
    assert busy.exists()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", 2),  # v1 memory.oom_control
        ("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n", 1),  # v2 memory.events
        ("oom_kill_disable 0\nunder_oom 0\n", None),  # v1 before 4.13: no counter
        (None, None),
    ],
)
def test_parse_oom_kills(text, expected):
    assert parse_oom_kills(text) == expected


def test_read_oom_kills_on_both_layouts(v1_mount: Path, v2_mount: Path):
    ctr = v1_mount / "memory" / "kubepods" / "burstable" / "podx" / "c1"
    ctr.mkdir(parents=True)
    (ctr / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert read_oom_kills("/kubepods/burstable/podx/c1", v1_mount) == 1
    assert read_oom_kills("/kubepods/burstable/podx/gone", v1_mount) is None
    (v2_mount / "kubepods" / "podx" / "c1").mkdir(parents=True)
    (v2_mount / "kubepods" / "podx" / "c1" / "memory.events").write_text("oom 0\noom_kill 0\n")
    assert read_oom_kills("/kubepods/podx/c1", v2_mount) == 0


def test_v2_without_memory_leaves_the_memory_limit_out(v2_mount: Path):
    # Raspberry Pi OS without cgroup_enable=memory: the unified hierarchy offers no memory controller.
    (v2_mount / "cgroup.controllers").write_text("cpuset cpu io pids\n")
    CgroupV2(v2_mount).create_pod("/kubepods/podu", PodResources(cpu_shares=1024, memory_limit=1 << 20, pids_limit=9))
    pod = v2_mount / "kubepods" / "podu"
    assert (pod / "cpu.weight").read_text() == "39" and (pod / "pids.max").read_text() == "9"
    assert not (pod / "memory.max").exists()
    assert (v2_mount / "kubepods" / "cgroup.subtree_control").read_text() == "+cpuset +cpu +io +pids"


def test_add_process_places_a_pid_in_every_hierarchy_and_the_hybrid_unified_one(v1_mount: Path):
    CgroupV1(v1_mount).add_process("/kubepods/besteffort/podu1/conmon", 4242)
    for name in (*V1_HIERARCHIES, "unified"):
        assert (v1_mount / name / "kubepods/besteffort/podu1/conmon/cgroup.procs").read_text() == "4242"
    # A new cpuset cgroup gets its parent's cpus and mems, or it would refuse the pid.
    assert (v1_mount / "cpuset" / "kubepods/besteffort/podu1/conmon/cpuset.cpus").read_text() == "0-3"


def test_v2_add_process(v2_mount: Path):
    CgroupV2(v2_mount).add_process("/kubepods/podu1/conmon", 7)
    assert (v2_mount / "kubepods/podu1/conmon/cgroup.procs").read_text() == "7"
