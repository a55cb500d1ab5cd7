"""The pod sandbox: whether it needs a pause process, the pause rootfs built once from the host's static catatonit,
and which namespaces containers join."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.container.errors import SandboxError

if TYPE_CHECKING:
    from edgelet.api.types import Pod
    from edgelet.images.types import ImageRecord

PAUSE_ARGS = ("/catatonit", "-P")
# Mount points runc needs inside a read-only root (it cannot create them there).
_PAUSE_DIRS = ("proc", "dev", "sys", "etc", "tmp", "run")


@dataclass(frozen=True)
class PauseSpec:
    """Where the pause rootfs is and what to run in it."""

    rootfs: Path | None  # None: the pause image's layers are mounted into the sandbox bundle
    args: tuple[str, ...]
    image: ImageRecord | None = None


def ensure_pause_rootfs(root_dir: Path, catatonit_bin: str) -> Path:
    """`<root_dir>/pause/rootfs` with a copy of the static catatonit; built once, atomically."""
    target = root_dir / "pause" / "rootfs"
    if (target / "catatonit").is_file():
        return target
    src = shutil.which(catatonit_bin) if not os.path.isabs(catatonit_bin) else catatonit_bin
    if not src or not os.path.isfile(src):
        raise SandboxError(f"pause binary {catatonit_bin!r} not found (install catatonit or set a pause image)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".rootfs-", dir=target.parent))
    try:
        for d in _PAUSE_DIRS:
            (tmp / d).mkdir(mode=0o755)
        shutil.copy2(src, tmp / "catatonit")
        (tmp / "catatonit").chmod(0o755)
        (tmp).chmod(0o755)
        try:
            os.rename(tmp, target)
        except OSError:
            # Someone else built it concurrently: theirs is as good as ours.
            if not (target / "catatonit").is_file():
                raise
    except OSError as exc:
        raise SandboxError(f"cannot build the pause rootfs at {target}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def pause_spec(root_dir: Path, catatonit_bin: str, image: ImageRecord | None) -> PauseSpec:
    if image is None:
        return PauseSpec(ensure_pause_rootfs(root_dir, catatonit_bin), PAUSE_ARGS)
    args = tuple(image.config.entrypoint) + tuple(image.config.cmd)
    if not args:
        raise SandboxError(f"pause image {image.references[:1] or image.id} has neither entrypoint nor cmd")
    return PauseSpec(None, args, image)


def needs_infra(pod: Pod) -> bool:
    """Whether the pod needs a pause process (pure): only as PID 1 of a shared PID namespace
    (shareProcessNamespace without hostPID); every other namespace can be pinned as a file."""
    spec = pod.spec
    return bool(spec is not None and spec.share_process_namespace and not spec.host_pid)


def pinned_kinds(pod: Pod, own_netns: bool) -> tuple[str, ...]:
    """The namespaces to pin for a sandbox without an infra container (pure): uts unless hostNetwork, ipc
    unless hostIPC, net unless hostNetwork or CNI made the network namespace (`own_netns` False)."""
    spec = pod.spec
    host_network = bool(spec is not None and spec.host_network)
    host_ipc = bool(spec is not None and spec.host_ipc)
    kinds: list[str] = []
    if not host_network and own_netns:
        kinds.append("net")
    if not host_ipc:
        kinds.append("ipc")
    if not host_network:
        kinds.append("uts")
    return tuple(kinds)


def sandbox_namespace_paths(
    pod: Pod, pause_pid: int | None, netns: str = "", pinned: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The namespaces a container joins from its sandbox (pure): net and uts unless hostNetwork, ipc unless
    hostIPC, pid only with shareProcessNamespace (and not hostPID). The network namespace is the CNI file
    when there is one. `pinned` ({OCI type: file}) is a sandbox without an infra container: its files are
    joined, and `pause_pid` is None."""
    spec = pod.spec
    host_network = bool(spec is not None and spec.host_network)
    host_ipc = bool(spec is not None and spec.host_ipc)
    host_pid = bool(spec is not None and spec.host_pid)
    share_pid = bool(spec is not None and spec.share_process_namespace)
    paths: dict[str, str] = {}
    if pinned is not None:
        for kind in ("network", "ipc", "uts"):
            if kind in pinned:
                paths[kind] = pinned[kind]
        if netns and not host_network:
            paths["network"] = netns
        return paths
    ns = f"/proc/{pause_pid}/ns"
    if not host_network:
        paths["network"] = netns or f"{ns}/net"
        paths["uts"] = f"{ns}/uts"
    if not host_ipc:
        paths["ipc"] = f"{ns}/ipc"
    if share_pid and not host_pid:
        paths["pid"] = f"{ns}/pid"
    return paths
