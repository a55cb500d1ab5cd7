"""The sync loop: selects on config changes, lifecycle events, retries, rollout ticks and housekeeping (kubelet syncLoopIteration)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgelet.api.configobjects import ConfigObjects, pod_references
from edgelet.api.pod import full_name
from edgelet.api.pod import uid as pod_uid
from edgelet.events import EventRecorder, InvolvedObject
from edgelet.podconfig import ConfigState, merge
from edgelet.podconfig.merge import pods_differ_semantically
from edgelet.util.cpuaccount import charged
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.configobjects import ObjectKey
    from edgelet.api.types import Pod
    from edgelet.sources import SourceSnapshot
    from edgelet.status.publisher import StatusPublisher
    from edgelet.sync.rollout import RolloutManager
    from edgelet.sync.workers import PodWorkers, SyncResult
    from edgelet.util.clock import Clock

log = get_logger(__name__)

TICK = 1.0  # while a rollout step is open (a clock decides it, not only what arrives), a round every tick
# Otherwise the loop sleeps until something arrives, a retry or housekeeping is due, or this long: it still
# turns, for /healthz and the Node's Ready (which read its last turn) and for housekeeping as a safety net.
IDLE_TICK = 10.0
HOUSEKEEPING_PERIOD = 2.0


def next_wait(
    now: float,
    *,
    requeue_at: Iterable[float],
    next_housekeeping: float,
    housekeeping_due: bool,
    ticking: bool,
    round_at: float | None = None,
) -> float:
    """Seconds the sync loop may sleep when nothing arrives: until the first retry a worker asked for, the
    housekeeping an arrival made due (kubelet's every 2 s, but only after something changed), a rollout gate's
    clock decision (`round_at`), the next tick while `ticking` (a rollout step a clock moves is open, or the
    first sync is yet to come), else IDLE_TICK."""
    wake = now + (TICK if ticking else IDLE_TICK)
    if housekeeping_due:
        wake = min(wake, next_housekeeping)
    if round_at is not None:
        wake = min(wake, round_at)
    for at in requeue_at:
        wake = min(wake, at)
    return max(0.0, wake - now)


async def _next_item(queue: asyncio.Queue[Any], timeout: float) -> Any:
    """The next item, or None after `timeout` seconds."""
    # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation
    # (the loop then outlives shutdown) or drop an item it already took off the queue.
    try:
        async with asyncio.timeout(timeout):
            return await queue.get()
    except TimeoutError:
        return None


@dataclass(frozen=True)
class _Config:
    snapshot: SourceSnapshot


@dataclass(frozen=True)
class _Lifecycle:
    uids: frozenset[str]


@dataclass(frozen=True)
class _ResyncAll:
    pass


@dataclass(frozen=True)
class _RolloutRound:
    pass


@dataclass(frozen=True)
class _Wake:
    """A worker asked for a retry sooner than the loop meant to wake."""


class SyncLoop:
    """Owns the merged config and tells the pod workers what to do.

    `expected_sources` must each send one snapshot before anything the
    runtime holds is treated as an orphan (kubelet's sourcesReady), so a
    restart never kills pods whose source has not been read yet.
    """

    def __init__(
        self,
        *,
        workers: PodWorkers,
        publisher: StatusPublisher,
        clock: Clock,
        expected_sources: Iterable[str],
        runtime_uids=None,
        events: EventRecorder | None = None,
        rollout: RolloutManager | None = None,
        next_item: Callable[[asyncio.Queue[Any], float], Awaitable[Any]] = _next_item,
        objects: ConfigObjects | None = None,
    ) -> None:
        self._workers = workers
        self._publisher = publisher
        self._clock = clock
        self._expected = frozenset(expected_sources)
        self._runtime_uids = runtime_uids  # callable returning the uids the runtime holds (from PLEG)
        self._events = events if events is not None else EventRecorder(clock)
        self._reported: set[tuple] = set()  # manifest problems already recorded as events
        self._warnings: dict[str, tuple] = {}  # unknown-field warnings, per source
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        # The accepted ConfigMaps and Secrets, shared with the runtime: this loop is their one writer.
        self.objects = objects if objects is not None else ConfigObjects()
        self.config = ConfigState(
            pin_key=self.objects.key,
            pin_versions=rollout is not None and rollout.enabled,
            expected_sources=self._expected,
        )
        # With a rollout manager, what runs is its decision over what the sources want (`_source`).
        self._rollout = rollout
        self._source: dict[str, Pod] = {}
        if rollout is not None:
            rollout.on_change = self._round_soon
        self._desired: dict[str, Pod] = {}
        self._requeue: dict[str, float] = {}
        self._next_housekeeping = 0.0
        self._housekeeping_due = False  # something arrived since the last housekeeping
        self._wake_at = 0.0  # monotonic: when the loop wakes if nothing arrives
        self._round_queued = False  # a rollout round asked for waits in the queue (_round_soon)
        self._last_round = float("-inf")  # monotonic time of the last rollout round
        self._next_item = next_item
        self.first_sync_done = asyncio.Event()
        self.iterated = asyncio.Event()  # set after every iteration: --runonce reads the rollout gate's decisions
        self.last_iteration: float | None = None  # monotonic end of the last iteration, for /healthz

    # Producers (sources, PLEG, image import) call these.
    async def emit_config(self, snapshot: SourceSnapshot) -> None:
        self._queue.put_nowait(_Config(snapshot))

    def emit_lifecycle(self, uids: Iterable[str]) -> None:
        self._queue.put_nowait(_Lifecycle(frozenset(uids)))

    def emit_probe_result(self, uid: str) -> None:
        """A probe verdict of the pod changed (kubelet's liveness/readiness/startup update channels): sync it."""
        self._queue.put_nowait(_Lifecycle(frozenset((uid,))))

    def resync_all(self) -> None:
        self._queue.put_nowait(_ResyncAll())

    # Callbacks from the pod workers.
    def _round_soon(self) -> None:
        """A rollout round at the loop's next turn: one for every ask before it (a burst of record writes
        completing, of sync results)."""
        if not self._round_queued:
            self._round_queued = True
            self._queue.put_nowait(_RolloutRound())

    def on_result(self, uid: str, result: SyncResult) -> None:
        if self._rollout is not None and self._rollout.judges(uid):
            self._round_soon()  # the sync published a status, which a gate judges
        if result.requeue_after is None:
            self._requeue.pop(uid, None)
        else:
            at = self._requeue[uid] = self._clock.monotonic() + result.requeue_after
            if at < self._wake_at:
                self._queue.put_nowait(_Wake())

    def on_terminated(self, uid: str) -> None:
        self._requeue.pop(uid, None)
        self._publisher.remove(uid)
        # The same UID may have been added back while it was terminating.
        if uid in self._desired:
            self._workers.sync(self._desired[uid])

    @property
    def sources_ready(self) -> bool:
        return self._expected <= self.config.seen_sources

    def desired(self) -> dict[str, Pod]:
        return dict(self._desired)

    def apply_snapshot(self, snapshot: SourceSnapshot) -> None:
        """Merge one snapshot and dispatch the changes (also used directly by --runonce)."""
        self.config, changes = merge(self.config, snapshot, self._clock.now())
        self._publisher.set_config(self.config)
        changed_objects = self.objects.replace(self.config.objects)
        for e in snapshot.errors:
            log.warning("Manifest rejected", source=e.source, origin=e.origin, pod=e.pod, err=e.message)
        self._warnings[snapshot.source] = snapshot.warnings
        self._record_problems()
        if self._rollout is not None:
            self._source = {pod_uid(p): p for p in self.config.all_pods()}
            self.rollout_round()
            self._sync_users(changed_objects)
            return
        self._sync_users(changed_objects)
        for ch in changes:
            uid = pod_uid(ch.pod)
            if ch.op == "REMOVE":
                log.info("Pod removed from config", pod=full_name(ch.pod), uid=uid)
                self._desired.pop(uid, None)
                self._workers.terminate(uid, ch.pod)
            elif ch.op in ("ADD", "UPDATE"):
                log.info("Pod in config", op=ch.op, pod=full_name(ch.pod), uid=uid)
                self._desired[uid] = ch.pod
                self._workers.sync(ch.pod)
            else:  # RECONCILE: status-only; nothing to do on the device
                self._desired[uid] = ch.pod

    def _sync_users(self, changed: set[ObjectKey]) -> None:
        """Sync the pods that use a ConfigMap or Secret that changed, appeared or went: their volumes follow
        it now, and a container waiting for it starts."""
        if not changed:
            return
        for pod in self._desired.values():
            if changed & set(pod_references(pod)):
                self._workers.sync(pod)

    def rollout_round(self) -> None:
        """Ask the rollout manager which version of each pod runs, and tell the workers what changed."""
        assert self._rollout is not None
        self._last_round = self._clock.monotonic()
        try:
            with charged("gates"):
                wanted, to_resync = self._rollout.versions_to_run(self._source, self.sources_ready)
        except Exception as exc:
            log.error("Rollout round failed", exc)
            return
        for uid in [u for u in self._desired if u not in wanted]:
            pod = self._desired.pop(uid)
            log.info("Pod version no longer wanted", pod=full_name(pod), uid=uid)
            self._workers.terminate(uid, pod)
        for uid, pod in wanted.items():
            held = self._desired.get(uid)
            self._desired[uid] = pod
            # The same object (the usual round: nothing changed) needs no field-by-field comparison.
            if held is None or (held is not pod and pods_differ_semantically(held, pod)) or uid in to_resync:
                if held is None:
                    log.info("Pod in config", pod=full_name(pod), uid=uid)
                self._workers.sync(pod)

    def _record_problems(self) -> None:
        """One event per manifest problem or rejected pod when it first appears (not on every rescan)."""
        current: set[tuple] = set()
        key: tuple[str, ...]
        for errors in self.config.errors.values():
            for e in errors:
                key = (e.reason, e.source, e.origin, e.pod or "", e.message)
                current.add(key)
                if key not in self._reported:
                    self._events.warning(_object(e.pod, e.origin), e.reason, _with_origin(e.origin, e.message))
        for r in self.config.rejected:
            key = (r.reason, r.source, r.origin, r.pod or "", r.message)
            current.add(key)
            if key not in self._reported:
                log.debug("Pod rejected", pod=r.pod, origin=r.origin, reason=r.reason, err=r.message)
                self._events.warning(_object(r.pod, r.origin), r.reason, _with_origin(r.origin, r.message))
        for o in self.config.rejected_objects:
            key = (o.reason, o.source, o.origin, o.kind, o.name, o.message)
            current.add(key)
            if key not in self._reported:
                log.warning("Object rejected", kind=o.kind, name=o.name, origin=o.origin, err=o.message)
                namespace, _, name = o.name.partition("/")
                involved = InvolvedObject(kind=o.kind, namespace=namespace, name=name)
                self._events.warning(involved, o.reason, _with_origin(o.origin, o.message))
        for warnings in self._warnings.values():
            for w in warnings:
                key = ("UnknownField", w.source, w.origin, w.message)
                current.add(key)
                if key not in self._reported:
                    # kubectl --validate=warn: the pod runs without the field, the user learns why.
                    self._events.warning(_object(w.pod, w.origin), "UnknownField", w.message)
        self._reported = current

    def housekeeping(self) -> None:
        """Terminate what the runtime runs but no source wants (only once every source has spoken)."""
        if not self.sources_ready or self._runtime_uids is None:
            return
        for uid in self._runtime_uids():
            if uid not in self._desired and not self._workers.is_terminating(uid):
                log.info("Cleaning up orphaned pod", uid=uid)
                self._workers.terminate(uid, None)

    async def run(self) -> None:
        while True:
            now = self._clock.monotonic()
            rollout_ticking = self._rollout is not None and self._rollout.ticking()
            round_at = self._rollout.gate_round_at() if self._rollout is not None else None
            if round_at is not None and round_at <= self._last_round:
                # A round since found it undecided (its record still being written): the write's own round
                # (on_change) judges it again, and the loop must not wake for it over and over meanwhile.
                round_at = None
            timeout = next_wait(
                now,
                requeue_at=self._requeue.values(),
                next_housekeeping=self._next_housekeeping,
                housekeeping_due=self._housekeeping_due,
                ticking=not self.first_sync_done.is_set() or rollout_ticking,
                round_at=round_at,
            )
            self._wake_at = now + timeout
            item = await self._next_item(self._queue, timeout)
            if isinstance(item, _RolloutRound):
                self._round_queued = False
            if isinstance(item, _Wake):
                item = None  # only the retries below are due
            elif item is not None:
                self._housekeeping_due = True
            if isinstance(item, _Config):
                self.apply_snapshot(item.snapshot)
            elif isinstance(item, _Lifecycle):
                for uid in item.uids:
                    if uid in self._desired:
                        self._workers.sync(self._desired[uid])
            elif isinstance(item, _ResyncAll):
                for pod in self._desired.values():
                    self._workers.sync(pod)
            if (
                self._rollout is not None
                and self.config.seen_sources
                and (
                    (item is not None and not isinstance(item, _Config))  # a snapshot's round ran in apply_snapshot
                    or rollout_ticking
                    or (round_at is not None and self._clock.monotonic() >= round_at)
                )
            ):
                # What arrives can change a verdict (a sync result's status among it); otherwise a round every
                # tick while a step a clock moves is open, and at a judged gate's window end or deadline; once
                # every record rests, none.
                self.rollout_round()
            # Tick: pods whose back-off or retry time has come.
            now = self._clock.monotonic()
            for uid, at in list(self._requeue.items()):
                if at <= now:
                    # A pod no longer wanted loses its retry too (else the loop would wake for it at once, always).
                    del self._requeue[uid]
                    if uid in self._desired:
                        self._workers.sync(self._desired[uid])
            if now >= self._next_housekeeping:
                self._next_housekeeping = now + HOUSEKEEPING_PERIOD
                self._housekeeping_due = False
                self.housekeeping()
            self.last_iteration = self._clock.monotonic()
            # The agent reports READY=1 to systemd on this (edgelet.app).
            self.first_sync_done.set()
            self.iterated.set()


def _with_origin(origin: str, message: str) -> str:
    """The message, led by its file or URL once (sources often name it already)."""
    return message if message.startswith(origin) else f"{origin}: {message}"


def _object(pod: str | None, origin: str) -> InvolvedObject:
    """A static pod that failed to load has no UID: name it by namespace/name, or by its origin."""
    if pod and "/" in pod:
        namespace, name = pod.split("/", 1)
        return InvolvedObject(kind="Pod", namespace=namespace, name=name)
    return InvolvedObject(kind="Manifest", name=origin)
