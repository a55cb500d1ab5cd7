"""Pod lifecycle events: conmon exit files (inotify) plus a slow relist, diffed purely (kubelet GenericPLEG).

`diff(previous, current)` is pure; `Pleg` is the thin watcher around it that
wakes the pod workers of the pods it names.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from edgelet.container.errors import RuntimeError_
from edgelet.container.types import ContainerState, PodRuntimeStatus, SandboxRecord
from edgelet.util.clock import REAL_CLOCK
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.container import Runtime
    from edgelet.container.types import ContainerRecord
    from edgelet.util.clock import Clock

log = get_logger(__name__)

ADOPT_ATTEMPTS = 5  # relists tried at start before the start fails (about 3 s in all)
ADOPT_FIRST_DELAY = 0.2

EventType = Literal["ContainerStarted", "ContainerDied", "ContainerRemoved", "PodSync", "ContainerChanged"]

# kubelet's plegContainerState: "created" counts as unknown (kubelet does not
# use the created state yet), and a vanished container is "non-existent".
_PlegState = Literal["running", "exited", "unknown", "non-existent"]


@dataclass(frozen=True)
class PodLifecycleEvent:
    pod_uid: str
    type: EventType
    container_id: str = ""  # the sandbox or container the event is about; "" for PodSync


def _pleg_state(state: ContainerState | None) -> _PlegState:
    if state is None:
        return "non-existent"
    if state == "running":
        return "running"
    if state == "exited":
        return "exited"
    return "unknown"


def _states(pod: PodRuntimeStatus | None) -> dict[str, ContainerState]:
    """Sandboxes and containers of one pod by id; kubelet's relist counts sandboxes as containers too."""
    if pod is None:
        return {}
    found: dict[str, ContainerState] = {s.id: s.state for s in pod.sandboxes}
    found.update((c.id, c.state) for c in pod.containers)
    return found


def generate_events(pod_uid: str, container_id: str, old: _PlegState, new: _PlegState) -> list[PodLifecycleEvent]:
    """The events for one container whose state went from `old` to `new` (kubelet generateEvents)."""
    if old == new:
        return []
    if new == "running":
        return [PodLifecycleEvent(pod_uid, "ContainerStarted", container_id)]
    if new == "exited":
        return [PodLifecycleEvent(pod_uid, "ContainerDied", container_id)]
    if new == "unknown":
        return [PodLifecycleEvent(pod_uid, "ContainerChanged", container_id)]
    # new == "non-existent"
    if old == "exited":
        # Its death was reported already.
        return [PodLifecycleEvent(pod_uid, "ContainerRemoved", container_id)]
    return [
        PodLifecycleEvent(pod_uid, "ContainerDied", container_id),
        PodLifecycleEvent(pod_uid, "ContainerRemoved", container_id),
    ]


def diff(old: Mapping[str, PodRuntimeStatus], new: Mapping[str, PodRuntimeStatus]) -> list[PodLifecycleEvent]:
    """Every lifecycle event between two relists, per pod and per container id.

    Deterministic order: pods by uid; within a pod, ids as they appear in
    `new` (sandboxes first), then those only in `old`. kubelet drops
    ContainerChanged events before dispatching them; the caller decides.
    """
    events: list[PodLifecycleEvent] = []
    for uid in sorted(set(old) | set(new)):
        before = _states(old.get(uid))
        after = _states(new.get(uid))
        ids = list(after) + [cid for cid in before if cid not in after]
        for cid in ids:
            events.extend(generate_events(uid, cid, _pleg_state(before.get(cid)), _pleg_state(after.get(cid))))
    return events


def pods_with_events(events: list[PodLifecycleEvent]) -> list[str]:
    """The uids the events name, each once, in order (what the sync loop wakes)."""
    return list(dict.fromkeys(e.pod_uid for e in events))


# A quiet period checks the running processes itself; `runc list` (about 35 ms of CPU with
# 40 containers) runs on every exit-file event and at least every this many periods.
FULL_RELIST_EVERY = 6
# While the full relists find nothing the agent did not do itself, the span between them doubles up to this many
# periods (5 minutes at the default 10 s): an idle node pays one `runc list` per 5 minutes, not one a minute.
FULL_RELIST_MAX_EVERY = 30


def surprising(cause: str, events: list[PodLifecycleEvent]) -> bool:
    """Whether a relist saw what nothing had told the agent: a process gone without an exit file (`cause`
    "gone"), a death no exit file announced (a relist not `cause` "asked" by one), a removal or a change.
    Starts are the agent's own syncs; a death its exit file reported is known for what it is."""
    if cause == "gone":
        return True
    explained = {"ContainerStarted", "ContainerDied"} if cause == "asked" else {"ContainerStarted"}
    return any(e.type not in explained for e in events)


