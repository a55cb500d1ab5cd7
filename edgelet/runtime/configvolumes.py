"""ConfigMap, Secret and projected volumes on the host: written with kubelet's atomic writer (a timestamped
directory, a `..data` symlink swapped by one rename, the user-visible names as symlinks through `..data`),
Secret-holding ones on a tmpfs of their own, rewritten in place when the objects change."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from edgelet.api.configobjects import FileProjection, MissingObject, holds_secret, is_config_volume, volume_payload
from edgelet.container.errors import VolumeError
from edgelet.runtime import bundle as bl

if TYPE_CHECKING:
    from edgelet.api.configobjects import ConfigObjects
    from edgelet.api.types import Pod, Volume
    from edgelet.util.clock import Clock

DATA_LINK = "..data"
_TMP_LINK = "..data_tmp"
# The writer's own names start with "..", which no key may (the validator refuses them).
_OWN = ".."
_SECRET_TMPFS = ("mode=0755", "size=16m")


def _timestamp_prefix(now: float) -> str:
    import time

    return time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime(now))


def _check_path(rel: str) -> PurePosixPath:
    """A payload path: relative, no `..` element, not one of the writer's own names."""
    path = PurePosixPath(rel)
    if not rel or path.is_absolute() or ".." in path.parts or rel.startswith(_OWN):
        raise VolumeError(f"invalid file path {rel!r} in volume payload")
    return path


def _current(target: Path) -> Path | None:
    try:
        link = os.readlink(target / DATA_LINK)
    except OSError:
        return None
    return target / link


def _same(current: Path, payload: Mapping[str, FileProjection]) -> bool:
    """The timestamped directory holds exactly `payload` (bytes and modes): nothing to write."""
    found: set[str] = set()
    for root, _dirs, files in os.walk(current):
        for name in files:
            full = Path(root) / name
            found.add(str(full.relative_to(current)))
    if found != set(payload):
        return False
    for rel, proj in payload.items():
        full = current / rel
        try:
            st = full.lstat()
            if (st.st_mode & 0o7777) != proj.mode or full.read_bytes() != proj.data:
                return False
        except OSError:
            return False
    return True


def write_payload(target: Path, payload: Mapping[str, FileProjection], now: float) -> bool:
    """Make `target` show `payload` with one atomic switch; False when it already did (nothing written).

    kubelet's AtomicWriter.Write: the files go into a new `..<timestamp>.<random>` directory, a `..data_tmp`
    symlink to it is renamed over `..data` (a reader sees the old set or the new, never a mix), the
    top-level names are symlinks `name -> ..data/name`, and the old directory and stale names go last.
    """
    for rel in payload:
        _check_path(rel)
    target.mkdir(mode=0o755, parents=True, exist_ok=True)
    old = _current(target)
    if old is not None and _same(old, payload):
        return False
    ts_dir = Path(tempfile.mkdtemp(prefix=_timestamp_prefix(now), dir=target))
    os.chmod(ts_dir, 0o755)
    for rel, proj in sorted(payload.items()):
        full = ts_dir / rel
        full.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, proj.data)
            os.fchmod(fd, proj.mode)
        finally:
            os.close(fd)
    tmp_link = target / _TMP_LINK
    if os.path.lexists(tmp_link):
        os.unlink(tmp_link)
    os.symlink(ts_dir.name, tmp_link)
    os.rename(tmp_link, target / DATA_LINK)
    wanted = {PurePosixPath(rel).parts[0] for rel in payload}
    for name in sorted(wanted):
        link = target / name
        if not os.path.lexists(link):
            os.symlink(f"{DATA_LINK}/{name}", link)
    for entry in os.listdir(target):
        if entry.startswith(_OWN) or entry in wanted:
            continue
        full = target / entry
        if full.is_symlink():
            os.unlink(full)
    if old is not None and old.name != ts_dir.name:
        shutil.rmtree(old, ignore_errors=True)
    return True


def _mount_secret_tmpfs(path: Path) -> None:
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    if not bl.is_mountpoint(path):
        bl.mount_tmpfs(path, list(_SECRET_TMPFS))


def prepare_volume(pod: Pod, volume: Volume, layout: bl.PodLayout, objects: ConfigObjects, clock: Clock) -> bool:
    """Write one configMap/secret/projected volume of `pod` (a tmpfs first when it may hold Secret bytes), or
    bring it up to date; False when it already was. Raises VolumeError naming the object or key a
    non-optional reference lacks."""
    namespace = (pod.metadata.namespace if pod.metadata else None) or "default"
    target = layout.volume_dir(volume.name)
    layout.volumes_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        payload = volume_payload(volume, namespace, objects)
    except MissingObject as exc:
        raise VolumeError(f"volume {volume.name!r}: {exc}") from None
    if holds_secret(volume):
        _mount_secret_tmpfs(target)
    try:
        return write_payload(target, payload, clock.now())
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise VolumeError(f"volume {volume.name!r}: no space left writing it") from exc
        raise VolumeError(f"volume {volume.name!r}: cannot write it: {exc.strerror or exc}") from exc


def config_volumes(pod: Pod) -> list[Volume]:
    spec = pod.spec
    return [v for v in (spec.volumes or []) if is_config_volume(v)] if spec is not None else []


def prepare_all(pod: Pod, layout: bl.PodLayout, objects: ConfigObjects, clock: Clock) -> list[str]:
    """Write (or bring up to date) every config volume of the pod; the names of those rewritten."""
    return [v.name for v in config_volumes(pod) if prepare_volume(pod, v, layout, objects, clock)]
