"""A stats Snapshot in kubelet's shapes (pure): the Summary API (stats/v1alpha1) and the Prometheus text of
/metrics/resource (what metrics-server scrapes) and /metrics/cadvisor.

Fields edgelet cannot know are left out, as kubelet's Go structs omit nil
pointers; names, units and labels are kubelet's, so metrics-server,
Prometheus rules and dashboards written for kubelet work unchanged.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from edgelet.cgroups.stats import CgroupUsage
from edgelet.stats.collector import ContainerStats, NodeStats, PodStats, Snapshot
from edgelet.stats.procfs import DiskUsage, FsInfo, InterfaceStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def rfc3339(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def cpu_stats(t: str, cpu_ns: int | None, nano_cores: int | None) -> dict[str, Any] | None:
    if cpu_ns is None:
        return None
    return _drop_none({"time": t, "usageNanoCores": nano_cores, "usageCoreNanoSeconds": cpu_ns})


def memory_stats(t: str, u: CgroupUsage, available: int | None = None) -> dict[str, Any] | None:
    if u.memory_usage is None:
        return None
    return _drop_none(
        {
            "time": t,
            "availableBytes": available,
            "usageBytes": u.memory_usage,
            "workingSetBytes": u.memory_working_set,
            "rssBytes": u.memory_rss,
            "pageFaults": u.page_faults,
            "majorPageFaults": u.major_page_faults,
        }
    )


def network_stats(t: str, interfaces: Iterable[InterfaceStats]) -> dict[str, Any] | None:
    ifaces = [
        {"name": i.name, "rxBytes": i.rx_bytes, "rxErrors": i.rx_errors, "txBytes": i.tx_bytes, "txErrors": i.tx_errors}
        for i in interfaces
    ]
    if not ifaces:
        return None
    # kubelet names the default interface eth0 and inlines its figures; the first one stands in without eth0.
    default = next((i for i in ifaces if i["name"] == "eth0"), ifaces[0])
    return {"time": t, **default, "interfaces": ifaces}


def fs_stats(t: str, fs: FsInfo | None, used: DiskUsage | None = None) -> dict[str, Any] | None:
    """FsStats: the filesystem's capacity and free space, `usedBytes` what this object uses of it."""
    if fs is None and used is None:
        return None
    out: dict[str, Any] = {"time": t}
    if fs is not None:
        out.update(availableBytes=fs.available, capacityBytes=fs.capacity, inodesFree=fs.inodes_free, inodes=fs.inodes)
    if used is not None:
        out.update(usedBytes=used.bytes, inodesUsed=used.inodes)
    elif fs is not None:
        out.update(usedBytes=fs.used, inodesUsed=fs.inodes - fs.inodes_free)
    return out


def _container(t: str, c: ContainerStats, fs: FsInfo | None) -> dict[str, Any]:
    return _drop_none(
        {
            "name": c.name,
            "startTime": rfc3339(c.start_time),
            "cpu": cpu_stats(t, c.usage.cpu_ns, c.nano_cores),
            "memory": memory_stats(t, c.usage),
            "rootfs": fs_stats(t, fs, c.rootfs),
            "logs": fs_stats(t, fs, c.logs),
        }
    )


def _sum(parts: Iterable[DiskUsage | None]) -> DiskUsage:
    got = [p for p in parts if p is not None]
    return DiskUsage(sum(p.bytes for p in got), sum(p.inodes for p in got))


def _pod(t: str, p: PodStats, fs: FsInfo | None) -> dict[str, Any]:
    ephemeral = _sum([*(c.rootfs for c in p.containers), *(c.logs for c in p.containers), p.volumes])
    return _drop_none(
        {
            "podRef": {"name": p.name, "namespace": p.namespace, "uid": p.uid},
            "startTime": rfc3339(p.start_time),
            "containers": [_container(t, c, fs) for c in p.containers],
            "cpu": cpu_stats(t, p.usage.cpu_ns, p.nano_cores),
            "memory": memory_stats(t, p.usage),
            "network": None if p.host_network else network_stats(t, p.interfaces),
            "ephemeral-storage": fs_stats(t, fs, ephemeral),
            "process_stats": {"process_count": p.usage.pids} if p.usage.pids is not None else None,
        }
    )


def _node(t: str, n: NodeStats) -> dict[str, Any]:
    memory = None
    if n.memory is not None:
        m = n.memory
        memory = {
            "time": t,
            "availableBytes": m.available,
            "usageBytes": m.usage,
            "workingSetBytes": m.working_set,
            "rssBytes": m.rss,
        }
    imagefs = fs_stats(t, n.imagefs)
    return _drop_none(
        {
            "nodeName": n.name,
            "startTime": rfc3339(n.start_time),
            "cpu": cpu_stats(t, n.cpu_ns, n.nano_cores),
            "memory": memory,
            "network": network_stats(t, n.interfaces),
            "fs": fs_stats(t, n.fs),
            "runtime": {"imageFs": imagefs} if imagefs is not None else None,
            "rlimit": _drop_none({"time": t, "maxpid": n.max_pids, "curproc": n.running_pids}),
        }
    )


