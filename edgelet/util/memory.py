"""Keeps the agent's resident memory close to what it uses: glibc arena limit and periodic heap trimming.

Starting twenty pods at once spawns many runc/conmon subprocesses from
several threads; glibc keeps the freed memory in per-thread arenas and the
process stays at its high-water mark. On a 512 MB board that is worth
returning: one arena is plenty for an agent that mostly waits (its threads
hold the GIL when they allocate, so they hardly contend for it; a second
arena held 0.2-0.3 MB more with twenty pods), and `malloc_trim` hands the
free pages back to the kernel.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from edgelet.util.libc import libc

if TYPE_CHECKING:
    from edgelet.util.clock import Clock

M_ARENA_MAX = -8  # glibc malloc.h
TRIM_PERIOD = 10.0


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (musl has no malloc_trim); libc() loads it once."""
    try:
        lib = libc()
        lib.malloc_trim  # noqa: B018
        lib.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return lib


def limit_arenas(arenas: int = 1) -> bool:
    """Cap glibc's malloc arenas (threads share them instead of each growing its own)."""
    lib = _glibc()
    return bool(lib is not None and lib.mallopt(M_ARENA_MAX, arenas))


def trim() -> bool:
    """Return free heap pages to the kernel; True when glibc released something."""
    lib = _glibc()
    return bool(lib is not None and lib.malloc_trim(0))


async def trim_periodically(clock: Clock, period: float = TRIM_PERIOD) -> None:
    while True:
        await clock.sleep(period)
        trim()
