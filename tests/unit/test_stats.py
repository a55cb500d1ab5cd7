"""Stats: cgroup and /proc parsers, CPU rates, the collector on a fixture tree, the Summary and metrics shapes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgelet.cgroups.stats import CgroupUsage, parse_flat_keyed, read_usage, usage_v1, usage_v2, working_set
from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
from edgelet.runtime.layout import RuntimePaths
from edgelet.stats.collector import StatsCollector, rate
from edgelet.stats.procfs import disk_usage, node_memory, parse_meminfo, parse_net_dev, parse_proc_stat_cpu
from edgelet.stats.summary import cadvisor_metrics, resource_metrics, summary
from edgelet.util.clock import FakeClock

V1_STAT = """cache 100
rss 50
inactive_file 10
pgfault 7
pgmajfault 1
total_rss 4096
total_inactive_file 1000
total_pgfault 70
total_pgmajfault 2
"""
V2_STAT = "anon 2048\nfile 8192\ninactive_file 3000\npgfault 9\npgmajfault 0\n"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a 1\nb 2\n", {"a": 1, "b": 2}),
        ("a 1\nbad line here\nc x\n", {"a": 1}),
        ("", {}),
    ],
)
def test_parse_flat_keyed(text, expected):
    assert parse_flat_keyed(text) == expected


@pytest.mark.parametrize(
    "usage, inactive, expected",
    [
        (10_000, 1_000, 9_000),
        (10_000, None, 10_000),
        (500, 1_000, 0),  # inactive counted over the whole hierarchy may exceed usage: never negative
        (None, 5, None),
    ],
)
def test_working_set(usage, inactive, expected):
    assert working_set(usage, inactive) == expected


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ("123456789\n", "10000\n", V1_STAT, "3\n"),
            CgroupUsage(
                cpu_ns=123456789,
                memory_usage=10000,
                memory_working_set=9000,
                memory_rss=4096,
                page_faults=70,
                major_page_faults=2,
                pids=3,
            ),
        ),
        ((None, None, None, None), CgroupUsage()),
        (("x", "10000", None, None), CgroupUsage(memory_usage=10000, memory_working_set=10000)),
    ],
)
def test_usage_v1(args, expected):
    assert usage_v1(*args) == expected


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n", "20000\n", V2_STAT, "4\n"),
            CgroupUsage(
                cpu_ns=1_500_000,
                memory_usage=20000,
                memory_working_set=17000,
                memory_rss=2048,
                page_faults=9,
                major_page_faults=0,
                pids=4,
            ),
        ),
        ((None, "max\n", None, None), CgroupUsage()),
    ],
)
def test_usage_v2(args, expected):
    assert usage_v2(*args) == expected


NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  999       9    0    0    0     0          0         0      999       9    0    0    0     0       0          0
  eth0: 1000      10    1    0    0     0          0         0     2000      20    2    0    0     0       0          0
 veth1: 5 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0
garbage line
"""


def test_parse_net_dev():
    got = parse_net_dev(NET_DEV)
    assert [(i.name, i.rx_bytes, i.rx_errors, i.tx_bytes, i.tx_errors) for i in got] == [
        ("eth0", 1000, 1, 2000, 2),
        ("veth1", 5, 0, 6, 0),
    ]
    assert parse_net_dev("") == []


@pytest.mark.parametrize(
    "text, ticks, expected",
    [
        ("cpu  100 10 50 1000 20 5 5 0 0 0\ncpu0 1 1 1 1\n", 100, (100 + 10 + 50 + 5 + 5) * 10_000_000),
        ("cpu  1 2 3 4\n", 100, 6 * 10_000_000),  # old kernels: fewer fields
        ("intr 1\n", 100, None),
        ("cpu  a b c\n", 100, None),
    ],
)
def test_parse_proc_stat_cpu(text, ticks, expected):
    assert parse_proc_stat_cpu(text, ticks) == expected


def test_meminfo_and_node_memory():
    info = parse_meminfo(
        "MemTotal: 1000 kB\nMemFree: 200 kB\nMemAvailable: 600 kB\nInactive(file): 100 kB\n"
        "AnonPages: 300 kB\nHugePages_Total: 0\n"
    )
    assert info["MemTotal"] == 1_024_000 and info["HugePages_Total"] == 0
    m = node_memory(info)
    assert (m.total, m.available, m.usage, m.working_set, m.rss) == (1_024_000, 614_400, 819_200, 716_800, 307_200)
    assert node_memory({}) is None


@pytest.mark.parametrize(
    "prev, now, value, expected",
    [
        (None, 10.0, 5, None),
        ((0.0, 0), 2.0, 1_000_000_000, 500_000_000),  # half a core
        ((5.0, 100), 5.0, 200, None),  # no time elapsed
        ((0.0, 500), 1.0, 100, None),  # counter went back: a new cgroup
        ((0.0, 0), 1.0, None, None),
    ],
)
def test_rate(prev, now, value, expected):
    assert rate(prev, now, value) == expected


