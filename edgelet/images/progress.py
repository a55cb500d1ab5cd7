"""Byte counts of long image work (a pull's blobs, an archive's files) as it goes, per blob and thread-safe:
what `edgelet images pull|import` draw and what `edgelet pods -o wide` and `describe pod` show of a pod's pull."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from edgelet.util.clock import Clock, RealClock


@dataclass(frozen=True)
class BlobProgress:
    name: str  # the blob's digest, or the archive member it comes from
    total: int | None  # None when unknown (an archive member hashed on the fly)
    done: int = 0
    finished: bool = False
    started: float = 0.0  # monotonic
    ended: float | None = None


@dataclass(frozen=True)
class ProgressSnapshot:
    blobs: tuple[BlobProgress, ...]
    now: float  # monotonic, when taken
    started: float

    @property
    def done(self) -> int:
        return sum(b.done for b in self.blobs)

    @property
    def total(self) -> int:
        """Bytes expected: a blob of unknown size counts what it has so far."""
        return sum(b.total if b.total is not None else b.done for b in self.blobs)


class Progress:
    """Filled by the store's writer threads (`begin`, `advance`, `finish`), read by anyone (`snapshot`)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or RealClock()
        self._lock = threading.Lock()
        self._blobs: dict[str, BlobProgress] = {}
        self.started = self._clock.monotonic()

    def begin(self, name: str, total: int | None) -> None:
        with self._lock:
            if name not in self._blobs:
                self._blobs[name] = BlobProgress(name, total, started=self._clock.monotonic())

    def advance(self, name: str, n: int) -> None:
        with self._lock:
            b = self._blobs.get(name)
            if b is not None:
                self._blobs[name] = BlobProgress(b.name, b.total, b.done + n, b.finished, b.started)

    def finish(self, name: str) -> None:
        with self._lock:
            b = self._blobs.get(name)
            if b is not None and not b.finished:
                self._blobs[name] = BlobProgress(
                    b.name, b.total if b.total is not None else b.done, b.done, True, b.started, self._clock.monotonic()
                )

    def snapshot(self) -> ProgressSnapshot:
        with self._lock:
            return ProgressSnapshot(tuple(self._blobs.values()), self._clock.monotonic(), self.started)


class Ticking(Progress):
    """Keeps no counts: calls `tick` at every blob begun, chunk stored and blob finished, so that whoever waits
    on a long import (systemd, through the agent's start) sees that it moves."""

    def __init__(self, tick: Callable[[], object]) -> None:
        super().__init__()
        self._tick = tick

    def begin(self, name: str, total: int | None) -> None:
        self._tick()

    def advance(self, name: str, n: int) -> None:
        self._tick()

    def finish(self, name: str) -> None:
        self._tick()
