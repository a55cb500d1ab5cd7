"""Pure kubelet resource policy: pod cgroup placement, cpu/memory mapping and OOM score.

Follows pkg/apis/core/v1/helper/qos (ComputePodQOS), pkg/kubelet/cm
(helpers_linux.go: MilliCPUToShares, MilliCPUToQuota, ResourceConfigForPod),
pkg/kubelet/qos/policy.go (GetContainerOOMScoreAdjust) and
pkg/api/v1/resource (PodRequests/PodLimits with sidecars).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from edgelet.api.qos import (
    QOSClass,
    ResourceList,
    container_limits,
    container_requests,
    parse_resource_list,
    qos_class,
)
from edgelet.api.quantity import milli_value, value

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod

MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
QUOTA_PERIOD = 100000  # microseconds, kubelet's default cpuCFSQuotaPeriod
MIN_QUOTA_PERIOD = 1000

GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
POD_INFRA_OOM_SCORE_ADJ = -998  # kubelet's PodInfraOOMAdj, for the pause sandbox

_SYSTEM_NODE_CRITICAL = "system-node-critical"


@dataclass(frozen=True)
class PodResources:
    """What the pod-level cgroup gets; None means "leave the kernel default"."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None  # microseconds per period; None = unlimited
    cpu_period: int | None = None
    memory_limit: int | None = None  # bytes
    pids_limit: int | None = None  # tasks; None = unlimited


@dataclass(frozen=True)
class ContainerResources:
    """The linux.resources numbers for one container (kubelet's calculateLinuxResources)."""

    cpu_shares: int
    cpu_quota: int  # 0 = no limit
    cpu_period: int
    memory_limit: int  # 0 = no limit


def pod_cgroup_name(uid: str) -> str:
    return f"pod{uid}"


def qos_cgroup_path(cgroup_root: str, qos: QOSClass) -> str:
    """The QoS tier's cgroup: the root itself for Guaranteed, `burstable/` and `besteffort/` below it."""
    root = "/" + cgroup_root.strip("/") if cgroup_root.strip("/") else ""
    return {"Guaranteed": root, "Burstable": f"{root}/burstable", "BestEffort": f"{root}/besteffort"}[qos]


def pod_cgroup_path(cgroup_root: str, qos: QOSClass, uid: str) -> str:
    """The pod's cgroup, relative to each hierarchy: Guaranteed directly under the root, others under their QoS dir."""
    return f"{qos_cgroup_path(cgroup_root, qos)}/{pod_cgroup_name(uid)}"


def milli_cpu_to_shares(milli_cpu: int) -> int:
    if milli_cpu == 0:
        # Zero means "unset" to the runtime, whose kernel default would be
        # 1024; kubelet returns the minimum instead so zero really is least.
        return MIN_SHARES
    shares = (milli_cpu * SHARES_PER_CPU) // 1000
    return max(MIN_SHARES, min(MAX_SHARES, shares))


def milli_cpu_to_quota(milli_cpu: int, period: int = QUOTA_PERIOD) -> int:
    if milli_cpu == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, (milli_cpu * period) // 1000)


def shares_to_weight(shares: int) -> int:
    """cgroup v2 cpu.weight for a v1 cpu.shares value (the mapping runc and kubelet use)."""
    if shares == 0:
        return 0
    return 1 + ((shares - 2) * 9999) // 262142


def _milli(q: Fraction | None) -> int:
    return milli_value(q) if q is not None else 0


def container_resources(container: Container) -> ContainerResources:
    """cpu shares from the request (or the limit when no request), quota from the limit, memory limit."""
    res = container.resources
    raw_requests = parse_resource_list(res.requests if res else None)
    limits = container_limits(container)
    cpu_request = raw_requests.get("cpu")
    cpu_limit = limits.get("cpu")
    if not cpu_request and cpu_limit:
        shares = milli_cpu_to_shares(_milli(cpu_limit))
    else:
        shares = milli_cpu_to_shares(_milli(cpu_request))
    memory = limits.get("memory")
    return ContainerResources(
        cpu_shares=shares,
        cpu_quota=milli_cpu_to_quota(_milli(cpu_limit)),
        cpu_period=QUOTA_PERIOD,
        memory_limit=value(memory) if memory else 0,
    )


def _is_sidecar(c: Container) -> bool:
    return c.restart_policy == "Always"