def test_disk_usage_counts_blocks_once_per_inode(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * 10_000)
    os.link(tmp_path / "d" / "f", tmp_path / "d" / "hard")
    (tmp_path / "link").symlink_to("/etc")
    got = disk_usage(tmp_path)
    assert got.inodes == 3  # d, f (its hard link once), the symlink
    assert got.bytes >= 10_000
    assert disk_usage(tmp_path / "missing").bytes == 0


def _cgroup_v1_tree(mount: Path, rel: str, cpu: int, usage: int, inactive: int, pids: int) -> None:
    for ctl, files in (
        ("cpu,cpuacct", {"cpuacct.usage": str(cpu)}),
        (
            "memory",
            {"memory.usage_in_bytes": str(usage), "memory.stat": f"total_rss 100\ntotal_inactive_file {inactive}\n"},
        ),
        ("pids", {"pids.current": str(pids)}),
    ):
        d = mount / ctl / rel.strip("/")
        d.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (d / name).write_text(text + "\n")


def _proc_tree(proc: Path, sandbox_pid: int) -> None:
    (proc / str(sandbox_pid) / "net").mkdir(parents=True)
    (proc / str(sandbox_pid) / "net" / "dev").write_text(NET_DEV)
    (proc / "stat").write_text("cpu  100 0 100 1000 0 0 0 0\nbtime 1600000000\n")
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemFree: 200 kB\nMemAvailable: 600 kB\n")
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "pid_max").write_text("32768\n")


@pytest.fixture
def fixture_host(tmp_path):
    paths = RuntimePaths(
        root_dir=tmp_path / "root", run_dir=tmp_path / "run", log_dir=tmp_path / "log", cgroup_root="/kp"
    )
    mount, proc = tmp_path / "cg", tmp_path / "proc"
    _cgroup_v1_tree(mount, "/kp/podu1", cpu=3_000_000_000, usage=50_000, inactive=10_000, pids=3)
    _cgroup_v1_tree(mount, "/kp/podu1/c1", cpu=2_000_000_000, usage=40_000, inactive=5_000, pids=2)
    _proc_tree(proc, 4242)
    upper = paths.pod_dir("u1") / "containers" / "app" / "0" / "upper"
    upper.mkdir(parents=True)
    (upper / "written").write_bytes(b"y" * 8192)
    logs = paths.pod_log_dir("default", "web-n1", "u1") / "app"
    logs.mkdir(parents=True)
    (logs / "0.log").write_bytes(b"z" * 4096)
    sandbox = SandboxRecord("s1", "u1", "web-n1", "default", 0, "running", 4242, 1_600_000_100.0)
    container = ContainerRecord(
        "c1",
        "u1",
        "web-n1",
        "default",
        "app",
        0,
        "h",
        "s1",
        "running",
        4243,
        1_600_000_101.0,
        started_at=1_600_000_102.0,
        image="busybox",
    )
    exited = ContainerRecord("c0", "u1", "web-n1", "default", "init", 0, "h", "s1", "exited", None, 1_600_000_100.5)
    pods = {"u1": PodRuntimeStatus("u1", "web-n1", "default", (sandbox,), (container, exited))}
    clock = FakeClock(1_600_001_000.0)
    collector = StatsCollector(paths, lambda: pods, clock, node_name="n1", cgroup_mount=mount, proc=proc)
    return collector, clock, mount


def test_collector_reads_pods_containers_and_rates(fixture_host):
    collector, clock, mount = fixture_host
    first = collector.snapshot()
    (pod,) = first.pods
    assert (pod.name, pod.namespace, pod.uid, pod.start_time) == ("web-n1", "default", "u1", 1_600_000_100.0)
    assert [c.name for c in pod.containers] == ["app"]  # only running containers, as kubelet
    c = pod.containers[0]
    assert (c.usage.cpu_ns, c.usage.memory_working_set, c.usage.pids, c.nano_cores) == (2_000_000_000, 35_000, 2, None)
    assert c.rootfs.bytes >= 8192 and c.logs.bytes >= 4096 and c.start_time == 1_600_000_102.0
    assert pod.usage.memory_working_set == 40_000 and pod.usage.pids == 3
    assert [i.name for i in pod.interfaces] == ["eth0", "veth1"]
    assert first.node.memory.total == 1_024_000 and first.node.start_time == 1_600_000_000.0
    assert collector.snapshot() is first  # cached
    clock.advance(2.0)
    (mount / "cpu,cpuacct" / "kp" / "podu1" / "c1" / "cpuacct.usage").write_text("3000000000\n")
    (c2,) = collector.snapshot().pods[0].containers
    assert c2.nano_cores == 500_000_000  # 1 s of CPU over 2 s