def next_full_every(current: int, *, surprised: bool) -> int:
    """The periods until the next full relist, after one: back to FULL_RELIST_EVERY when it saw something
    `surprising`, else doubled (to FULL_RELIST_MAX_EVERY)."""
    if surprised:
        return FULL_RELIST_EVERY
    return min(current * 2, FULL_RELIST_MAX_EVERY)


def relist_needed(
    since: float, last_asked: float | None, running: tuple[int, float] | None, started: int
) -> int | None:
    """Which relist shows everything done before `since` (monotonic): None for the last one done, which asked runc
    after it; else the generation to wait for: the one running if it asked after `since`, else the next to start.

    `last_asked` is when the last successful relist asked runc, `running` the (generation, asked) of the one running,
    `started` how many have started. A read that began before `since` may miss what was done just before it, so
    it is never taken (strictly after: with a coarse clock an equal reading cannot tell the order). The next one
    starts after this question, so it serves whatever the clock says.
    """
    if last_asked is not None and last_asked > since:
        return None
    if running is not None and running[1] > since:
        return running[0]
    return started + 1


def process_check(last: Mapping[str, PodRuntimeStatus], exists: Callable[[str], bool] = os.path.exists) -> str:
    """Whether every sandbox and container the last relist saw running still has its process: "alive";
    "gone" when one has not; "between" when one was between create and start (only runc knows where it is).

    A container killed together with its conmon leaves no exit file; this
    catches it within a period without asking runc. Pid reuse within one
    period is left to the next full relist.
    """
    between = False
    for status in last.values():
        recs: list[SandboxRecord | ContainerRecord] = [*status.sandboxes, *status.containers]
        for rec in recs:
            if rec.state == "running":
                if isinstance(rec, SandboxRecord) and not rec.infra:
                    # No process: it lives while its namespace files do (a stop removes them).
                    if not all(exists(path) for _, path in rec.namespaces):
                        return "gone"
                elif rec.pid is None or not exists(f"/proc/{rec.pid}"):
                    return "gone"
            elif rec.state == "created":
                between = True
    return "between" if between else "alive"


