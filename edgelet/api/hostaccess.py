"""Which host access a pod is granted (host namespaces, the host's root directory writable), for the warning
edgelet emits once per pod: kubelet allows these for static pods and so does edgelet, but not silently."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgelet.api.types import Container, EphemeralContainer, Pod

REASON = "HostAccess"


def is_host_root(path: str) -> bool:
    """`/`, however spelled (`//`, `/.`, `/..`)."""
    return path.startswith("/") and not posixpath.normpath(path).strip("/")


def describe_host_access(pod: Pod) -> list[str]:
    """One phrase per host access the pod is granted, in a fixed order; empty for a confined pod."""
    spec = pod.spec
    if spec is None:
        return []
    found: list[str] = []
    if spec.host_network:
        found.append("hostNetwork (the node's network namespace)")
    if spec.host_pid:
        found.append("hostPID (every process of the node is visible and can be signalled)")
    if spec.host_ipc:
        found.append("hostIPC (the node's IPC namespace)")
    roots = {v.name for v in spec.volumes or [] if v.host_path is not None and is_host_root(v.host_path.path)}
    every: list[Container | EphemeralContainer] = [
        *(spec.init_containers or []),
        *spec.containers,
        *(spec.ephemeral_containers or []),
    ]
    for c in every:
        for vm in c.volume_mounts or []:
            if vm.name in roots and not vm.read_only:
                found.append(f"hostPath / read-write (volume {vm.name!r} in container {c.name!r})")
    return found


def host_access_message(found: list[str]) -> str:
    return "pod is granted host access (allowed for static pods): " + "; ".join(found)
