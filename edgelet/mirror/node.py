"""The Node and Lease objects a node writes, built from host facts passed in (pure), plus the one probe of them.

Labels are held to what the NodeRestriction admission plugin lets a node
set on itself (`validate_node_labels`), so a wrong `--node-labels` is an
error at start rather than a 403 forever.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgelet.mirror.errors import NodeLabelError
from edgelet.settingsparse import refused_node_labels
from edgelet.util.clock import read_boot_id

MAX_PODS = 110  # kubelet's default --max-pods
LEASE_NAMESPACE = "kube-node-lease"
EDGELET_PORT = (
    10250  # daemonEndpoints.kubeletEndpoint: the node API's port (edgelet.server.nodeapi) unless bound elsewhere
)


def validate_node_labels(labels: dict[str, str]) -> None:
    """Raise NodeLabelError naming every label NodeRestriction would refuse."""
    bad = refused_node_labels(labels)
    if bad:
        raise NodeLabelError(
            f"--node-labels: {', '.join(sorted(bad))}: a node may not set labels in the kubernetes.io or k8s.io "
            "namespaces except kubernetes.io/{hostname,arch,os}, topology/instance-type labels and "
            "kubelet.kubernetes.io/* or node.kubernetes.io/* (NodeRestriction); let an admin set it "
            "with kubectl label"
        )


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def to_api(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class NodeFacts:
    """What the host is; probed once at start (and the images and free space again on each status check)."""

    name: str
    os: str = "linux"
    arch: str = "amd64"
    kernel: str = ""
    os_image: str = ""
    runtime_version: str = "runc://unknown"
    edgelet_version: str = "0.0.0"
    cpus: int = 1
    memory_bytes: int = 0
    ephemeral_bytes: int = 0
    node_ip: str = "127.0.0.1"
    hostname: str = ""
    machine_id: str = ""
    boot_id: str = ""
    images: tuple[tuple[tuple[str, ...], int], ...] = ()  # (names, size bytes)
    pressure: frozenset[str] = frozenset()  # the eviction manager's conditions: MemoryPressure, DiskPressure...
    labels: tuple[tuple[str, str], ...] = field(default=())
    taints: tuple[Taint, ...] = ()
    port: int = EDGELET_PORT
    # What allocatable leaves out (with_reservations): cpu in millicores, memory and ephemeral-storage in bytes.
    reserved: tuple[tuple[str, int], ...] = ()
    # The WireGuard tunnel's TunnelReady (status, reason, message), data from the app; None: no tunnel.
    tunnel: tuple[bool, str, str] | None = None
    # Conditions the app adds as data, after the others (self-update's EdgeletUpdateTrial while a trial runs).
    extra_conditions: tuple[tuple[tuple[str, str], ...], ...] = ()


def format_time(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_labels(f: NodeFacts) -> dict[str, str]:
    labels = {
        "kubernetes.io/hostname": f.hostname or f.name,
        "kubernetes.io/os": f.os,
        "kubernetes.io/arch": f.arch,
        "beta.kubernetes.io/os": f.os,
        "beta.kubernetes.io/arch": f.arch,
    }
    labels.update(dict(f.labels))
    return labels


def build_node(f: NodeFacts) -> dict[str, Any]:
    """The Node a registering node creates (status goes in too: the apiserver keeps it on create)."""
    spec: dict[str, Any] = {}
    if f.taints:
        spec["taints"] = [t.to_api() for t in f.taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f.name,
            "labels": node_labels(f),
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": spec,
    }


def node_resources(f: NodeFacts) -> dict[str, str]:
    """The Node's capacity."""
    return {
        "cpu": str(f.cpus),
        "memory": f"{f.memory_bytes // 1024}Ki",
        "pods": str(MAX_PODS),
        "ephemeral-storage": f"{f.ephemeral_bytes // 1024}Ki",
    }


def with_reservations(f: NodeFacts, *reservations: dict[str, int]) -> NodeFacts:
    """`f` with what allocatable leaves out: the sum of `reservations` (cpu millicores, bytes), which the caller
    computes: --system-reserved and --kube-reserved, and the hard eviction thresholds (eviction.hard_reserved)."""
    import dataclasses

    total: dict[str, int] = {}
    for reserved in reservations:
        for resource, amount in reserved.items():
            total[resource] = total.get(resource, 0) + amount
    return dataclasses.replace(f, reserved=tuple(sorted(total.items())))


