"""Per-key exponential back-off (kubelet's flowcontrol.Backoff) with time passed in by the caller.

Keys are `(pod uid, what)`: `what` is a container name for CrashLoopBackOff,
or anything else the caller backs off on (`"image:<name>"`, `"sandbox"`).
KUBELET-SEMANTICS "Pod sync": 10 s, doubling, capped at 300 s, reset after
600 s without failure.

The times given to one Backoff must all come from the same clock; the
syncer uses the monotonic clock.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass

DEFAULT_INITIAL = 10.0
DEFAULT_CAP = 300.0
DEFAULT_RESET_AFTER = 600.0  # kubelet: 2 * maxDuration


@dataclass(frozen=True)
class _Entry:
    delay: float
    last_update: float


class Backoff:
    """Remembers, per key, the current delay and when the last failure was recorded.

    Not thread-safe: it belongs to the event loop (the pod workers and the
    sync loop run on it).
    """

    def __init__(
        self,
        initial: float = DEFAULT_INITIAL,
        cap: float = DEFAULT_CAP,
        reset_after: float = DEFAULT_RESET_AFTER,
    ) -> None:
        if initial <= 0 or cap < initial or reset_after <= 0:
            raise ValueError(f"invalid backoff: initial={initial} cap={cap} reset_after={reset_after}")
        self.initial = float(initial)
        self.cap = float(cap)
        self.reset_after = float(reset_after)
        self._entries: dict[Hashable, _Entry] = {}

    def next(self, key: Hashable, now: float) -> float:
        """Record a failure at `now` and return the delay before the next try.

        The first failure (or the first after `reset_after` quiet seconds)
        gives `initial`; each further one doubles it up to `cap`.
        """
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, now):
            delay = self.initial
        else:
            delay = min(entry.delay * 2, self.cap)
        self._entries[key] = _Entry(delay=delay, last_update=now)
        return delay

    def get(self, key: Hashable) -> float:
        """The current delay for `key` (0 when it has none)."""
        entry = self._entries.get(key)
        return entry.delay if entry is not None else 0.0

    def is_in_backoff(self, key: Hashable, now: float, since: float | None = None) -> bool:
        """Whether `key` must still wait at `now`.

        kubelet's IsInBackOffSince measures the delay from `since` (the
        container's finish time); without it, from the last recorded failure.
        """
        return self.remaining(key, now, since) > 0

    def remaining(self, key: Hashable, now: float, since: float | None = None) -> float:
        """Seconds `key` must still wait at `now` (0 when it may go)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, now):
            return 0.0
        start = entry.last_update if since is None else since
        return max(0.0, start + entry.delay - now)

    def reset(self, key: Hashable) -> None:
        """Forget `key`, e.g. after the container ran long enough or the pod went away."""
        self._entries.pop(key, None)

    def forget_pod(self, uid: str) -> None:
        """Forget every key of one pod (keys are `(uid, ...)` tuples)."""
        for key in [k for k in self._entries if isinstance(k, tuple) and k and k[0] == uid]:
            del self._entries[key]

    def gc(self, now: float) -> None:
        """Drop entries that have been quiet longer than `reset_after` (kubelet Backoff.GC)."""
        for key in [k for k, e in self._entries.items() if self._expired(e, now)]:
            del self._entries[key]

    def keys(self) -> Iterator[Hashable]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def _expired(self, entry: _Entry, now: float) -> bool:
        return now - entry.last_update > self.reset_after
