"""Pure helpers over a Pod that several layers need: which container is which, and a validated pod's parts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgelet.api.errors import ApiError

if TYPE_CHECKING:
    from edgelet.api.types import Container, ObjectMeta, Pod, PodSpec


def is_sidecar(container: "Container") -> bool:
    """An init container with restartPolicy Always (kubelet IsRestartableInitContainer)."""
    return container.restart_policy == "Always"


def container_spec(pod: "Pod | None", name: str) -> "Container | None":
    """The init or regular container of the pod named `name`."""
    if pod is None or pod.spec is None:
        return None
    for c in [*(pod.spec.init_containers or []), *(pod.spec.containers or [])]:
        if c.name == name:
            return c
    return None


class IncompletePod(ApiError):
    """A Pod without metadata, spec or uid where only a validated static pod can be."""


def meta(pod: "Pod") -> "ObjectMeta":
    """The metadata of a validated pod (the types keep it optional, as the API does)."""
    if pod.metadata is None:
        raise IncompletePod("pod has no metadata")
    return pod.metadata


def spec(pod: "Pod") -> "PodSpec":
    """The spec of a validated pod."""
    if pod.spec is None:
        raise IncompletePod(f"pod {pod.metadata.name if pod.metadata else '?'} has no spec")
    return pod.spec


def uid(pod: "Pod") -> str:
    """The uid every static pod gets from its source."""
    value = meta(pod).uid
    if not value:
        raise IncompletePod(f"pod {meta(pod).name} has no uid")
    return value