def node_allocatable(f: NodeFacts) -> dict[str, str]:
    """Capacity less `f.reserved` (--system-reserved, --kube-reserved and the hard eviction thresholds, see
    with_reservations): kubelet's Node allocatable."""
    reserved = dict(f.reserved)
    cpu = max(0, f.cpus * 1000 - reserved.get("cpu", 0))
    memory = max(0, f.memory_bytes - reserved.get("memory", 0))
    disk = max(0, f.ephemeral_bytes - reserved.get("ephemeral-storage", 0))
    return {
        "cpu": str(cpu // 1000) if cpu % 1000 == 0 else f"{cpu}m",
        "memory": f"{memory // 1024}Ki",
        "pods": str(MAX_PODS),
        "ephemeral-storage": f"{disk // 1024}Ki",
    }


# Pressure conditions as kubelet words them (setters.go): (type, reason and message when true, when false).
PRESSURE_CONDITIONS = (
    (
        "MemoryPressure",
        ("KubeletHasInsufficientMemory", "edgelet has insufficient memory available"),
        ("KubeletHasSufficientMemory", "edgelet has sufficient memory available"),
    ),
    (
        "DiskPressure",
        ("KubeletHasDiskPressure", "edgelet has disk pressure"),
        ("KubeletHasNoDiskPressure", "edgelet has no disk pressure"),
    ),
    (
        "PIDPressure",
        ("KubeletHasInsufficientPID", "edgelet has insufficient PID available"),
        ("KubeletHasSufficientPID", "edgelet has sufficient PID available"),
    ),
)


def node_conditions(
    pressure: frozenset[str], *, ready: bool, ready_message: str, tunnel: tuple[bool, str, str] | None = None
) -> list[dict[str, str]]:
    """The Node's conditions without their times: MemoryPressure, DiskPressure, PIDPressure from the eviction
    manager's `pressure` (data the app passes in), then Ready, then TunnelReady when a tunnel is configured.
    `edgelet node` shows the same."""
    out = []
    for type_, when_true, when_false in PRESSURE_CONDITIONS:
        reason, message = when_true if type_ in pressure else when_false
        out.append(
            {"type": type_, "status": "True" if type_ in pressure else "False", "reason": reason, "message": message}
        )
    out.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": ready_message,
        }
    )
    if tunnel is not None:
        up, reason, message = tunnel
        out.append({"type": "TunnelReady", "status": "True" if up else "False", "reason": reason, "message": message})
    return out


def advance_transitions(
    transitions: dict[str, float], last: dict[str, bool], now_status: dict[str, bool], now: float
) -> tuple[dict[str, float], dict[str, bool]]:
    """Each condition's lastTransitionTime: `now` for a type seen for the first time or whose status flipped
    since `last`, kept otherwise (kubelet's setters.go moves it only on a change, never with the heartbeat)."""
    out = dict(transitions)
    for type_, status in now_status.items():
        if type_ not in out or last.get(type_) != status:
            out[type_] = now
    return out, dict(now_status)


def build_node_status(
    f: NodeFacts, *, ready: bool, ready_message: str, now: float, transitions: dict[str, float] | None = None
) -> dict[str, Any]:
    """Node.status; `transitions` maps condition type to when it last changed (kept by the caller)."""
    stamp = format_time(now)
    transitions = transitions or {}
    return {
        "capacity": node_resources(f),
        "allocatable": node_allocatable(f),
        "conditions": [
            {**c, "lastHeartbeatTime": stamp, "lastTransitionTime": format_time(transitions.get(c["type"], now))}
            for c in node_conditions(f.pressure, ready=ready, ready_message=ready_message, tunnel=f.tunnel)
            + [dict(extra) for extra in f.extra_conditions]
        ],
        "addresses": [
            {"type": "InternalIP", "address": f.node_ip},
            {"type": "Hostname", "address": f.hostname or f.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": f.port}},
        "nodeInfo": {
            "machineID": f.machine_id,
            "systemUUID": f.machine_id,
            "bootID": f.boot_id,
            "kernelVersion": f.kernel,
            "osImage": f.os_image,
            "containerRuntimeVersion": f.runtime_version,
            "kubeletVersion": f"v1.20.0-edgelet-{f.edgelet_version}",
            "kubeProxyVersion": "",
            "operatingSystem": f.os,
            "architecture": f.arch,
        },
        "images": [{"names": list(names), "sizeBytes": size} for names, size in f.images if names],
    }


def status_fingerprint(status: dict[str, Any]) -> str:
    """What decides whether a status must be sent: everything but the heartbeat times."""
    stripped = dict(status)
    stripped["conditions"] = [
        {k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in status.get("conditions", [])
    ]
    return hashlib.sha256(json.dumps(stripped, sort_keys=True).encode()).hexdigest()


def build_lease(node: str, node_uid: str, *, duration: int, now: float, resource_version: str = "") -> dict[str, Any]:
    """The node's Lease, owned by its Node as kubelet sets it (so it goes when the Node goes)."""
    meta: dict[str, Any] = {
        "name": node,
        "namespace": LEASE_NAMESPACE,
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}],
    }
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {"holderIdentity": node, "leaseDurationSeconds": duration, "renewTime": format_micro_time(now)},
    }


# --- host probes (thin) -------------------------------------------------------------------------------------

_ARCH = {
    "x86_64": "amd64",
    "aarch64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


def go_arch(machine: str) -> str:
    return _ARCH.get(machine, machine)


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.partition("=")[2].strip().strip('"')
    return "Linux"


def memory_bytes() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def host_facts(name: str, *, root_dir: Path, runtime_version: str, edgelet_version: str, node_ip: str) -> NodeFacts:
    uname = platform.uname()
    try:
        disk = shutil.disk_usage(root_dir).total
    except OSError:
        disk = 0
    return NodeFacts(
        name=name,
        arch=go_arch(uname.machine),
        kernel=uname.release,
        os_image=os_image(),
        runtime_version=runtime_version,
        edgelet_version=edgelet_version,
        cpus=os.cpu_count() or 1,
        memory_bytes=memory_bytes(),
        ephemeral_bytes=disk,
        node_ip=node_ip,
        hostname=name,
        machine_id=_read("/etc/machine-id"),
        boot_id=read_boot_id(),
    )


def parse_runc_version(output: str) -> str:
    """`runc version 1.1.5` (first line of `runc --version`) -> `runc://1.1.5`."""
    first = output.strip().splitlines()[0] if output.strip() else ""
    parts = first.split()
    return f"runc://{parts[2]}" if len(parts) >= 3 and parts[1] == "version" else "runc://unknown"