class Pleg:
    """Relists the runtime when conmon writes an exit file (inotify) and every `relist_period`,
    and tells the sync loop which pods had lifecycle events.

    The exit-file watch makes a container's death visible within milliseconds;
    the periodic check catches what inotify cannot see (e.g. a container killed
    with its conmon): a look at /proc for each running process, and a full
    `runc list` every FULL_RELIST_EVERY periods (stretching to
    FULL_RELIST_MAX_EVERY while nothing surprising shows, see `next_full_every`) or as
    soon as one is gone.

    A sync that changed something reads its after-state from a relist too
    (`pods_newer_than`): one relist runs at a time, and whoever waits for one
    newer than a time shares it (`relist_needed`); its events go to the sync
    loop like those of any relist, and its view is the cache.
    """

    def __init__(
        self, runtime: Runtime, exit_dir: Path, relist_period: float = 10.0, clock: Clock | None = None
    ) -> None:
        self._runtime = runtime
        self._exit_dir = exit_dir
        self._period = relist_period
        self._last: dict[str, PodRuntimeStatus] = {}
        self._kick = asyncio.Event()
        self._kick.set()
        self.relisted = asyncio.Event()
        self._clock = clock
        self.last_relist: float | None = None  # monotonic time of the last successful relist, for /healthz
        # Monotonic time at which the last successful relist *asked* runc (its view is at least that new).
        self._relist_asked: float | None = None
        # One relist at a time, shared by all who wait for one (see `pods_newer_than`): generations started and
        # the last done, the running one and when it asked, and the events of the last one.
        self._started = 0
        self._done = 0
        self._running: asyncio.Task[list[PodLifecycleEvent]] | None = None
        self._running_asked = 0.0
        self._last_events: list[PodLifecycleEvent] = []
        # Where a relist's events go (the sync loop, once `run` has started), and the pods of those found before.
        self._emit: Callable[[set[str]], None] | None = None
        self._unsent: set[str] = set()

    def uids(self) -> set[str]:
        """Pod UIDs the runtime held at the last relist."""
        return set(self._last)

    def pods(self) -> Mapping[str, PodRuntimeStatus]:
        """What the runtime held at the last relist (stats read it instead of listing runc again)."""
        return self._last

    def kick(self) -> None:
        self._kick.set()

    def status_newer_than(self, uid: str, since: float) -> PodRuntimeStatus | None:
        """The pod as the last relist saw it, if that relist asked runc after `since` (monotonic); else None.

        kubelet's pod workers read the PLEG cache the same way (GetNewerThan the last sync): a sync started
        by a relist's event then runs no `runc list` of its own for its before-state."""
        asked = self._relist_asked
        if asked is None or asked <= since:
            return None
        return self._last.get(uid, PodRuntimeStatus(uid=uid))

    async def pods_newer_than(self, since: float) -> Mapping[str, PodRuntimeStatus]:
        """Every pod as a relist that asked runc after `since` (monotonic) saw it, waiting for one if needed.

        A sync reads its after-state here instead of a `runc list` of its own, as kubelet's pod
        workers read the PLEG cache: the syncs that wait at the same time share one relist (see
        `relist_needed`), the cache and its events are PLEG's as for any relist, and the relist PLEG ran after
        every sync that changed something is that same one."""
        await self._relist_since(since)
        return self._last

    async def relist(self) -> list[PodLifecycleEvent]:
        """A relist that asks runc after now (one running already, which asked before, does not count); its events."""
        return await self._relist_since((self._clock or REAL_CLOCK).monotonic())

    async def _relist_since(self, since: float) -> list[PodLifecycleEvent]:
        """Wait for a relist that asked runc after `since`; its events ([] when the last one done serves)."""
        running = (self._started, self._running_asked) if self._running is not None else None
        need = relist_needed(since, self._relist_asked, running, self._started)
        if need is None:
            return []
        while self._done < need:
            task = self._running if self._running is not None else self._start_relist()
            generation = self._started  # the running relist is always the newest started
            try:
                # Shielded: a waiter cancelled (its sync cut short) does not cancel the others' relist.
                events = await asyncio.shield(task)
            except Exception:
                if generation >= need:
                    raise
                continue  # an older relist failed: the one needed is still to run
            if generation >= need:
                return events
        return self._last_events

    def _start_relist(self) -> asyncio.Task[list[PodLifecycleEvent]]:
        self._started += 1
        # Read before the relist runs: the `runc list` starts later still, so its view is at least this new.
        asked = (self._clock or REAL_CLOCK).monotonic()
        self._running_asked = asked
        self._running = asyncio.ensure_future(self._list(self._started, asked))
        return self._running

    async def _list(self, generation: int, asked: float) -> list[PodLifecycleEvent]:
        try:
            new = await self._runtime.list_pods()
        finally:
            self._running = None
        events = diff(self._last, new)
        self._last = new
        self._relist_asked = asked
        self._done = generation
        self._last_events = events
        self.relisted.set()
        if self._clock is not None:
            self.last_relist = self._clock.monotonic()
        uids = {e.pod_uid for e in events}
        if uids and self._emit is not None:
            self._emit(uids)
        else:
            self._unsent |= uids  # a sync's relist before `run` began: sent when it does
        return events

    async def adopt(self) -> None:
        """The first relist, at start: a runtime failing for a moment (a `runc list` racing a delete, a busy
        board) is tried again with a doubling delay, ADOPT_ATTEMPTS times in all, before the start fails."""
        delay = ADOPT_FIRST_DELAY
        for attempt in range(1, ADOPT_ATTEMPTS + 1):
            try:
                await self.relist()
                # Not sent: the sync loop syncs every pod it is given at start anyway.
                self._unsent.clear()
                return
            except (RuntimeError_, OSError) as exc:
                if attempt == ADOPT_ATTEMPTS:
                    raise
                log.warning("Relist at start failed; trying again", err=str(exc), attempt=attempt)
            await (self._clock or REAL_CLOCK).sleep(delay)
            delay *= 2

    async def run(self, emit: Callable[[set[str]], None]) -> None:
        from edgelet.util.watch import stop_watching, watch_directory

        # Only changes wake it: the relist itself reads the exit files, and must not wake itself.
        observer = watch_directory(self._exit_dir, self._kick)
        # Every relist sends its events, whoever asked for it (this loop, or a sync for its after-state).
        self._emit = emit
        if self._unsent:
            emit(self._unsent)
            self._unsent = set()
        try:
            quiet = 0
            full_every = FULL_RELIST_EVERY
            while True:
                timed_out = False
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
                # that lands as the wait completes, and PLEG then outlived its own shutdown.
                try:
                    async with asyncio.timeout(self._period):
                        await self._kick.wait()
                except TimeoutError:
                    timed_out = True
                self._kick.clear()
                # Periodic: the span ran out with every process alive; else asked for (an exit file), a process
                # gone, or one between create and start.
                cause = "periodic" if timed_out else "asked"
                if timed_out and quiet < full_every - 1:
                    cause = await asyncio.to_thread(process_check, self._last)
                    if cause == "alive":
                        quiet += 1
                        if self._clock is not None:
                            self.last_relist = self._clock.monotonic()  # the state was checked: PLEG is healthy
                        continue
                quiet = 0
                try:
                    events = await self.relist()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.error("Relist failed", exc)
                    full_every = FULL_RELIST_EVERY
                    continue
                full_every = next_full_every(full_every, surprised=surprising(cause, events))
        finally:
            self._emit = None
            await stop_watching(observer)
