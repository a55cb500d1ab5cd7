"""The order a pod's containers are stopped in, and the stop signal of each (pure).

kubelet kuberuntime_termination_order.go: every container is stopped at
once, except sidecars (init containers with restartPolicy Always), which
wait until every main container and every sidecar that started after them
has exited, so a sidecar outlives what depends on it. The time spent waiting
comes out of the sidecar's grace period; whatever is left, it still gets
the 2 s minimum between its stop signal and SIGKILL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from edgelet.api.pod import is_sidecar

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.container.types import ContainerRecord

DEFAULT_STOP_SIGNAL = "SIGTERM"


def termination_order(pod: Pod | None, records: Iterable[ContainerRecord]) -> dict[str, tuple[str, ...]]:
    """For each container id being stopped, the ids it must wait for before its own stop signal.

    Without the pod (an orphan found at start-up), or for a container no longer in the spec,
    nothing waits: the spec is what says which container is a sidecar.
    """
    recs = list(records)
    deps: dict[str, tuple[str, ...]] = {r.id: () for r in recs}
    if pod is None or pod.spec is None:
        return deps
    inits = list(pod.spec.init_containers or [])
    sidecar_names = [c.name for c in inits if is_sidecar(c)]
    regular_names = {c.name for c in pod.spec.containers or []}
    mains = tuple(r.id for r in recs if r.name in regular_names)
    by_name: dict[str, list[str]] = {}
    for r in recs:
        by_name.setdefault(r.name, []).append(r.id)
    for i, name in enumerate(sidecar_names):
        later = tuple(cid for n in sidecar_names[i + 1 :] for cid in by_name.get(n, []))
        for cid in by_name.get(name, []):
            deps[cid] = mains + later
    return deps


def stop_signal(container: Container | None, image_stop_signal: str = "") -> str:
    """The signal that asks a container to stop: its lifecycle.stopSignal, else the image's STOPSIGNAL, else SIGTERM.

    kubelet (ContainerStopSignals) lets the container's own stopSignal win over the image's.
    """
    lifecycle = container.lifecycle if container is not None else None
    if lifecycle is not None and lifecycle.stop_signal:
        return lifecycle.stop_signal
    return image_stop_signal or DEFAULT_STOP_SIGNAL


def remaining_grace(grace: float, waited: float) -> float:
    """kubelet killContainer: the grace left after waiting for this container's turn (Go truncates the wait)."""
    return grace - int(waited) if grace > 0 else grace


def alive(records: Iterable[ContainerRecord], ids: Mapping[str, object] | None = None) -> list[ContainerRecord]:
    """The records that may still hold a process (optionally only those in `ids`)."""
    return [r for r in records if r.state in ("running", "created") and (ids is None or r.id in ids)]