def test_summary_shape(fixture_host):
    collector, _, _ = fixture_host
    body = summary(collector.snapshot())
    node, (pod,) = body["node"], body["pods"]
    assert node["nodeName"] == "n1" and node["startTime"] == "2020-09-13T12:26:40Z"
    assert node["cpu"]["usageCoreNanoSeconds"] == 200 * 10_000_000 and "usageNanoCores" not in node["cpu"]
    assert set(node["memory"]) == {"time", "availableBytes", "usageBytes", "workingSetBytes", "rssBytes"}
    assert node["rlimit"]["maxpid"] == 32768
    assert pod["podRef"] == {"name": "web-n1", "namespace": "default", "uid": "u1"}
    assert pod["network"]["name"] == "eth0" and pod["network"]["rxBytes"] == 1000
    assert [i["name"] for i in pod["network"]["interfaces"]] == ["eth0", "veth1"]
    assert pod["process_stats"] == {"process_count": 3}
    (c,) = pod["containers"]
    assert c["name"] == "app" and c["memory"]["workingSetBytes"] == 35_000 and c["memory"]["rssBytes"] == 100
    assert c["rootfs"]["usedBytes"] >= 8192 and c["logs"]["usedBytes"] >= 4096
    assert pod["ephemeral-storage"]["usedBytes"] >= c["rootfs"]["usedBytes"] + c["logs"]["usedBytes"]


def test_metrics_text_parses(fixture_host):
    from prometheus_client.parser import text_string_to_metric_families

    collector, _, _ = fixture_host
    snap = collector.snapshot()
    fams = {f.name: f for f in text_string_to_metric_families(resource_metrics(snap).decode())}
    cpu = {s.name: s for s in fams["container_cpu_usage_seconds"].samples}
    sample = cpu["container_cpu_usage_seconds_total"]
    assert sample.labels == {"container": "app", "namespace": "default", "pod": "web-n1"} and sample.value == 2.0
    assert fams["pod_memory_working_set_bytes"].samples[0].value == 40_000
    assert fams["node_memory_working_set_bytes"].samples[0].value > 0
    cad = {f.name: f for f in text_string_to_metric_families(cadvisor_metrics(snap, "/kp").decode())}
    ws = {s.labels["container"]: s for s in cad["container_memory_working_set_bytes"].samples}
    assert ws["app"].labels["pod"] == "web-n1" and ws["app"].value == 35_000 and ws[""].value == 40_000
    rx = cad["container_network_receive_bytes"].samples
    assert {s.labels["interface"]: s.value for s in rx} == {"eth0": 1000, "veth1": 5}


def test_read_usage_missing_cgroup(tmp_path):
    assert read_usage("/nope", tmp_path) is None


SUMMARY = {
    "node": {
        "cpu": {"usageNanoCores": 250_000_000},
        "memory": {"workingSetBytes": 512 * 1024 * 1024},
        "fs": {"capacityBytes": 4 << 30, "usedBytes": 1 << 30},
    },
    "pods": [
        {
            "podRef": {"name": "web-n1", "namespace": "default", "uid": "u"},
            "cpu": {"usageNanoCores": 12_500_000},
            "memory": {"workingSetBytes": 35 * 1024 * 1024},
            "containers": [
                {"name": "b", "cpu": {}, "memory": {"workingSetBytes": 1 << 20}},
                {"name": "a", "cpu": {"usageNanoCores": 3_000_000}, "memory": {"workingSetBytes": 34 << 20}},
            ],
        },
        {"podRef": {"name": "agent-n1", "namespace": "kube-system", "uid": "v"}, "containers": []},
    ],
}


def test_top_tables():
    from edgelet.cli.top import container_rows, has_rates, pod_rows
    from edgelet.util.table import format_table

    assert format_table(pod_rows(SUMMARY)).splitlines() == [
        "NAMESPACE     NAME       CPU(cores)   MEMORY(bytes)",
        "default       web-n1     12m          35Mi",
        "kube-system   agent-n1   -            -",
    ]
    assert format_table(container_rows(SUMMARY, "default")).splitlines() == [
        "NAMESPACE   POD      NAME   CPU(cores)   MEMORY(bytes)",
        "default     web-n1   a      3m           34Mi",
        "default     web-n1   b      -            1Mi",
    ]
    assert not has_rates(SUMMARY) and has_rates({"pods": []})


def test_node_usage_rows():
    from edgelet.cli.node import usage_rows

    rows = dict(usage_rows(SUMMARY, {"cpu": "2", "memory": "2Gi", "pods": "110"}))
    assert rows["  cpu:"] == "250m (12%)" and rows["  memory:"] == "512Mi (25%)"
    assert rows["  ephemeral-storage:"] == "1024Mi of 4096Mi (25%)" and rows["  pods:"] == "2 running"
    assert "not running" in usage_rows(None, {})[0][1]