def summary(snap: Snapshot) -> dict[str, Any]:
    """kubelet's /stats/summary body (stats/v1alpha1 Summary)."""
    t = rfc3339(snap.time)
    return {"node": _node(t, snap.node), "pods": [_pod(t, p, snap.node.fs) for p in snap.pods]}


# --- Prometheus text ------------------------------------------------------------------------------------------


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name: str, labels: dict[str, str], value: float, ts_ms: int | None = None) -> str:
    lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    text = f"{name}{{{lab}}} {value!r}" if lab else f"{name} {value!r}"
    return text + (f" {ts_ms}" if ts_ms is not None else "")


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(
        self,
        name: str,
        kind: str,
        doc: str,
        samples: Iterable[tuple[dict[str, str], float | None]],
        ts_ms: int | None = None,
    ) -> None:
        rows = [(labels, v) for labels, v in samples if v is not None]
        self.lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
        self.lines += [_sample(name, labels, float(v), ts_ms) for labels, v in rows]

    def render(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def resource_metrics(snap: Snapshot) -> bytes:
    """/metrics/resource: kubelet's resource metrics endpoint (metrics-server >= 0.6 scrapes it)."""
    ts = int(snap.time * 1000)
    n = snap.node
    out = _Text()
    out.family(
        "node_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
        [({}, _seconds(n.cpu_ns))],
        ts,
    )
    out.family(
        "node_memory_working_set_bytes",
        "gauge",
        "Current working set of the node in bytes",
        [({}, n.memory.working_set if n.memory else None)],
        ts,
    )

    def pod_labels(p: PodStats) -> dict[str, str]:
        return {"namespace": p.namespace, "pod": p.name}

    def container_labels(p: PodStats, c: ContainerStats) -> dict[str, str]:
        return {"container": c.name, "namespace": p.namespace, "pod": p.name}

    out.family(
        "pod_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
        [(pod_labels(p), _seconds(p.usage.cpu_ns)) for p in snap.pods],
        ts,
    )
    out.family(
        "pod_memory_working_set_bytes",
        "gauge",
        "Current working set of the pod in bytes",
        [(pod_labels(p), p.usage.memory_working_set) for p in snap.pods],
        ts,
    )
    out.family(
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
        [(container_labels(p, c), _seconds(c.usage.cpu_ns)) for p in snap.pods for c in p.containers],
        ts,
    )
    out.family(
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set of the container in bytes",
        [(container_labels(p, c), c.usage.memory_working_set) for p in snap.pods for c in p.containers],
        ts,
    )
    out.family(
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds",
        [(container_labels(p, c), c.start_time) for p in snap.pods for c in p.containers],
        ts,
    )
    out.family(
        "scrape_error", "gauge", "1 if there was an error while getting container metrics, 0 otherwise", [({}, 0)]
    )
    return out.render()


def cadvisor_metrics(snap: Snapshot, cgroup_root: str) -> bytes:
    """/metrics/cadvisor: cAdvisor's container_* series for each container and each pod cgroup (container="")."""
    ts = int(snap.time * 1000)
    root = cgroup_root.rstrip("/")
    rows: list[tuple[dict[str, str], CgroupUsage]] = []
    for p in snap.pods:
        pod_cg = p.cgroup or f"{root}/pod{p.uid}"
        rows.append(
            ({"container": "", "id": pod_cg, "image": "", "name": "", "namespace": p.namespace, "pod": p.name}, p.usage)
        )
        for c in p.containers:
            rows.append(
                (
                    {
                        "container": c.name,
                        "id": f"{pod_cg}/{c.id}",
                        "image": c.image,
                        "name": c.id,
                        "namespace": p.namespace,
                        "pod": p.name,
                    },
                    c.usage,
                )
            )
    out = _Text()
    out.family(
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed in seconds.",
        [(lab, _seconds(u.cpu_ns)) for lab, u in rows],
        ts,
    )
    out.family(
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set in bytes.",
        [(lab, u.memory_working_set) for lab, u in rows],
        ts,
    )
    out.family(
        "container_memory_usage_bytes",
        "gauge",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        [(lab, u.memory_usage) for lab, u in rows],
        ts,
    )
    out.family("container_memory_rss", "gauge", "Size of RSS in bytes.", [(lab, u.memory_rss) for lab, u in rows], ts)
    out.family(
        "container_processes",
        "gauge",
        "Number of processes running inside the container.",
        [(lab, u.pids) for lab, u in rows],
        ts,
    )
    net = [(p, i) for p in snap.pods if not p.host_network for i in p.interfaces]
    for name, doc, attr in (
        ("container_network_receive_bytes_total", "Cumulative count of bytes received", "rx_bytes"),
        ("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", "tx_bytes"),
    ):
        out.family(
            name,
            "counter",
            doc,
            [
                (
                    {
                        "container": "",
                        "id": p.cgroup or f"{root}/pod{p.uid}",
                        "interface": i.name,
                        "namespace": p.namespace,
                        "pod": p.name,
                    },
                    getattr(i, attr),
                )
                for p, i in net
            ],
            ts,
        )
    return out.render()
