"""Safe volumeMount.subPath mounts: open the subPath without ever following a symlink and bind-mount that open
file, so no container can redirect a sibling's mount to a host path (kubernetes CVE-2017-1002101).

Checking a path and then handing runc the path string leaves a window in
which a container sharing the volume swaps a directory for a symlink. As
kubelet does (pkg/volume/util/subpath/subpath_linux.go), edgelet instead
walks the subPath one component at a time with openat(O_NOFOLLOW) from the
volume root, creates missing directories the same way (mkdirat, then openat
O_NOFOLLOW: a swap after the mkdirat makes the open fail, never escape),
bind-mounts the final descriptor through `/proc/self/fd/N` onto a private
mount point and gives runc that mount point. Whatever the container does to
the volume after the open, the mount shows the object that was opened.

Mount points, one per container and volumeMount index (kubelet's layout)::

    <pod dir>/volume-subpaths/<volume>/<container>/<volumeMount index>

They are unmounted when the container's last bundle is removed and, after a
crash, with the pod (`remove_pod_sub_paths`).
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import ExitStack
from pathlib import Path, PurePosixPath

from edgelet.container.errors import VolumeError
from edgelet.runtime import bundle as bl

SUBPATHS_DIR = "volume-subpaths"

_O_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SubPathError(VolumeError):
    """A volumeMount's subPath cannot be mounted safely (kubelet: CreateContainerConfigError)."""

    def __init__(self, pod: str, container: str, volume: str, sub_path: str, reason: str) -> None:
        self.pod, self.container, self.volume, self.sub_path, self.reason = pod, container, volume, sub_path, reason
        super().__init__(f"pod {pod} container {container!r}: volumeMount {volume!r} subPath {sub_path!r}: {reason}")


def subpaths_dir(pod_dir: Path) -> Path:
    return pod_dir / SUBPATHS_DIR


def mount_point(pod_dir: Path, volume: str, container: str, index: int) -> Path:
    # Volume and container names are DNS labels: safe as path components.
    return subpaths_dir(pod_dir) / volume / container / str(index)


def relative_inside(base: str, target: str) -> PurePosixPath | None:
    """`target` relative to `base` when it lies at or below it, else None (pure)."""
    b, t = PurePosixPath(os.path.normpath(base)), PurePosixPath(os.path.normpath(target))
    if t == b:
        return PurePosixPath()
    if b in t.parents:
        return t.relative_to(b)
    return None


def open_sub_path(volume_path: Path, sub_path: str) -> int:
    """An O_PATH descriptor of `volume_path/sub_path`, creating missing directories, never following a symlink.

    Symlinks that stay inside the volume are resolved first (kubelet allows
    them); the resolved path is then walked with O_NOFOLLOW, so a symlink
    planted or swapped in meanwhile fails the open instead of being followed,
    and nothing is ever created outside the volume. Raises OSError or
    ValueError(reason); the caller adds the context.
    """
    rel = bl.check_sub_path(sub_path)
    base = os.path.realpath(volume_path)
    inside = relative_inside(base, os.path.realpath(os.path.join(base, *rel.parts)))
    if inside is None:
        raise ValueError("resolves outside the volume")
    with ExitStack() as stack:
        fd = os.open(base, _O_PATH | os.O_DIRECTORY)
        stack.callback(os.close, fd)
        # kubelet gives created directories the volume root's mode (an emptyDir's 0777 stays usable by any uid).
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        parts = inside.parts
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                child = os.open(part, _O_PATH, dir_fd=fd)
            except FileNotFoundError:
                child = _make_dir(fd, part, mode)
            stack.callback(os.close, child)
            kind = os.fstat(child).st_mode
            if stat.S_ISLNK(kind):
                raise ValueError(f"{'/'.join(parts[: i + 1])} is a symlink (changed while mounting?)")
            if not last and not stat.S_ISDIR(kind):
                raise ValueError(f"{'/'.join(parts[: i + 1])} is not a directory")
            fd = child
        return os.dup(fd)  # O_CLOEXEC is not inherited by dup: only the caller's own mount uses it


def _make_dir(parent_fd: int, name: str, mode: int) -> int:
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        pass  # made by someone else meanwhile: the O_NOFOLLOW open below decides
    # O_DIRECTORY|O_NOFOLLOW: whatever replaced it since the mkdirat (a symlink, a file) fails here.
    fd = os.open(name, _O_DIR, dir_fd=parent_fd)
    try:
        os.fchmod(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return fd


def _prepare_mount_point(target: Path, is_dir: bool) -> None:
    """An empty mount point of the right kind at `target`, whatever an earlier attempt left there."""
    if bl.mounts_under(target):
        bl.unmount_all_under(target)
    if os.path.lexists(target) and (target.is_dir() and not target.is_symlink()) != is_dir:
        if target.is_dir():
            bl.remove_tree(target)
        else:
            target.unlink()
    target.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    if is_dir:
        target.mkdir(mode=0o750, exist_ok=True)
    elif not target.exists():
        target.touch(mode=0o640)


def mount_sub_path(
    pod_dir: Path, volume_path: Path, *, pod: str, volume: str, container: str, index: int, sub_path: str
) -> Path:
    """Bind-mount `volume_path/sub_path` safely at the container's mount point; returns the mount point."""
    try:
        fd = open_sub_path(volume_path, sub_path)
    except (OSError, ValueError, VolumeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
            reason = "a symlink is in the way (changed while mounting?)"
        raise SubPathError(pod, container, volume, sub_path, reason) from exc
    target = mount_point(pod_dir, volume, container, index)
    try:
        _prepare_mount_point(target, stat.S_ISDIR(os.fstat(fd).st_mode))
        bl.mount_bind(f"/proc/self/fd/{fd}", target)
    except (OSError, VolumeError) as exc:
        raise SubPathError(pod, container, volume, sub_path, f"cannot mount it at {target}: {exc}") from exc
    finally:
        os.close(fd)
    return target


def _remove_mount_points(top: Path) -> None:
    """Unmount everything at or below `top`, then remove it (never across a mount still in place)."""
    if not os.path.lexists(top):
        return
    bl.unmount_all_under(top)
    bl.remove_tree(top)


def remove_container_sub_paths(pod_dir: Path, container: str) -> None:
    """Unmount and remove the subPath mounts of one container (every volume)."""
    top = subpaths_dir(pod_dir)
    if not top.is_dir():
        return
    for volume_dir in top.iterdir():
        _remove_mount_points(volume_dir / container)
        try:
            volume_dir.rmdir()
        except OSError:
            pass  # other containers' mounts remain
    try:
        top.rmdir()
    except OSError:
        pass


def remove_pod_sub_paths(pod_dir: Path) -> None:
    """Unmount and remove every subPath mount of a pod (removal, and the leftovers of a crash)."""
    _remove_mount_points(subpaths_dir(pod_dir))
