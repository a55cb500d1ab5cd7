"""Pure helpers over a Pod's spec that several layers need: which container is which."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod


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
