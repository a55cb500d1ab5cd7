"""Kubelet-style events: a bounded in-memory ring, aggregated like client-go's correlator, logged and exported.

An event names an object (a pod, or a container of it via `field_path`), a
type (Normal or Warning), a reason (`Started`, `BackOff`, `FailedValidation`,
...) and a message. A repeat of the same object, type, reason and message
bumps `count` and `last_timestamp` instead of adding an entry, as the
kubelet's event correlator does, so a crash-looping container is one line
with a count rather than a flood. The ring keeps the newest `capacity`
entries; `edgelet events` reads the copy the agent writes under the run dir
(tmpfs: events, like kubelet's, do not survive a reboot).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec

from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod
    from edgelet.util.clock import Clock

log = get_logger("edgelet.events")

EventType = Literal["Normal", "Warning"]
DEFAULT_CAPACITY = 1000


class InvolvedObject(msgspec.Struct, frozen=True, kw_only=True):
    """What an event is about (the parts of v1.ObjectReference edgelet fills)."""

    kind: str = "Pod"
    namespace: str = ""
    name: str = ""
    uid: str = ""
    field_path: str = ""  # "spec.containers{app}" for a container, as kubelet writes it


class Event(msgspec.Struct, kw_only=True):
    type: str
    reason: str
    message: str
    object: InvolvedObject
    count: int = 1
    first_timestamp: float = 0.0
    last_timestamp: float = 0.0


class EventsSnapshot(msgspec.Struct, kw_only=True):
    written_at: float
    agent_pid: int
    events: list[Event] = []


def events_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / "events.json"


def pod_ref(pod: Pod | None, container: str | None = None, *, init: bool = False) -> InvolvedObject:
    """The object an event about `pod` (or one of its containers) names."""
    meta = pod.metadata if pod is not None else None
    field_path = ""
    if container is not None:
        field_path = f"spec.{'initContainers' if init else 'containers'}{{{container}}}"
    return InvolvedObject(
        kind="Pod",
        namespace=(meta.namespace or "default") if meta is not None else "",
        name=(meta.name or "") if meta is not None else "",
        uid=(meta.uid or "") if meta is not None else "",
        field_path=field_path,
    )


class EventRecorder:
    """Records events into the ring; `run` keeps `<run_dir>/events.json` current for `edgelet events`."""

    def __init__(
        self, clock: Clock, path: Path | None = None, capacity: int = DEFAULT_CAPACITY, interval: float = 0.5
    ) -> None:
        self._clock = clock
        self._path = path
        self._capacity = capacity
        self._interval = interval
        # Keyed by what makes two events "the same"; ordered by last occurrence.
        self._ring: OrderedDict[tuple, Event] = OrderedDict()
        # Events are also recorded from worker threads (the runtime's warnings while it writes a pod's
        # files), while the loop encodes the ring: unguarded, that killed the agent under pod churn.
        self._lock = threading.Lock()
        self._dirty = asyncio.Event()
        from edgelet.state import StampedWriter

        self._file = StampedWriter(path, "events") if path is not None else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._load()

    def _load(self) -> None:
        """The events an earlier agent wrote since boot (the run dir is tmpfs): a restart, or the service
        taking over from --runonce, keeps them for `edgelet events`. A torn file is just not read."""
        if self._path is None:
            return
        try:
            earlier = read_events(self._path)
        except (OSError, msgspec.DecodeError, ValueError) as exc:
            log.warning("Cannot read the earlier events; starting without them", path=str(self._path), err=str(exc))
            return
        for e in (earlier.events if earlier is not None else [])[-self._capacity :]:
            self._ring[(e.object, e.type, e.reason, e.message)] = e

    def record(self, obj: InvolvedObject, type: EventType, reason: str, message: str) -> Event:
        now = self._clock.now()
        key = (obj, type, reason, message)
        with self._lock:
            event = self._ring.pop(key, None)
            if event is None:
                event = Event(
                    type=type, reason=reason, message=message, object=obj, first_timestamp=now, last_timestamp=now
                )
            else:
                event.count += 1
                event.last_timestamp = now
            self._ring[key] = event
            while len(self._ring) > self._capacity:
                self._ring.popitem(last=False)
        what = f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name or obj.kind
        fields = {
            "type": type,
            "reason": reason,
            "object": what,
            "field": obj.field_path or None,
            "count": event.count,
            "message": message,
        }
        if type == "Warning":
            log.warning("Event", **fields)
        else:
            log.info("Event", **fields)
        self._mark_dirty()
        return event

    def _mark_dirty(self) -> None:
        """asyncio.Event is the loop's alone: from a worker thread, ask the loop to set it."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not on a loop: a worker thread (or no loop yet)
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._dirty.set)
                return
        self._dirty.set()

    def normal(self, obj: InvolvedObject, reason: str, message: str) -> Event:
        return self.record(obj, "Normal", reason, message)

    def warning(self, obj: InvolvedObject, reason: str, message: str) -> Event:
        return self.record(obj, "Warning", reason, message)

    def events(self, uid: str | None = None) -> list[Event]:
        """Oldest first (by last occurrence), optionally only those about the pod `uid`."""
        with self._lock:
            return [e for e in self._ring.values() if uid is None or e.object.uid == uid]

    def snapshot(self) -> EventsSnapshot:
        return EventsSnapshot(written_at=self._clock.now(), agent_pid=os.getpid(), events=self.events())

    def encode(self) -> bytes | None:
        """The events file's bytes, taken on the loop; None when the ring is what was last written."""
        return None if self._file is None else self._file.encode(self.snapshot())

    def write(self, data: bytes) -> bool:
        """Write what `encode` gave (in a thread); False when it could not be written (the caller tries again)."""
        assert self._file is not None
        return self._file.write(data)

    def flush(self) -> bool:
        data = self.encode()
        return True if data is None else self.write(data)

    async def run(self) -> None:
        """Write the events file at most every `interval` while events arrive."""
        from edgelet.state import flush_when_changed

        self._loop = asyncio.get_running_loop()
        await flush_when_changed(self._dirty, self.encode, self.write, self._interval, self._clock)


def read_events(path: Path) -> EventsSnapshot | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=EventsSnapshot)
    except FileNotFoundError:
        return None
