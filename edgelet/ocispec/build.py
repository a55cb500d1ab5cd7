"""Pure translation of a pod's container (or its sandbox) into an OCI runtime config.json.

CONTRACT STUB: the signatures and context types are agreed; the bodies are a
minimal working version to be completed (hardening, user, env merge, resources).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.images.types import ImageConfig


class SpecError(ValueError):
    """The pod asks for something that cannot be expressed (CreateContainerConfigError)."""


@dataclass(frozen=True)
class Mount:
    destination: str
    source: str
    type: str = "bind"
    options: tuple[str, ...] = ("rbind", "rw")


@dataclass(frozen=True)
class SandboxContext:
    """Facts the caller gathered for a pod's pause sandbox."""

    rootfs: str  # absolute path of the pause rootfs
    args: tuple[str, ...]  # e.g. ("/catatonit", "-P")
    cgroups_path: str  # e.g. "/kubepods/pod<uid>/<sandbox id>"
    hostname: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    extra_mounts: tuple[Mount, ...] = ()


@dataclass(frozen=True)
class ContainerContext:
    """Facts the caller gathered for one container: paths, namespaces, users."""

    rootfs: str  # absolute path of the mounted rootfs
    cgroups_path: str  # e.g. "/kubepods/pod<uid>/<container id>"
    # namespace type ("network", "ipc", "uts", "pid") -> path to join, e.g. /proc/<pause pid>/ns/net
    namespace_paths: Mapping[str, str]
    hostname: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()  # volumes, /etc/hosts, /etc/resolv.conf, termination log
    # name -> (uid, gid) from the image's /etc/passwd, name -> gid from /etc/group
    passwd: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    groups: Mapping[str, int] = field(default_factory=dict)


def build_sandbox_spec(pod: "Pod", ctx: SandboxContext) -> dict:
    raise NotImplementedError


def build_container_spec(pod: "Pod", container: "Container", image: "ImageConfig", ctx: ContainerContext) -> dict:
    raise NotImplementedError
