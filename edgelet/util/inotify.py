"""Directory watches on the event loop itself: one inotify descriptor read by asyncio, no thread.

watchdog (what the watches used before) runs an observer thread per watcher that wakes every second, an
emitter thread per watch and a reader thread, and its import with those threads held about 0.75 MB of an
idle agent's RSS; the three watchers an agent keeps (PLEG's exit files, the manifest directory
and its parent, the image import directory) need only "something in this directory changed", which
inotify(7) says on a descriptor the loop can wait on with the rest. inotify_simple (one small module over
ctypes) makes the calls and decodes the events; this module puts its descriptor on the loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import inotify_simple
from inotify_simple import INotify, flags, parse_events

from edgelet.util.libc import libc

# inotify_simple finds the C library with ctypes.util.find_library, which runs `ldconfig -p` in a subprocess when
# the first watch is made; it keeps the handle in this module global, so it gets the agent's own instead.
if getattr(inotify_simple, "_libc", None) is None:
    inotify_simple._libc = libc()

IN_ACCESS = int(flags.ACCESS)
IN_MODIFY = int(flags.MODIFY)
IN_ATTRIB = int(flags.ATTRIB)
IN_CLOSE_WRITE = int(flags.CLOSE_WRITE)
IN_CLOSE_NOWRITE = int(flags.CLOSE_NOWRITE)
IN_OPEN = int(flags.OPEN)
IN_MOVED_FROM = int(flags.MOVED_FROM)
IN_MOVED_TO = int(flags.MOVED_TO)
IN_CREATE = int(flags.CREATE)
IN_DELETE = int(flags.DELETE)
IN_DELETE_SELF = int(flags.DELETE_SELF)
IN_MOVE_SELF = int(flags.MOVE_SELF)
IN_Q_OVERFLOW = int(flags.Q_OVERFLOW)
IN_IGNORED = int(flags.IGNORED)
IN_ISDIR = int(flags.ISDIR)
IN_ONLYDIR = int(flags.ONLYDIR)

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


def mask_of(events: frozenset[str] | set[str]) -> int:
    """The inotify mask that reports `events` (watchdog's names), plus the directory's own removal."""
    mask = IN_DELETE_SELF | IN_MOVE_SELF
    for name in events:
        mask |= MASKS.get(name, 0)
    return mask


def parse(buf: bytes) -> list[tuple[int, int, str]]:
    """(wd, mask, name) of every event in what one read returned (pure)."""
    return [(e.wd, e.mask, e.name) for e in parse_events(buf)]


def event_names(mask: int) -> list[str]:
    """watchdog's names for the bits of one event's mask."""
    return [name for bit, name in NAMES if mask & bit]


Callback = Callable[[str, str], None]  # (event name, path)


class Inotify:
    """One inotify descriptor on the running loop; `add` a directory with a callback, `remove` it, `close`."""

    def __init__(self) -> None:
        self._ino = INotify(nonblocking=True)  # close-on-exec: no runc or conmon inherits it
        self.fd = self._ino.fileno()
        self._watches: dict[int, tuple[str, Callback]] = {}
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.fd, self._read)

    def add(self, directory: str, events: frozenset[str] | set[str], callback: Callback) -> int:
        """Watch `directory` (not recursively) for `events`; OSError when it cannot (gone, out of watches)."""
        try:
            wd = self._ino.add_watch(directory, mask_of(events) | IN_ONLYDIR)
        except OSError as exc:
            raise OSError(exc.errno, f"inotify_add_watch: {exc.strerror}", directory) from exc
        self._watches[wd] = (directory, callback)
        return wd

    def remove(self, wd: int) -> None:
        if self._watches.pop(wd, None) is not None:
            try:
                self._ino.rm_watch(wd)
            except OSError:
                pass  # the directory already went, and the kernel dropped the watch with it

    def _read(self) -> None:
        try:
            buf = os.read(self.fd, 65536)
        except OSError:  # BlockingIOError included: another wakeup read it first
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
        self._ino.close()
        self.fd = -1
        self._watches.clear()
