"""The one-file build's housekeeping: removing the unpack directories that killed runs left behind.

PyInstaller's one-file bootloader unpacks into a fresh `_MEIxxxxxx`
directory at every start and removes it at exit, unless it is SIGKILLed
(systemd's stop timeout, the watchdog, the OOM killer): then ~20 MB stays on
disk, every time. At start the agent removes the siblings of its own
directory that no live process maps (every running one-file edgelet maps its
libpython from its own directory) and that are older than a grace period
(a bootloader that is still unpacking maps nothing yet).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

from edgelet.util.log import get_logger

log = get_logger("edgelet.frozen")

UNPACK_PREFIX = "_MEI"
GRACE_SECONDS = 120.0


def own_unpack_dir() -> Path | None:
    """This process's one-file unpack directory, or None (one-dir build, source checkout)."""
    meipass = getattr(sys, "_MEIPASS", None)
    if meipass is None or not os.path.basename(meipass).startswith(UNPACK_PREFIX):
        return None
    return Path(meipass)


def stale_unpack_dirs(
    candidates: Iterable[tuple[str, float]], mapped: set[str], own: str, now: float, grace: float = GRACE_SECONDS
) -> list[str]:
    """Of (name, mtime) candidates, the names to remove: not ours, mapped by no process, older than `grace`."""
    return sorted(
        name
        for name, mtime in candidates
        if name.startswith(UNPACK_PREFIX) and name != own and name not in mapped and now - mtime >= grace
    )


def mapped_names(parent: Path, proc: Path = Path("/proc")) -> set[str]:
    """Names of `parent`'s entries that some process has a file mapped from (/proc/*/maps)."""
    prefix = str(parent).rstrip("/") + "/"
    names: set[str] = set()
    for maps in proc.glob("[0-9]*/maps"):
        try:
            text = maps.read_text(errors="replace")
        except OSError:
            continue  # the process exited, or is not ours to read
        for line in text.splitlines():
            at = line.find(prefix)
            if at >= 0:
                names.add(line[at + len(prefix) :].split("/", 1)[0])
    return names


def remove_stale_unpack_dirs(now: float) -> list[Path]:
    """Remove the leftovers next to our own unpack directory; returns what was removed (never raises)."""
    own = own_unpack_dir()
    if own is None:
        return []
    parent = own.parent
    try:
        candidates = [(entry.name, entry.stat().st_mtime) for entry in parent.iterdir() if entry.is_dir()]
    except OSError as exc:
        log.warning("Cannot list the unpack directory", path=str(parent), err=str(exc))
        return []
    removed = []
    for name in stale_unpack_dirs(candidates, mapped_names(parent), own.name, now):
        path = parent / name
        try:
            shutil.rmtree(path)
        except OSError as exc:
            log.warning("Cannot remove a stale unpack directory", path=str(path), err=str(exc))
            continue
        removed.append(path)
    if removed:
        log.info("Removed unpack directories of killed runs", count=len(removed), path=str(parent))
    return removed
