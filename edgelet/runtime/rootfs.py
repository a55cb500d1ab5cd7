"""Per-container root filesystems: an overlay over read-only image layers, or a copy where overlay is missing.

The overlay is mounted with mount(2) directly (no subprocess). Its options
must fit in one page, so when the layer paths are too long they are passed as
`/proc/self/fd/N` of O_PATH descriptors opened for the call: short, needs no
chdir (which would be process-wide and race with other threads) and no
symlink farm to maintain. Where overlayfs cannot be mounted (no module, a
nested unprivileged setup) the layers are copied bottom-up into the rootfs,
applying the overlay whiteouts and opaque directories the same way the
kernel would.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import threading
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from edgelet.container.errors import RuntimeError_
from edgelet.util import linux
from edgelet.util.libc import libc
from edgelet.util.log import get_logger

log = get_logger(__name__)

ROOTFS = "rootfs"
UPPER = "upper"
WORK = "work"
EMPTY_LOWER = "lower-empty"
COPY_DONE = ".rootfs-copied"  # marks a complete copied rootfs (idempotency without a mount to look at)
OPAQUE_XATTR = "trusted.overlay.opaque"
MAX_MOUNT_DATA = 4000  # the kernel copies at most one page (4096) of mount data; keep a margin
_COPY_XATTR_PREFIXES = ("user.", "security.capability")

_warned_copy = False
_warn_lock = threading.Lock()


class RootfsError(RuntimeError_, OSError):
    """Mounting or removing a container rootfs failed; names the directory and the reason."""

    def __init__(self, path: Path | str, reason: str, err: int = 0) -> None:
        super().__init__(err, f"container rootfs {path}: {reason}")
        self.path = str(path)
        self.reason = reason


def _mount(source: str, target: str, fstype: str, flags: int, data: str) -> None:
    if libc().mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags), data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def _umount(target: str, flags: int = 0) -> None:
    if libc().umount2(target.encode(), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def _unescape_mountinfo(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def is_mountpoint(path: Path) -> bool:
    """Whether `path` is a mount point in this mount namespace (from /proc/self/mountinfo, not st_dev)."""
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return any(_unescape_mountinfo(line.split(" ", 5)[4]) == target for line in f)


def build_overlay_options(lower: Sequence[str], upper: str, work: str) -> str:
    """The overlay mount data; `lower` is top first, as overlayfs wants it (pure)."""
    return f"lowerdir={':'.join(lower)},upperdir={upper},workdir={work}"


def _escape_lower(path: str) -> str:
    # ':' separates lowerdirs and ',' options; overlayfs accepts a backslash escape for both.
    return path.replace("\\", "\\\\").replace(":", "\\:").replace(",", "\\,")


def _mount_overlay(layers: Sequence[Path], container_dir: Path, rootfs: Path) -> None:
    upper, work = container_dir / UPPER, container_dir / WORK
    for d in (upper, work):
        d.mkdir(mode=0o755, exist_ok=True)
    lowers = [str(p) for p in reversed(layers)]
    if not lowers:
        empty = container_dir / EMPTY_LOWER
        empty.mkdir(mode=0o755, exist_ok=True)
        lowers = [str(empty)]
    data = build_overlay_options([_escape_lower(p) for p in lowers], str(upper), str(work))
    with ExitStack() as stack:
        if len(data) > MAX_MOUNT_DATA:
            fds = []
            for p in lowers:
                fd = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                stack.callback(os.close, fd)
                fds.append(f"/proc/self/fd/{fd}")
            data = build_overlay_options(fds, str(upper), str(work))
            if len(data) > MAX_MOUNT_DATA:
                # The copy fallback still works, so this is a mount failure like any other.
                raise OSError(errno.E2BIG, f"{len(lowers)} layers are too many for one overlay mount")
        _mount("overlay", str(rootfs), "overlay", 0, data)


def probe_overlay() -> str | None:
    """Mount a throwaway overlay to see whether overlayfs works here; None when it does, else why not.

    Reading /proc/filesystems is not enough: the module loads on the first
    mount, so on a fresh boot overlay is missing from the list yet works.
    Needs root (CAP_SYS_ADMIN); the scratch dir is always removed.
    """
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="edgelet-overlay-probe-"))
    try:
        lower, upper, work, merged = (scratch / n for n in ("lower", "upper", "work", "merged"))
        for d in (lower, upper, work, merged):
            d.mkdir()
        try:
            _mount("overlay", str(merged), "overlay", 0, build_overlay_options([str(lower)], str(upper), str(work)))
        except OSError as exc:
            return exc.strerror or str(exc)
        _umount(str(merged), linux.MNT_DETACH)
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _copy_layers(layers: Sequence[Path], container_dir: Path, rootfs: Path) -> None:
    """Build the rootfs by copying the layers bottom-up, as a merged overlay would look; complete or absent."""
    staging = container_dir / (ROOTFS + ".copying")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(mode=0o755)
    for layer in layers:
        _copy_layer(layer, staging)
    if rootfs.exists():
        rootfs.rmdir()  # the empty mount point made earlier
    os.rename(staging, rootfs)
    (container_dir / COPY_DONE).touch()


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(path: str) -> bool:
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _remove(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _copy_meta(src: str, dst: str, st: os.stat_result, *, is_link: bool = False) -> None:
    if os.geteuid() == 0:
        os.chown(dst, st.st_uid, st.st_gid, follow_symlinks=False)
    if not is_link:
        os.chmod(dst, stat.S_IMODE(st.st_mode))
        try:
            for name in os.listxattr(src, follow_symlinks=False):
                if name.startswith(_COPY_XATTR_PREFIXES):
                    os.setxattr(dst, name, os.getxattr(src, name, follow_symlinks=False), follow_symlinks=False)
        except OSError:
            pass  # xattrs are a nicety (file capabilities); the file itself is there
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _copy_layer(layer: Path, dest: Path) -> None:
    """Merge one layer into `dest`. Destination parents are always real directories made here, because a
    directory in a layer replaces whatever non-directory lower layers had at that path (as overlayfs does)."""
    dir_times: list[tuple[str, str, os.stat_result]] = []
    for root, dirs, files in os.walk(layer):
        rel = os.path.relpath(root, layer)
        droot = str(dest) if rel == "." else os.path.join(dest, rel)
        for name in sorted(dirs + files):
            src = os.path.join(root, name)
            dst = os.path.join(droot, name)
            st = os.lstat(src)
            if _is_whiteout(st):
                _remove(dst)
            elif stat.S_ISDIR(st.st_mode):
                try:
                    dst_st: os.stat_result | None = os.lstat(dst)
                except FileNotFoundError:
                    dst_st = None
                if dst_st is not None and (not stat.S_ISDIR(dst_st.st_mode) or _is_opaque(src)):
                    _remove(dst)
                    dst_st = None
                if dst_st is None:
                    os.mkdir(dst, 0o700)
                dir_times.append((src, dst, st))
            elif stat.S_ISLNK(st.st_mode):
                _remove(dst)
                os.symlink(os.readlink(src), dst)
                _copy_meta(src, dst, st, is_link=True)
            elif stat.S_ISREG(st.st_mode):
                _remove(dst)
                shutil.copyfile(src, dst, follow_symlinks=False)
                _copy_meta(src, dst, st)
            else:
                _remove(dst)
                if os.geteuid() == 0 or stat.S_ISFIFO(st.st_mode):
                    os.mknod(dst, st.st_mode, st.st_rdev)
                    _copy_meta(src, dst, st)
        # os.walk must not descend into symlinks-to-dirs: it does not by default (followlinks=False).
    for src, dst, st in reversed(dir_times):
        _copy_meta(src, dst, st)


def mount_rootfs(layers: Sequence[Path], container_dir: Path) -> Path:
    """Mount `layers` (bottom first) as the rootfs at `container_dir/rootfs`; upper and work dirs
    live in `container_dir` too. Returns the rootfs path. Idempotent: an existing mount is kept."""
    global _warned_copy
    container_dir = Path(container_dir)
    rootfs = container_dir / ROOTFS
    try:
        container_dir.mkdir(parents=True, exist_ok=True)
        if (container_dir / COPY_DONE).exists() and rootfs.is_dir():
            return rootfs
        if rootfs.is_dir() and is_mountpoint(rootfs):
            return rootfs
        rootfs.mkdir(mode=0o755, exist_ok=True)
    except OSError as exc:
        raise RootfsError(container_dir, f"cannot prepare directories: {exc}", exc.errno or 0) from exc
    try:
        _mount_overlay(layers, container_dir, rootfs)
        return rootfs
    except RootfsError:
        raise
    except OSError as exc:
        overlay_error = exc
    with _warn_lock:
        if not _warned_copy:
            _warned_copy = True
            log.warning(
                "Overlay mount failed; copying image layers into each rootfs instead (slower, uses disk)",
                path=str(rootfs),
                err=str(overlay_error),
            )
    try:
        for d in (UPPER, WORK, EMPTY_LOWER):
            shutil.rmtree(container_dir / d, ignore_errors=True)
        _copy_layers(layers, container_dir, rootfs)
    except OSError as exc:
        raise RootfsError(
            container_dir,
            f"overlay mount failed ({overlay_error}) and copying the layers failed: {exc}",
            exc.errno or 0,
        ) from exc
    return rootfs


def release_rootfs(container_dir: Path) -> None:
    """Unmount an exited container's overlay and keep its writable layer (upper/) for the record, as
    containerd unmounts a task's rootfs on exit and keeps the snapshot until the container is removed.
    Nothing to do for a copied rootfs or one already unmounted."""
    rootfs = Path(container_dir) / ROOTFS
    if not (rootfs.is_dir() and is_mountpoint(rootfs)):
        return
    try:
        _umount(str(rootfs))
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            _umount(str(rootfs), linux.MNT_DETACH)
        elif exc.errno != errno.EINVAL:
            raise RootfsError(container_dir, f"cannot unmount: {exc}", exc.errno or 0) from exc


def unmount_rootfs(container_dir: Path) -> None:
    """Undo `mount_rootfs` (no error when nothing is mounted) and remove upper/work dirs."""
    container_dir = Path(container_dir)
    rootfs = container_dir / ROOTFS
    try:
        if rootfs.is_dir() and is_mountpoint(rootfs):
            try:
                _umount(str(rootfs))
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    # Something still holds it (a dying process); detach so the dirs can go now.
                    log.warning("Rootfs busy; detaching it lazily", path=str(rootfs))
                    _umount(str(rootfs), linux.MNT_DETACH)
                elif exc.errno != errno.EINVAL:  # EINVAL: not mounted after all (a race): fine
                    raise
        for name in (COPY_DONE,):
            try:
                (container_dir / name).unlink()
            except FileNotFoundError:
                pass
        for name in (ROOTFS, ROOTFS + ".copying", UPPER, WORK, EMPTY_LOWER):
            path = container_dir / name
            if path.is_dir() and is_mountpoint(path):
                raise RootfsError(container_dir, f"{path} is still mounted; not removing it", errno.EBUSY)
            if path.exists():
                shutil.rmtree(path)
    except RootfsError:
        raise
    except OSError as exc:
        raise RootfsError(container_dir, f"cannot unmount or remove: {exc}", exc.errno or 0) from exc
