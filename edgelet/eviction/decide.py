"""Every eviction decision as a pure function: which thresholds are met, the node conditions, whom to evict.

kubelet's semantics (pkg/kubelet/eviction/helpers.go): a threshold is met
when the signal's available amount is below it; once met it stays met until
the signal recovers by the minimum reclaim as well; a soft threshold counts
only after it has been met for its whole grace period; a condition stays set
for the pressure transition period after the last time it was met. The
order: memory pressure evicts pods whose usage exceeds their requests first,
then by priority, then by usage above requests; disk pressure likewise with
disk usage; PID pressure by priority, then by process count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from edgelet.eviction.signals import Observation
from edgelet.eviction.thresholds import CONDITION, MEMORY, PIDS, RESOURCE, Threshold

# kubelet's scheduling.SystemCriticalPriority and the two built-in critical classes.
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
CRITICAL_CLASSES = {
    "system-node-critical": SYSTEM_CRITICAL_PRIORITY + 1000,
    "system-cluster-critical": SYSTEM_CRITICAL_PRIORITY,
}


@dataclass(frozen=True)
class PodUsage:
    """What the order needs to know of one running pod."""

    uid: str
    name: str  # namespace/name, for messages
    priority: int = 0
    memory: int = 0  # working set, bytes
    memory_request: int = 0
    disk: int = 0  # writable layers, emptyDir volumes and logs, bytes
    disk_request: int = 0  # ephemeral-storage requests
    pids: int = 0

    @property
    def critical(self) -> bool:
        return self.priority >= SYSTEM_CRITICAL_PRIORITY


def pod_priority(priority_class_name: str | None, priority: int | None) -> int:
    """spec.priority when the manifest sets it, else the built-in critical classes' value, else 0.

    Static pods never went through the apiserver's priority admission, so
    only these two class names have a known value.
    """
    if priority is not None:
        return priority
    return CRITICAL_CLASSES.get(priority_class_name or "", 0)


def _key(t: Threshold) -> tuple[str, bool]:
    return (t.signal, t.hard)


def thresholds_met(
    thresholds: Sequence[Threshold],
    observed: Mapping[str, Observation],
    already: frozenset[tuple[str, bool]] = frozenset(),
) -> list[Threshold]:
    """The thresholds whose signal is below them; those `already` met must also recover their minimum reclaim."""
    out = []
    for t in thresholds:
        obs = observed.get(t.signal)
        if obs is None or obs.capacity <= 0:
            continue  # a signal this node cannot report never triggers
        limit = t.value.of(obs.capacity)
        if _key(t) in already:
            limit += t.min_reclaim.of(obs.capacity)
        if obs.available < limit:
            out.append(t)
    return out


@dataclass(frozen=True)
class PressureState:
    """What the manager remembers between rounds (monotonic seconds)."""

    first_met: Mapping[tuple[str, bool], float] = field(default_factory=dict)  # threshold -> since when met
    active: frozenset[tuple[str, bool]] = frozenset()  # thresholds met for their whole grace period
    condition_seen: Mapping[str, float] = field(default_factory=dict)  # condition -> last time it was met


def step(
    state: PressureState,
    thresholds: Sequence[Threshold],
    observed: Mapping[str, Observation],
    now: float,
    transition_period: float,
) -> tuple[PressureState, list[Threshold], frozenset[str]]:
    """One round: (the new state, the thresholds to act on, the node conditions to report)."""
    met = thresholds_met(thresholds, observed, state.active)
    first = {_key(t): state.first_met.get(_key(t), now) for t in met}
    active = [t for t in met if now - first[_key(t)] >= t.grace_period]
    seen = dict(state.condition_seen)
    for t in active:
        seen[CONDITION[t.signal]] = now
    conditions = frozenset(c for c, at in seen.items() if now - at < transition_period or at == now)
    seen = {c: at for c, at in seen.items() if c in conditions}
    return PressureState(first, frozenset(_key(t) for t in active), seen), active, conditions


def to_reclaim(active: Sequence[Threshold]) -> Threshold | None:
    """The threshold to relieve first: memory, then disk, then pids (kubelet ranks signals likewise)."""
    order = {MEMORY: 0, PIDS: 2}
    return min(active, key=lambda t: (order.get(t.signal, 1), not t.hard, t.signal), default=None)


def rank(pods: Sequence[PodUsage], signal: str) -> list[PodUsage]:
    """The pods to evict for `signal`, first first; critical pods are never candidates."""
    candidates = [p for p in pods if not p.critical]
    if signal == MEMORY:

        def key(p: PodUsage) -> tuple[bool, int, int, str]:
            return (p.memory <= p.memory_request, p.priority, -(p.memory - p.memory_request), p.name)
    elif signal == PIDS:

        def key(p: PodUsage) -> tuple[bool, int, int, str]:
            return (False, p.priority, -p.pids, p.name)
    else:

        def key(p: PodUsage) -> tuple[bool, int, int, str]:
            return (p.disk_request > 0 and p.disk <= p.disk_request, p.priority, -p.disk, p.name)

    return sorted(candidates, key=key)


def _ki(n: int) -> str:
    return f"{n // 1024}Ki"


def message(t: Threshold, observed: Observation, pod: PodUsage) -> str:
    """kubelet's eviction message: what ran low, the threshold, what was left, what the pod used."""
    resource = RESOURCE[t.signal]
    in_bytes = resource in ("memory", "ephemeral-storage")
    threshold = str(t.value) if t.value.percentage is not None or not in_bytes else _ki(t.value.of(observed.capacity))
    available = _ki(observed.available) if in_bytes else str(observed.available)
    text = f"The node was low on resource: {resource}. Threshold quantity: {threshold}, available: {available}. "
    if t.signal == MEMORY:
        text += f"Pod {pod.name} was using {_ki(pod.memory)}, request is {_ki(pod.memory_request)}."
    elif t.signal == PIDS:
        text += f"Pod {pod.name} was running {pod.pids} processes."
    else:
        text += f"Pod {pod.name} was using {_ki(pod.disk)}, request is {_ki(pod.disk_request)}."
    return text
