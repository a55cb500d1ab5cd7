"""What a container needs before its conmon starts: its bundle dir with the image's rootfs mounted, the
image's users and groups, its log file and link, its mounts, and the host's security facts its spec is built
from (seccomp profiles, AppArmor, devices)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.api.pod import full_name
from edgelet.logs import ensure_log_dir
from edgelet.ocispec import build as ocispec
from edgelet.ocispec.apparmor import compute_apparmor
from edgelet.ocispec.errors import SecurityError, SpecError
from edgelet.ocispec.seccomp import goarch
from edgelet.runtime import bundle as bl
from edgelet.runtime import configvolumes, rootfs
from edgelet.runtime.host import (
    HostFacts,
    host_devices,
    loaded_apparmor_profiles,
    parse_group,
    parse_group_members,
    parse_passwd,
)
from edgelet.state import ensure_dir
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.configobjects import ConfigObjects
    from edgelet.api.types import Container, Pod
    from edgelet.images.types import ImageRecord
    from edgelet.util.clock import Clock

log = get_logger("edgelet.runtime")


@dataclasses.dataclass(frozen=True)
class Prepared:
    """The runtime's part of a PreparedContainer: what create_container finishes from."""

    bundle: Path
    log_path: Path
    link: Path
    rootfs_dir: Path
    passwd: dict[str, tuple[int, int]]
    groups: dict[str, int]
    members: dict[str, tuple[str, ...]]
    facts: dict[str, Any]


def _read_rootfs_file(rootfs_dir: Path, rel: str) -> str:
    """A file of the image, refusing symlinks (a hostile image must not make edgelet read host files)."""
    path = rootfs_dir
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            return ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd, "r", errors="replace") as f:
        return f.read(1 << 20)


def prepare_container_dirs(
    log_dir: Path,
    image: ImageRecord,
    bundle: Path,
    cid: str,
    log_path: Path,
    link: Path,
) -> tuple[Path, dict[str, tuple[int, int]], dict[str, int], dict[str, tuple[str, ...]]]:
    """The bundle with its id and termination log, the rootfs mounted, the log dir and link (blocking); the
    rootfs and the image's users, groups and group members."""
    ensure_dir(bundle)
    bl.write_file(bundle / bl.ID_FILE, cid)
    (bundle / bl.TERMINATION_LOG).touch(mode=0o666)
    rootfs_dir = rootfs.mount_rootfs(image.layers, bundle)
    passwd = parse_passwd(_read_rootfs_file(rootfs_dir, "etc/passwd"))
    group_text = _read_rootfs_file(rootfs_dir, "etc/group")
    groups = parse_group(group_text)
    members = parse_group_members(group_text)
    ensure_log_dir(log_dir, log_path.parent)
    ensure_log_dir(log_dir, link.parent)
    if os.path.lexists(link):
        link.unlink()
    link.symlink_to(log_path)
    return rootfs_dir, passwd, groups, members


def container_mounts(
    pod: Pod,
    container: Container,
    layout: bl.PodLayout,
    bundle: Path,
    rro_supported: bool,
    config: tuple[ConfigObjects, Clock] | None = None,
) -> tuple[ocispec.Mount, ...]:
    # After the sandbox, which made the volumes: never two preparations of one tmpfs at once.
    plans = bl.plan_volumes(pod, layout)
    bl.prepare_volumes(plans)
    if config is not None:
        configvolumes.prepare_all(pod, layout, *config)
    return bl.container_mounts(pod, container, layout, plans, bundle, rro_supported=rro_supported)


class SecurityFacts:
    """The host's facts a container's (or pause process's) security settings are built from."""

    def __init__(
        self,
        seccomp_dir: Path,
        host: HostFacts,
        *,
        seccomp_default: bool,
        on_warning: Callable[[Pod, str | None, str, str], None] | None,
    ) -> None:
        self.seccomp_dir = seccomp_dir
        self.host = host
        self.seccomp_default = seccomp_default
        self.on_warning = on_warning

    def seccomp_host(self, pod: Pod) -> ocispec.SeccompHost:
        """The settings and host facts seccomp needs, with the text of every Localhost profile the pod names."""
        profiles: dict[str, str] = {}
        base = self.seccomp_dir
        for name in ocispec.seccomp_profile_names(pod):
            path = base / name
            # Names with '..' or a leading '/' are refused by the builder; never read outside the dir.
            if name.startswith("/") or ".." in name.split("/"):
                continue
            try:
                profiles[name] = path.read_text()
            except FileNotFoundError:
                continue  # the builder says it is missing, naming it
            except (OSError, UnicodeDecodeError) as exc:
                raise SpecError(f"pod {full_name(pod)}: cannot read seccomp profile {str(path)!r}: {exc}") from exc
        return ocispec.SeccompHost(
            default_on=self.seccomp_default,
            arch=goarch(self.host.machine) if self.host.machine else "amd64",
            kernel_version=self.host.kernel_version,
            profile_dir=str(base),
            localhost_profiles=profiles,
        )

    def container_facts(self, pod: Pod, container: Container) -> dict[str, Any]:
        """ContainerContext fields read from the host now: seccomp profiles, AppArmor, /dev for privileged."""
        security_context = container.security_context
        privileged = bool(security_context is not None and security_context.privileged)
        facts: dict[str, Any] = {
            "seccomp": self.seccomp_host(pod),
            "bounding_capabilities": self.host.bounding_capabilities,
            "apparmor_enabled": self.host.apparmor_enabled,
        }
        if self.host.apparmor_enabled:
            facts["apparmor_loaded"] = loaded_apparmor_profiles()
        if privileged:
            facts["host_devices"] = host_devices()
        return facts

    def warn_apparmor(self, pod: Pod, container: Container, ctx: ocispec.ContainerContext) -> None:
        """Tell (log and `on_warning`) when the container runs without the AppArmor profile it asked for."""
        try:
            decision = compute_apparmor(pod, container, enabled=ctx.apparmor_enabled, loaded=ctx.apparmor_loaded)
        except SecurityError:
            return  # the builder has already refused it
        if decision.warning:
            log.warning("AppArmor", pod=full_name(pod), container=container.name, detail=decision.warning)
            if self.on_warning is not None:
                self.on_warning(pod, container.name, "AppArmorProfileNotApplied", decision.warning)


def unmount_bundle(bundle: Path) -> None:
    """Unmount the bundle's rootfs and whatever else is mounted under it."""
    if (bundle / "rootfs").exists() or bl.mounts_under(bundle):
        try:
            rootfs.unmount_rootfs(bundle)
        except NotImplementedError:
            pass
        bl.unmount_all_under(bundle)


def remove_stale_bundle(bundle: Path) -> None:
    """Remove a bundle that names no container (a power cut before its id reached storage)."""
    unmount_bundle(bundle)
    bl.remove_tree(bundle)