def _pod_aggregate(pod: Pod, per_container) -> tuple[ResourceList, bool, bool]:
    """kubelet's PodRequests/PodLimits: regular containers and sidecars add up, other init containers take the max.

    Also reports whether every container declared a cpu and a memory value.
    """
    total: ResourceList = {}
    cpu_declared = memory_declared = True
    spec = pod.spec
    containers = (spec.containers or []) if spec else []
    inits = (spec.init_containers or []) if spec else []
    for c in [*containers, *inits]:
        values = per_container(c)
        cpu_declared &= bool(values.get("cpu"))
        memory_declared &= bool(values.get("memory"))
    for c in containers:
        for name, q in per_container(c).items():
            total[name] = total.get(name, Fraction(0)) + q
    sidecars: ResourceList = {}
    init_max: ResourceList = {}
    for c in inits:
        values = per_container(c)
        if _is_sidecar(c):
            for name, q in values.items():
                total[name] = total.get(name, Fraction(0)) + q
                sidecars[name] = sidecars.get(name, Fraction(0)) + q
            candidate = dict(sidecars)
        else:
            candidate = dict(values)
            for name, q in sidecars.items():
                candidate[name] = candidate.get(name, Fraction(0)) + q
        for name, q in candidate.items():
            init_max[name] = max(init_max.get(name, Fraction(0)), q)
    for name, q in init_max.items():
        total[name] = max(total.get(name, Fraction(0)), q)
    if spec is not None and spec.overhead:
        for name, q in parse_resource_list(spec.overhead).items():
            total[name] = total.get(name, Fraction(0)) + q
    return total, cpu_declared, memory_declared


def pod_pids_limit(pod: Pod, pod_max_pids: int) -> int | None:
    """kubelet's --pod-max-pids (0 or less: none), lowered by a pod-level `spec.resources.limits.pids`."""
    limits = []
    if pod_max_pids > 0:
        limits.append(pod_max_pids)
    res = pod.spec.resources if pod.spec is not None else None
    own = (res.limits or {}).get("pids") if res is not None else None
    if own is not None:
        limits.append(int(value(own)))
    return min(limits) if limits else None


def pod_resources(pod: Pod, pod_max_pids: int = 0) -> PodResources:
    """The pod cgroup's settings, as kubelet's ResourceConfigForPod (CFS quota enforced, 100 ms period)."""
    from dataclasses import replace

    return replace(_pod_cpu_memory(pod), pids_limit=pod_pids_limit(pod, pod_max_pids))


def _pod_cpu_memory(pod: Pod) -> PodResources:
    requests, _, _ = _pod_aggregate(pod, container_requests)
    limits, cpu_limited, memory_limited = _pod_aggregate(pod, container_limits)
    qos = qos_class(pod)
    if qos == "BestEffort":
        return PodResources(cpu_shares=MIN_SHARES)
    shares = milli_cpu_to_shares(_milli(requests.get("cpu")))
    quota = milli_cpu_to_quota(_milli(limits.get("cpu")))
    memory = value(limits["memory"]) if limits.get("memory") else 0
    if qos == "Guaranteed":
        return PodResources(cpu_shares=shares, cpu_quota=quota, cpu_period=QUOTA_PERIOD, memory_limit=memory)
    return PodResources(
        cpu_shares=shares,
        cpu_quota=quota if cpu_limited else None,
        cpu_period=QUOTA_PERIOD if cpu_limited else None,
        memory_limit=memory if memory_limited else None,
    )


def is_node_critical(pod: Pod) -> bool:
    # Every pod edgelet runs is a static pod, which kubelet's IsCriticalPod
    # accepts, so the priority class alone decides.
    return pod.spec is not None and pod.spec.priority_class_name == _SYSTEM_NODE_CRITICAL


def oom_score_adj(pod: Pod, container: Container, memory_capacity: int) -> int:
    """kubelet's GetContainerOOMScoreAdjust; `memory_capacity` is the node's memory in bytes (0 if unknown)."""
    if is_node_critical(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    qos = qos_class(pod)
    if qos == "Guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "BestEffort":
        return BESTEFFORT_OOM_SCORE_ADJ
    request = container_requests(container).get("memory")
    memory_request = value(request) if request else 0
    if memory_capacity <= 0:
        # Unknown capacity: kubelet never gets here; treat the request as a
        # negligible share, which gives a Burstable container 999.
        adjust = BESTEFFORT_OOM_SCORE_ADJ
    else:
        adjust = 1000 - (1000 * memory_request) // memory_capacity
    if adjust < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adjust == BESTEFFORT_OOM_SCORE_ADJ:
        return adjust - 1
    return adjust
