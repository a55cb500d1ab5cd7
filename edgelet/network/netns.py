"""A pod's network namespace as a file: made by a thread that unshares and bind-mounts its new namespace.

The file outlives the thread and any process in it; `remove` unmounts and
deletes it, which frees the namespace (and the veth in it) once no process
holds it.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from edgelet.network.errors import NetworkError
from edgelet.util.libc import libc

CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MNT_DETACH = 2


def _check(rc: int, what: str, path: Path) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise NetworkError(f"{what} {path}: {os.strerror(err)}")


def create(path: Path) -> None:
    """A new network namespace bind-mounted at `path` (a new empty file)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.close(fd)
    failure: list[BaseException] = []

    def work() -> None:
        # unshare(CLONE_NEWNET) moves only this thread; it ends right after, the agent's threads never move.
        try:
            _check(libc().unshare(CLONE_NEWNET), "unshare for", path)
            source = f"/proc/self/task/{threading.get_native_id()}/ns/net".encode()
            _check(libc().mount(source, str(path).encode(), b"none", ctypes.c_ulong(MS_BIND), None), "bind-mount", path)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            failure.append(exc)

    t = threading.Thread(target=work, name="netns", daemon=True)
    t.start()
    t.join()
    if failure:
        path.unlink(missing_ok=True)
        raise failure[0]


def remove(path: Path) -> None:
    """Unmount and delete; a missing file is fine."""
    if not path.exists():
        return
    if libc().umount2(str(path).encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (22,):  # EINVAL: not a mount point (a crash before the bind)
            raise NetworkError(f"unmount {path}: {os.strerror(err)}")
    path.unlink(missing_ok=True)


def is_live(path: Path) -> bool:
    """Whether `path` is a mounted network namespace."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            return any(line.split(" ", 5)[4] == str(path) for line in f)
    except OSError:
        return False
