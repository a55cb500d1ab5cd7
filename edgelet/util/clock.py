"""Time as an injected dependency, so decisions can be tested with a fake clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol


class Clock(Protocol):
    """Where every component reads time.

    `now()` is wall time (seconds since the epoch, for timestamps users see);
    `monotonic()` is for intervals and deadlines; `sleep()` waits.
    """

    def now(self) -> float: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


# The default of components that take a clock; wiring passes one explicitly.
REAL_CLOCK = RealClock()


class FakeClock:
    """A clock that moves only when told; `sleep` advances it at once."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall = start
        self._mono = 1000.0

    def now(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._wall += seconds
        self._mono += seconds

    def jump_wall(self, seconds: float) -> None:
        """The wall clock alone moves (NTP correcting a board that booted at its saved time): monotonic stays."""
        self._wall += seconds

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)


# Test-only: names a file holding seconds to add to wall time, so a chaos test can make the wall clock jump
# (as NTP or an RTC-less board's first sync does) under a running agent. Never set outside tests.
OFFSET_ENV = "EDGELET_TEST_CLOCK_OFFSET_FILE"


class OffsetClock(RealClock):
    """Wall time shifted by the number in a file, re-read at most every `reread` monotonic seconds.

    The monotonic clock is the real one: a wall-clock jump never moves it, on a device as here."""

    def __init__(self, path: str, reread: float = 0.5) -> None:
        self._path = path
        self._reread = reread
        self._offset = 0.0
        self._read_at = -reread

    def now(self) -> float:
        mono = time.monotonic()
        if mono - self._read_at >= self._reread:
            self._read_at = mono
            try:
                with open(self._path) as f:
                    self._offset = float(f.read().strip() or 0)
            except (OSError, ValueError):
                pass  # a test rewriting the file: keep the last offset
        return time.time() + self._offset


def clock_from_environ(environ: Mapping[str, str]) -> Clock:
    """The agent's clock: the real one, or an OffsetClock when a test set OFFSET_ENV."""
    path = environ.get(OFFSET_ENV)
    return OffsetClock(path) if path else RealClock()


def read_boot_id() -> str:
    """This boot's id: the monotonic clock counts from the boot it names ("" when the kernel does not say)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""
