"""Turns a published PodStatus into the health gate's observation (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from edgelet.rollout.decide import ContainerObs, GateObs

if TYPE_CHECKING:
    from edgelet.api.types import ContainerStatus, Pod, PodStatus


def _container(cs: ContainerStatus) -> ContainerObs:
    state = cs.state
    waiting = state.waiting if state is not None else None
    terminated = state.terminated if state is not None else None
    running = state is not None and state.running is not None
    return ContainerObs(
        name=cs.name,
        # kubelet's `started`: running and the startup probe (if any) passed.
        started=running and (cs.started is None or bool(cs.started)),
        restarts=cs.restart_count,
        waiting=(waiting.reason or "") if waiting is not None else "",
        message=(waiting.message or "") if waiting is not None else "",
        exit_code=terminated.exit_code if terminated is not None else None,
    )


def _all(statuses: Sequence[ContainerStatus] | None) -> tuple[ContainerObs, ...]:
    return tuple(_container(cs) for cs in statuses or ())


def gate_observation(pod: Pod, status: PodStatus) -> GateObs:
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())
    spec = pod.spec
    return GateObs(
        restart_policy=(spec.restart_policy if spec is not None else None) or "Always",
        phase=status.phase or "Pending",
        ready=ready,
        containers=_all(status.container_statuses),
        init_containers=_all(status.init_container_statuses),
    )


def _host_ports(pod: Pod) -> set[tuple[str, int, str]]:
    spec = pod.spec
    out: set[tuple[str, int, str]] = set()
    for c in [*(spec.init_containers or []), *spec.containers] if spec is not None else []:
        for p in c.ports or []:
            if p.host_port:
                out.add((p.host_ip or "", p.host_port, p.protocol or "TCP"))
    return out


def surge_clash(old: Pod, new: Pod) -> str:
    """Why two versions of a pod cannot run side by side (Surge), "" when they can."""
    for pod, which in ((old, "the running version"), (new, "the new version")):
        if pod.spec is not None and pod.spec.host_network:
            return f"{which} uses hostNetwork: both versions would share the node's ports"
    old_ports = _host_ports(old)
    same = sorted(
        p
        for p in _host_ports(new)
        if any(o[1] == p[1] and o[2] == p[2] and (not o[0] or not p[0] or o[0] == p[0]) for o in old_ports)
    )
    if same:
        return "both versions ask for hostPort " + ", ".join(f"{port}/{proto}" for _, port, proto in same)
    return ""


__all__ = ["gate_observation", "surge_clash"]
