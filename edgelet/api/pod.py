"""Pure helpers over a Pod that several layers need: which container is which, and a validated pod's parts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from edgelet.api.errors import ApiError

if TYPE_CHECKING:
    from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec


def is_sidecar(container: Container) -> bool:
    """An init container with restartPolicy Always (kubelet IsRestartableInitContainer)."""
    return container.restart_policy == "Always"


class ContainerInstance(Protocol):
    """What a restart decision reads of a container's last instance (a runtime record, in practice)."""

    @property
    def state(self) -> str: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def never_started(self) -> bool: ...


def should_restart(rec: ContainerInstance | None, restart_policy: str) -> bool:
    """kubelet ShouldContainerBeRestarted for a container that is not running."""
    if rec is None:
        return True
    if rec.state == "running":
        return False
    if rec.state in ("unknown", "created") or rec.never_started:
        return True  # nothing ran yet: whatever the policy, it gets its one run
    if restart_policy == "Never":
        return False
    if restart_policy == "OnFailure" and rec.exit_code == 0:
        return False
    return True


def container_spec(pod: Pod | None, name: str) -> Container | None:
    """The init or regular container of the pod named `name`."""
    if pod is None or pod.spec is None:
        return None
    for c in [*(pod.spec.init_containers or []), *(pod.spec.containers or [])]:
        if c.name == name:
            return c
    return None


class IncompletePod(ApiError):
    """A Pod without metadata, spec or uid where only a validated static pod can be."""


def meta(pod: Pod) -> ObjectMeta:
    """The metadata of a validated pod (the types keep it optional, as the API does)."""
    if pod.metadata is None:
        raise IncompletePod("pod has no metadata")
    return pod.metadata


def spec(pod: Pod) -> PodSpec:
    """The spec of a validated pod."""
    if pod.spec is None:
        raise IncompletePod(f"pod {pod.metadata.name if pod.metadata else '?'} has no spec")
    return pod.spec


def uid(pod: Pod) -> str:
    """The uid every static pod gets from its source."""
    value = meta(pod).uid
    if not value:
        raise IncompletePod(f"pod {meta(pod).name} has no uid")
    return value


def full_name(pod: Pod | None) -> str:
    """`namespace/name` for messages and logs ("" without a pod or its metadata)."""
    if pod is None or pod.metadata is None:
        return ""
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def log_name(pod: Pod | None) -> str | None:
    """`namespace/name` of a pod, as structured logs name it; None without a pod (an orphan's container)."""
    return full_name(pod) or None
