"""Turns a published PodStatus into the health gate's observation (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from edgelet.rollout.decide import ContainerObs, GateObs

if TYPE_CHECKING:
    from edgelet.api.types import ContainerStatus, Pod, PodStatus


def _container(cs: "ContainerStatus") -> ContainerObs:
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


def _all(statuses: "Sequence[ContainerStatus] | None") -> tuple[ContainerObs, ...]:
    return tuple(_container(cs) for cs in statuses or ())


def gate_observation(pod: "Pod", status: "PodStatus") -> GateObs:
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())
    spec = pod.spec
    return GateObs(
        restart_policy=(spec.restart_policy if spec is not None else None) or "Always",
        phase=status.phase or "Pending",
        ready=ready,
        containers=_all(status.container_statuses),
        init_containers=_all(status.init_container_statuses),
    )


__all__ = ["gate_observation"]
