"""Collects node, pod and container usage on demand, from the runtime's last relist, the cgroups and /proc, with a
short cache; CPU rates (nanocores) come from the previous sample of the same cgroup.

Nothing runs in the background: a device that is never asked for stats
pays nothing. Reading cgroup files costs microseconds; the disk-usage walks
(writable layers, logs, emptyDir volumes) are the expensive part and are
cached longer (FS_CACHE), as cAdvisor refreshes them on its own slow timer.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.cgroups.stats import CGROUP_MOUNT, CgroupUsage, read_usage
from edgelet.runtime.bundle import PodLayout
from edgelet.stats.procfs import (
    DiskUsage,
    FsInfo,
    InterfaceStats,
    NodeMemory,
    disk_usage,
    fs_info,
    node_memory,
    parse_meminfo,
    parse_net_dev,
    parse_proc_stat_cpu,
)

if TYPE_CHECKING:
    from edgelet.container.types import PodRuntimeStatus
    from edgelet.runtime.layout import RuntimePaths
    from edgelet.util.clock import Clock

CACHE = 0.5  # seconds a whole snapshot is served again (a scrape and `top` hitting together read once)
FS_CACHE = 30.0  # seconds a disk-usage walk is reused
RATE_MIN_INTERVAL = 1.0  # the previous sample for a CPU rate is kept until a newer one is at least this old


@dataclass(frozen=True)
class ContainerStats:
    name: str
    id: str
    start_time: float
    usage: CgroupUsage
    nano_cores: int | None
    rootfs: DiskUsage | None
    logs: DiskUsage | None
    image: str = ""


@dataclass(frozen=True)
class PodStats:
    uid: str
    name: str
    namespace: str
    start_time: float
    usage: CgroupUsage
    nano_cores: int | None
    containers: tuple[ContainerStats, ...]
    interfaces: tuple[InterfaceStats, ...] = ()
    host_network: bool = False
    volumes: DiskUsage | None = None
    cgroup: str = ""  # the pod's cgroup path (kubelet's QoS layout)


@dataclass(frozen=True)
class NodeStats:
    name: str
    start_time: float  # boot time
    cpu_ns: int | None
    nano_cores: int | None
    memory: NodeMemory | None
    fs: FsInfo | None  # the root dir's filesystem (nodefs)
    imagefs: FsInfo | None
    interfaces: tuple[InterfaceStats, ...] = ()
    max_pids: int | None = None
    running_pids: int | None = None


@dataclass(frozen=True)
class Snapshot:
    time: float  # wall clock, seconds
    node: NodeStats
    pods: tuple[PodStats, ...] = field(default=())


def rate(prev: tuple[float, int] | None, now: float, value: int | None) -> int | None:
    """Nanocores between two cumulative CPU samples (ns); None without a usable previous sample."""
    if prev is None or value is None:
        return None
    t0, v0 = prev
    if now <= t0 or value < v0:
        return None  # a restarted cgroup starts again from zero
    return int((value - v0) / (now - t0))


class StatsCollector:
    """`snapshot()` is the usage of the node and of every pod the runtime ran at the last relist."""

    def __init__(
        self,
        paths: RuntimePaths,
        pods: Callable[[], Mapping[str, PodRuntimeStatus]],
        clock: Clock,
        *,
        node_name: str,
        images_dir: Path | None = None,
        cgroup_mount: Path = CGROUP_MOUNT,
        proc: Path = Path("/proc"),
        pod_cgroup: Callable[[str], str] | None = None,
    ) -> None:
        self._paths = paths
        # Where a pod's cgroup is (the runtime knows its QoS tier); flat under the root without it.
        self._pod_cgroup = pod_cgroup or (lambda uid: f"{paths.cgroup_root.rstrip('/')}/pod{uid}")
        self._pods = pods
        self._clock = clock
        self._node = node_name
        self._images_dir = images_dir or paths.root_dir
        self._mount = cgroup_mount
        self._proc = proc
        self._lock = threading.Lock()  # snapshots are taken in worker threads
        self._cached: tuple[float, Snapshot] | None = None
        self._prev: dict[str, tuple[float, int]] = {}
        self._du: dict[Path, tuple[float, DiskUsage]] = {}
        self._boot = _boot_time(proc)

    def snapshot(self) -> Snapshot:
        """A fresh snapshot, or the one taken less than CACHE seconds ago (blocking: call it in a thread)."""
        with self._lock:
            mono = self._clock.monotonic()
            if self._cached is not None and mono - self._cached[0] < CACHE:
                return self._cached[1]
            snap = self._collect(mono)
            self._cached = (mono, snap)
            return snap

    def _rate(self, key: str, mono: float, value: int | None) -> int | None:
        prev = self._prev.get(key)
        result = rate(prev, mono, value)
        if value is not None and (prev is None or mono - prev[0] >= RATE_MIN_INTERVAL or value < prev[1]):
            self._prev[key] = (mono, value)
        return result

    def _du_cached(self, path: Path, mono: float) -> DiskUsage:
        hit = self._du.get(path)
        if hit is not None and mono - hit[0] < FS_CACHE:
            return hit[1]
        usage = disk_usage(path)
        self._du[path] = (mono, usage)
        return usage

    def _collect(self, mono: float) -> Snapshot:
        keys: set[str] = set()
        pods = []
        for uid, rt in sorted(self._pods().items()):
            sandbox = next((s for s in rt.sandboxes if s.state == "running"), None)
            running = [c for c in rt.containers if c.state == "running"]
            if sandbox is None and not running:
                continue
            pod_cg = self._pod_cgroup(uid)
            layout = PodLayout(self._paths.pod_dir(uid))
            log_dir = self._paths.pod_log_dir(rt.namespace, rt.name, uid)
            containers = []
            for c in sorted(running, key=lambda c: c.name):
                cg = f"{pod_cg}/{c.id}"
                usage = read_usage(cg, self._mount) or CgroupUsage()
                keys.add(cg)
                containers.append(
                    ContainerStats(
                        name=c.name,
                        id=c.id,
                        start_time=c.started_at or c.created_at,
                        usage=usage,
                        nano_cores=self._rate(cg, mono, usage.cpu_ns),
                        rootfs=self._du_cached(layout.container_dir(c.name, c.attempt) / "upper", mono),
                        logs=self._du_cached(log_dir / c.name, mono),
                        image=c.image,
                    )
                )
            usage = read_usage(pod_cg, self._mount) or CgroupUsage()
            keys.add(pod_cg)
            interfaces: tuple[InterfaceStats, ...] = ()
            # /proc/<pid>/net/dev of a process in the pod's network namespace: the pause process, or without
            # one any running container (they all joined it).
            net_pid = sandbox.pid if sandbox is not None else None
            if net_pid is None and sandbox is not None and not sandbox.infra:
                net_pid = next((c.pid for c in running if c.pid), None)
            if sandbox is not None and net_pid and not sandbox.host_network:
                interfaces = tuple(parse_net_dev(_read(self._proc / str(net_pid) / "net" / "dev")))
            pods.append(
                PodStats(
                    uid=uid,
                    name=rt.name,
                    namespace=rt.namespace,
                    start_time=sandbox.created_at if sandbox is not None else min(c.created_at for c in running),
                    usage=usage,
                    nano_cores=self._rate(pod_cg, mono, usage.cpu_ns),
                    containers=tuple(containers),
                    interfaces=interfaces,
                    host_network=sandbox.host_network if sandbox is not None else False,
                    volumes=self._du_cached(layout.volumes_dir, mono),
                    cgroup=pod_cg,
                )
            )
        # Forget the samples of cgroups that are gone, so the dicts do not grow with every restart.
        self._prev = {k: v for k, v in self._prev.items() if k in keys or k == "node"}
        live = {p for p in self._du if mono - self._du[p][0] < FS_CACHE}
        self._du = {p: self._du[p] for p in live}
        cpu = parse_proc_stat_cpu(_read(self._proc / "stat"), _clock_ticks())
        node = NodeStats(
            name=self._node,
            start_time=self._boot,
            cpu_ns=cpu,
            nano_cores=self._rate("node", mono, cpu),
            memory=node_memory(parse_meminfo(_read(self._proc / "meminfo"))),
            fs=fs_info(self._paths.root_dir),
            imagefs=fs_info(self._images_dir),
            interfaces=tuple(parse_net_dev(_read(self._proc / "1" / "net" / "dev"))),
            max_pids=_int(_read(self._proc / "sys" / "kernel" / "pid_max")),
            running_pids=sum(1 for n in _listdir(self._proc) if n.isdigit()),
        )
        return Snapshot(time=self._clock.now(), node=node, pods=tuple(pods))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 100


def _boot_time(proc: Path) -> float:
    for line in _read(proc / "stat").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0
