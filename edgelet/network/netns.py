"""A pod's network namespace as a file: made by a thread that unshares and bind-mounts its new namespace.

The file outlives the thread and any process in it; `remove` unmounts and
deletes it, which frees the namespace (and the veth in it) once no process
holds it.
"""

from __future__ import annotations

import os
from pathlib import Path

from edgelet.network.errors import NetworkError
from edgelet.util import linux


def create(path: Path) -> None:
    """A new network namespace bind-mounted at `path` (a new empty file)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.close(fd)
    try:
        # unshare(CLONE_NEWNET) moves only a thread of its own; the agent's threads never move.
        linux.pin_namespaces({"net": path}, str(path), thread_name="netns")
    except BaseException as exc:
        path.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise NetworkError(exc.strerror or str(exc)) from exc
        raise


def remove(path: Path) -> None:
    """Unmount and delete; a missing file is fine."""
    if not path.exists():
        return
    try:
        linux.unpin_file(path)
    except OSError as exc:
        raise NetworkError(exc.strerror or str(exc)) from exc


def is_live(path: Path) -> bool:
    """Whether `path` is a mounted network namespace."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            return any(line.split(" ", 5)[4] == str(path) for line in f)
    except OSError:
        return False
