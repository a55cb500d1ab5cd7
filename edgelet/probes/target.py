"""What a probe run is aimed at (a container and its pod's network namespace) and what it yields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from edgelet.probes.machine import Result

if TYPE_CHECKING:
    from edgelet.api.types import Container

USER_AGENT = "kube-probe/1.31"
DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Outcome:
    """One probe run: the result and kubelet's output text; `error` means the result must be discarded."""

    result: Result
    message: str = ""
    error: bool = False
    warning: bool = False  # kubelet's probe.Warning: counts as a success, reported as a ProbeWarning event


@dataclass(frozen=True)
class ProbeTarget:
    """Where a container's probes go: the container (exec) and its pod's network namespace (None = host)."""

    container_id: str
    netns: str | None
    ports: Mapping[str, int] = field(default_factory=dict)  # named container ports


def target_for(container_id: str, container: Container, sandbox_netns: str | None, host_network: bool) -> ProbeTarget:
    """The probe target of one container instance, in its sandbox's network namespace (`SandboxRecord.netns_path`)."""
    ns = None if host_network else sandbox_netns
    ports = {p.name: p.container_port for p in container.ports or [] if p.name}
    return ProbeTarget(container_id=container_id, netns=ns, ports=ports)
