"""Node allocatable (kubelet's pkg/kubelet/cm/node_container_manager_linux.go): what --system-reserved and
--kube-reserved leave to pods, and the limits that cap the whole pod tree with --enforce-node-allocatable=pods.

Pure: capacity comes in as numbers (cpu in millicores, memory in bytes, pid in
tasks), so every case is a table test.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from edgelet.api.quantity import QuantityError, milli_value, parse_quantity, value
from edgelet.cgroups.qos import MIN_SHARES, PodResources, milli_cpu_to_shares

# The resources kubelet's reservations take (ephemeral-storage is reserved but not enforced by a cgroup).
RESERVABLE = ("cpu", "memory", "pid", "ephemeral-storage")
ENFORCEABLE = ("pods", "none")


def parse_reserved(pairs: Iterable[tuple[str, str]]) -> dict[str, int]:
    """`cpu=500m,memory=256Mi,pid=100` pairs as numbers: cpu in millicores, the others in units.

    Raises ValueError naming the bad pair (settings turn it into a SettingsError naming the key).
    """
    out: dict[str, int] = {}
    for name, text in pairs:
        if name not in RESERVABLE:
            raise ValueError(f"unknown resource {name!r} (one of {', '.join(RESERVABLE)})")
        try:
            q = parse_quantity(text)
        except QuantityError as exc:
            raise ValueError(f"{name}={text}: {exc}") from None
        if q < 0:
            raise ValueError(f"{name}={text}: must not be negative")
        out[name] = milli_value(q) if name == "cpu" else value(q)
    return out


def total_reserved(*reservations: Iterable[tuple[str, str]]) -> dict[str, int]:
    """--system-reserved and --kube-reserved (as settings keep them) added up, as parse_reserved's numbers."""
    total: dict[str, int] = {}
    for pairs in reservations:
        for name, amount in parse_reserved(pairs).items():
            total[name] = total.get(name, 0) + amount
    return total


def node_allocatable(capacity: Mapping[str, int], *reserved: Mapping[str, int]) -> dict[str, int]:
    """Capacity less every reservation, never below zero (kubelet's GetNodeAllocatableAbsolute)."""
    out = dict(capacity)
    for r in reserved:
        for name, amount in r.items():
            if name in out:
                out[name] = max(0, out[name] - amount)
    return out


def pods_cgroup_resources(allocatable: Mapping[str, int]) -> PodResources:
    """What kubelet writes on the root pods cgroup when it enforces allocatable on pods: cpu shares from the
    allocatable cpu, a memory limit and a pids limit; no CFS quota (pods may burst into idle reserved cpu)."""
    cpu = allocatable.get("cpu")
    memory = allocatable.get("memory")
    pids = allocatable.get("pid")
    return PodResources(
        cpu_shares=milli_cpu_to_shares(cpu) if cpu else None,
        memory_limit=memory or None,
        pids_limit=pids or None,
    )


# kubelet's QoS tier cgroups: BestEffort pods share the least cpu; Burstable's shares follow their pods' requests,
# which edgelet sets on each pod cgroup instead (the tier keeps the kernel default).
BESTEFFORT_TIER = PodResources(cpu_shares=MIN_SHARES)
BURSTABLE_TIER = PodResources()


def read_capacity(
    meminfo: Path = Path("/proc/meminfo"), pid_max: Path = Path("/proc/sys/kernel/pid_max")
) -> dict[str, int]:
    """This node's cpu (millicores), memory (bytes) and pid capacity; a resource that cannot be read is left out."""
    out: dict[str, int] = {"cpu": (os.cpu_count() or 1) * 1000}
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                out["memory"] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        out["pid"] = int(pid_max.read_text().strip())
    except (OSError, ValueError):
        pass
    return out
