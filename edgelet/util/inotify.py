"""Directory watches on the event loop itself: one inotify descriptor read by asyncio, no thread, no dependency.

watchdog (what the watches used before) runs an observer thread per watcher that wakes every second, an
emitter thread per watch and a reader thread, and its import with those threads held about 0.75 MB of an
idle agent's RSS (issue 25); the three watchers an agent keeps (PLEG's exit files, the manifest directory
and its parent, the image import directory) need only "something in this directory changed", which
inotify(7) says on a descriptor the loop can wait on with the rest.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import struct
from typing import Callable

from edgelet.util.libc import libc

IN_ACCESS = 0x1
IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_CLOSE_NOWRITE = 0x10
IN_OPEN = 0x20
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
IN_ONLYDIR = 0x1000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

# The names the watchers use (watchdog's event types, which they were written against), by inotify bit.
# A rename out of the directory reads as "deleted" and one into it as "created", as watchdog reports
# unpaired moves; the watched directory itself going reads as "deleted" with its own path.
NAMES = (
    (IN_CREATE | IN_MOVED_TO, "created"),
    (IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF, "deleted"),
    (IN_MODIFY, "modified"),
    (IN_CLOSE_WRITE, "closed"),
    (IN_CLOSE_NOWRITE, "closed_no_write"),
    (IN_OPEN, "opened"),
    (IN_ATTRIB, "attrib"),
)
MASKS = {name: bit for bit, name in NAMES}

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


def mask_of(events: frozenset[str] | set[str]) -> int:
    """The inotify mask that reports `events` (watchdog's names), plus the directory's own removal."""
    mask = IN_DELETE_SELF | IN_MOVE_SELF
    for name in events:
        mask |= MASKS.get(name, 0)
    return mask


def parse(buf: bytes) -> list[tuple[int, int, str]]:
    """(wd, mask, name) of every event in what one read returned (pure)."""
    out, at = [], 0
    while at + _HEADER.size <= len(buf):
        wd, mask, _cookie, size = _HEADER.unpack_from(buf, at)
        at += _HEADER.size
        name = buf[at:at + size].split(b"\0", 1)[0]
        at += size
        out.append((wd, mask, os.fsdecode(name)))
    return out


def event_names(mask: int) -> list[str]:
    """watchdog's names for the bits of one event's mask."""
    return [name for bit, name in NAMES if mask & bit]


Callback = Callable[[str, str], None]  # (event name, path)


class Inotify:
    """One inotify descriptor on the running loop; `add` a directory with a callback, `remove` it, `close`."""

    def __init__(self) -> None:
        fd = libc().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd = fd
        self._watches: dict[int, tuple[str, Callback]] = {}
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._read)

    def add(self, directory: str, events: frozenset[str] | set[str], callback: Callback) -> int:
        """Watch `directory` (not recursively) for `events`; OSError when it cannot (gone, out of watches)."""
        wd = libc().inotify_add_watch(self.fd, os.fsencode(directory), mask_of(events) | IN_ONLYDIR)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch: {os.strerror(err)}", directory)
        self._watches[wd] = (directory, callback)
        return wd

    def remove(self, wd: int) -> None:
        if self._watches.pop(wd, None) is not None:
            libc().inotify_rm_watch(self.fd, wd)  # fails harmlessly when the directory already went

    def _read(self) -> None:
        try:
            buf = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            return
        for wd, mask, name in parse(buf):
            if mask & IN_Q_OVERFLOW:  # events were lost: every watcher looks again, as after a change
                for directory, callback in list(self._watches.values()):
                    callback("modified", directory)
                continue
            watch = self._watches.get(wd)
            if watch is None:
                continue
            if mask & IN_IGNORED:  # the directory went (or the watch was removed): the kernel dropped it
                self._watches.pop(wd, None)
                continue
            directory, callback = watch
            path = os.path.join(directory, name) if name else directory
            for event in event_names(mask):
                callback(event, path)

    def close(self) -> None:
        if self.fd < 0:
            return
        try:
            self._loop.remove_reader(self.fd)
        except RuntimeError:
            pass  # the loop is closed: the descriptor goes with the process
        os.close(self.fd)
        self.fd = -1
        self._watches.clear()
