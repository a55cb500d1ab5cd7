"""The rollout manager: carries out `edgelet.rollout.decide` for every static pod between the merged config and
the pod workers (pulls, the record on disk, events).

The sources stay pure: they report what the manifests say. Each round the
sync loop hands this manager the pods the sources want; it answers with the
pods that must run, one version per name: the record's `active` one. The
record is written before the answer changes, so a restarted agent runs the
same version and its housekeeping stops any other (Replace: never two
versions of one pod at a time, because the pod workers start a static pod
only once the previous pod of its name has terminated).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from edgelet.api.pod import meta
from edgelet.api.pod import uid as pod_uid
from edgelet.events import EventRecorder, pod_ref
from edgelet.rollout.decide import (
    Decision,
    Observation,
    Policy,
    Record,
    after_reboot,
    changes_what_runs,
    condition,
    decide,
    gate_clock_offset,
    gate_due,
    retry,
    short,
    start,
)
from edgelet.rollout.observe import gate_observation, surge_clash
from edgelet.rollout.policy import policy_for
from edgelet.rollout.store import RolloutStore, StoredRollout, decode_pod, encode_pod
from edgelet.util.clock import read_boot_id
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod, PodStatus
    from edgelet.container.types import PodRuntimeStatus
    from edgelet.images.manager import ImageManager
    from edgelet.util.backoff import Backoff
    from edgelet.util.clock import Clock

log = get_logger(__name__)

# The chaos tests' crash points at each step (edgelet.util.crashpoint): the record is on disk, nothing done yet.
_CRASH_POINTS = {"replacing": "rollout.replace", "gating": "rollout.gate", "rolling-back": "rollout.rollback"}


def full_name(pod: Pod) -> str:
    return f"{meta(pod).namespace or 'default'}/{meta(pod).name or ''}"


def _live(rt: PodRuntimeStatus) -> bool:
    return any(c.state in ("running", "created") for c in rt.containers) or any(
        s.state in ("running", "created") for s in rt.sandboxes
    )


# How long a gate's clock decision may wait for others due soon after it: the sync loop's tick, which
# judged every gate before gates woke the loop only when due.
GATE_BATCH = 1.0
_RESTING = frozenset({"good", "rolled-back", "failed"})  # decide() keeps these until the observation changes


class RolloutManager:
    """Decides, per static pod name, which version runs; see the module docstring."""

    def __init__(
        self,
        store: RolloutStore,
        *,
        clock: Clock,
        events: EventRecorder,
        policy: Policy,
        enabled: bool = True,
        images: ImageManager | None = None,
        backoff: Backoff | None = None,
        runtime_pods: Callable[[], Mapping[str, PodRuntimeStatus]] = dict,
        status_of: Callable[[str], PodStatus | None] = lambda uid: None,
        boot_id: str | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._events = events
        self._policy = policy
        self._enabled = enabled
        self.enabled = enabled  # the node's default (--rollout); a pod's annotation may say otherwise
        self._images = images
        self._backoff = backoff
        self._runtime_pods = runtime_pods
        self._status_of = status_of
        self._stored: dict[str, StoredRollout] = store.load()
        # Gate time: monotonic, on across restarts and reboots, so NTP setting the wall clock of a board
        # without an RTC moves no deadline nor stability window.
        self._boot_id = read_boot_id() if boot_id is None else boot_id
        self._gate_offset = gate_clock_offset(
            ((s.boot_id, s.gate_offset, s.saved_gate) for s in self._stored.values()), self._boot_id, clock.monotonic()
        )
        now = self.gate_now()
        self._stored = {
            name: msgspec.structs.replace(
                s, record=after_reboot(s.record, boot_changed=s.boot_id != self._boot_id, legacy=not s.boot_id, now=now)
            )
            for name, s in self._stored.items()
        }
        self._decoded: dict[str, Pod] = {}  # hash -> Pod decoded from a record
        self._pulls: dict[str, asyncio.Task] = {}  # name -> the pull under way
        self._pulling: dict[str, str] = {}  # name -> the version that pull is for
        self._pulled: set[str] = set()  # hashes whose images are all in the store
        self._pull_error: dict[str, str] = {}  # hash -> why its last pull failed
        self._warned: set[tuple[str, str]] = set()
        self._unwritable: set[str] = set()  # names whose record could not be written (logged once)
        self._writing: dict[str, asyncio.Task] = {}  # name -> the write of its next record, off the loop
        self._rewritten: set[str] = set()  # versions whose record a write changed since the last round
        self._gate_due: dict[str, float] = {}  # gating names -> gate time when the clock alone can decide
        self.on_change: Callable[[], None] = lambda: None  # a pull finished: the loop runs a round soon

    def gate_now(self) -> float:
        """Gate time (rollout.decide.gate_clock_offset)."""
        return self._clock.monotonic() + self._gate_offset

    # What others read.
    def steady(self) -> bool:
        """Every record rests (good, rolled back or failed): a round changes nothing until something happens
        (a manifest, the runtime, a probe, a pull or a retry: each reaches the sync loop as an item), so an
        idle loop need not ask every tick (a round per pod every second was most of an idle agent's own CPU).
        Gating (a clock decides), pulling, replacing and rolling back keep every tick."""
        return all(s.record.phase in _RESTING for s in self._stored.values())

    def ticking(self) -> bool:
        """A step is open that a clock may move at any round (a pull, a replacement, a rollback, a gate not
        judged yet): the loop runs a round every tick. Judged gates need rounds only at `gate_round_at` and
        when their version's status changes (a sync's result)."""
        return any(
            s.record.phase not in _RESTING and (s.record.phase != "gating" or name not in self._gate_due)
            for name, s in self._stored.items()
        )

    def judges(self, uid: str) -> bool:
        """A judged gate reads this version's status: a sync of it may change the verdict."""
        return any(self._stored[n].record.target == uid for n in self._gate_due if n in self._stored)

    def gate_round_at(self) -> float | None:
        """The monotonic time of the next round for judged gates' clock decisions (gate_due), None when none
        gates: the first due, held up to GATE_BATCH for the others due by then (pods started together are
        judged in one round, not one round each), and a millisecond late, so that the round finds them due
        whatever the rounding of gate time."""
        due = [at for name, at in self._gate_due.items() if name in self._stored]
        if not due:
            return None
        first = min(due)
        return max(at for at in due if at <= first + GATE_BATCH) - self._gate_offset + 0.001

    def records(self) -> list[Record]:
        return [s.record for s in self._stored.values()]

    def record(self, name: str) -> Record | None:
        s = self._stored.get(name)
        return s.record if s is not None else None

    def pod_condition(self, pod: Pod) -> tuple[str, str] | None:
        """(reason, message) the pod's status shows about its rollout, or None."""
        rec = self.record(full_name(pod))
        if rec is None or rec.active != pod_uid(pod):
            return None
        return condition(rec)

    def kept_images(self) -> set[str]:
        """Images of every version a record keeps (the last good one above all): image GC leaves them."""
        refs: set[str] = set()
        for s in self._stored.values():
            for h in {s.record.last_good, s.record.active, s.record.target} - {None}:
                data = s.pods.get(h or "")
                if data is None:
                    continue
                pod = self._pod(h or "", data)
                spec = pod.spec
                if spec is None:
                    continue
                refs.update(c.image for c in [*(spec.init_containers or []), *spec.containers] if c.image)
        return refs

    def is_surging(self, uid: str) -> bool:
        """The uid is a new version started beside the previous one (Surge)."""
        return any(s.record.surge_from is not None and s.record.active == uid for s in self._stored.values())

    def unsettled(self) -> list[str]:
        """Names whose open rollout step can still change which version runs (--runonce waits for these; a first
        version's gate is finished by the daemon that adopts the pod: `changes_what_runs`)."""
        return sorted(
            s.record.name for s in self._stored.values() if changes_what_runs(s.record, rollback=self._policy.rollback)
        )

    async def retry(self, name: str) -> Record:
        """`edgelet rollout retry`: the blocked version is tried again (NoSuchRollout, NothingToRetry,
        RolloutError). Its record is written off the loop, as a round's steps are."""
        from edgelet.rollout.errors import NoSuchRollout, NothingToRetry, RolloutError

        stored = self._stored.get(name)
        if stored is None:
            raise NoSuchRollout(name)
        if stored.record.blocked is None:
            raise NothingToRetry(name, stored.record.phase)
        if name in self._writing:
            raise RolloutError(name, "a rollout step is being written; try again")
        rec = retry(stored.record, self.gate_now(), wall=self._clock.now())
        stamped = self._stamped(StoredRollout(record=rec, pods=stored.pods))
        if not await asyncio.to_thread(self._write, stamped, True):
            raise RolloutError(name, "cannot write the rollout record (see the agent's log)")
        if self._stored.get(name) is not stored:  # a round took a step meanwhile: the written retry is moot
            raise RolloutError(name, "the rollout moved on while the retry was written; try again")
        self._pull_error.pop(rec.target, None)
        self._taken(stamped)
        self.on_change()
        return rec

    # One round, from the sync loop.
    def versions_to_run(self, source: Mapping[str, Pod], sources_ready: bool) -> tuple[dict[str, Pod], set[str]]:
        """The pods that must run (uid -> Pod) for the pods the sources want, and the uids whose rollout
        changed (their status is worth publishing again)."""
        now, wall = self.gate_now(), self._clock.now()
        out: dict[str, Pod] = {}
        seen: set[str] = set()
        running = self._running_by_name()
        for uid, pod in source.items():
            name = full_name(pod)
            seen.add(name)
            policy, problems = policy_for(meta(pod).annotations or {}, self._policy, enabled=self._enabled)
            for problem in problems:
                if (uid, problem) not in self._warned:
                    self._warned.add((uid, problem))
                    self._events.warning(pod_ref(pod), "InvalidRolloutPolicy", problem)
            if policy is None:
                # The off switch: kubelet's kill-and-start, and no record (nothing to roll back to later).
                if name in self._stored:
                    self._forget(name)
                out[uid] = pod
                continue
            stored = self._stored.get(name)
            if stored is None:
                rec = start(name, uid, now, wall=wall)
                # Not fsynced: it is on every new pod's start path (two fsyncs on the event loop, tens of ms on
                # a card), and a copy lost or emptied by a power cut is read as no record, which gives the
                # same first version again.
                if not self._save_unsynced(StoredRollout(record=rec, pods={uid: encode_pod(pod)})):
                    out[uid] = pod  # nothing to roll back to either way: it runs as today, recorded later
                    continue
                self._events.normal(
                    pod_ref(pod),
                    "RolloutStarted",
                    f"First version {short(uid)}: started at once (nothing to roll back to)",
                )
                stored = self._stored[name]
                # Judged from the start: only its deadline, or its syncs, can decide it yet (no round every tick
                # until the next round decides it once).
                due = gate_due(rec, policy)
                if due is not None:
                    self._gate_due[name] = due
            elif name not in self._writing:  # else its next record is being written: acted on once it is
                obs = self._observe(stored.record, uid, running.get(name, set()), pod, policy.strategy == "Surge")
                decision = decide(stored.record, obs, now, policy, wall=wall)
                due = gate_due(decision.record, policy)
                if due is None:
                    self._gate_due.pop(name, None)
                else:
                    self._gate_due[name] = due
                if decision.record != stored.record:
                    new = decision.record
                    keep = {version for version in (new.active, new.target, new.last_good, new.surge_from) if version}
                    pods = {version: encoded for version, encoded in stored.pods.items() if version in keep}
                    if uid in keep:
                        pods[uid] = encode_pod(pod)
                    # Written (two fsyncs: tens of ms on a card) off the loop, and acted on only once written:
                    # this round runs what the record on disk says.
                    self._write_then_act(StoredRollout(record=decision.record, pods=pods), stored, decision, pod)
                else:
                    self._act(decision, pod)
            for version in (stored.record.active, stored.record.surge_from):
                if version is None:
                    continue
                if version == uid:
                    out[uid] = pod
                elif version in stored.pods:
                    out[version] = self._pod(version, stored.pods[version])
        if sources_ready:
            for name in [n for n in self._stored if n not in seen]:
                log.info("Static pod removed: its rollout record goes too", pod=name)
                self._forget(name)
        self._warned = {w for w in self._warned if w[0] in source}
        to_resync, self._rewritten = self._rewritten, set()
        return out, to_resync

    def _observe(self, rec: Record, desired: str, running: set[str], pod: Pod, surge: bool) -> Observation:
        gate = None
        clash = ""
        stored = self._stored[rec.name]
        if surge and rec.phase == "pulling" and rec.active is not None and rec.active in stored.pods:
            clash = surge_clash(self._pod(rec.active, stored.pods[rec.active]), pod)
        if rec.phase == "gating" and rec.target == desired:
            status = self._status_of(rec.target)
            if status is not None and rec.target in stored.pods:
                gate = gate_observation(self._pod(rec.target, stored.pods[rec.target]), status)
        return Observation(
            desired=desired,
            pulled=desired in self._pulled,
            clash=clash,
            pull_error=self._pull_error.get(desired, ""),
            running=frozenset(running),
            gate=gate,
        )

    def _running_by_name(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for uid, rt in self._runtime_pods().items():
            if _live(rt):
                out.setdefault(f"{rt.namespace or 'default'}/{rt.name}", set()).add(uid)
        return out

    def _pod(self, h: str, data: Any) -> Pod:
        pod = self._decoded.get(h)
        if pod is None:
            pod = self._decoded[h] = decode_pod(data)
        return pod

    def _save_unsynced(self, stored: StoredRollout) -> bool:
        """A first version's record, written on the loop without fsync (it is on the pod's start path) and taken;
        False when it cannot be written (a full disk): the next round tries again. Every other record is
        written, with its fsyncs, off the loop (_write_then_act, retry)."""
        stamped = self._stamped(stored)
        if not self._write(stamped, False):
            return False
        self._taken(stamped)
        return True

    def _stamped(self, stored: StoredRollout) -> StoredRollout:
        return msgspec.structs.replace(
            stored, boot_id=self._boot_id, gate_offset=self._gate_offset, saved_gate=self.gate_now()
        )

    def _write(self, stored: StoredRollout, durable: bool) -> bool:
        """The file alone (safe in a worker thread); False, logged once, when it cannot be written."""
        name = stored.record.name
        try:
            self._store.save(stored, durable=durable)
        except OSError as exc:
            if name not in self._unwritable:
                self._unwritable.add(name)
                log.error("Cannot write a rollout record; the running version stays until it can", exc, pod=name)
            return False
        self._unwritable.discard(name)
        return True

    def _taken(self, stored: StoredRollout) -> None:
        """A written record becomes the one acted on; what no record names any more is let go."""
        self._stored[stored.record.name] = stored
        live = {h for s in self._stored.values() for h in s.pods}
        for h in [h for h in self._decoded if h not in live]:
            del self._decoded[h]
        named = live | {
            h
            for s in self._stored.values()
            for h in (s.record.active, s.record.target, s.record.last_good, s.record.surge_from)
            if h
        }
        for h in [h for h in self._pulled if h not in named]:
            self._pulled.discard(h)
        for h in [h for h in self._pull_error if h not in named]:
            del self._pull_error[h]

    def _write_then_act(self, new: StoredRollout, old: StoredRollout, d: Decision, pod: Pod) -> None:
        """Write `new` in a worker thread, then (back on the loop) take it and carry out `d`; a round that runs
        meanwhile keeps acting on `old`. A record not written changes nothing: the next round decides again."""
        name = new.record.name
        stamped = self._stamped(new)

        async def write() -> None:
            try:
                written = await asyncio.to_thread(self._write, stamped, True)
            finally:
                self._writing.pop(name, None)
            if written and self._stored.get(name) is old:
                self._taken(stamped)
                crash_point("rollout.step")
                if d.record.phase != old.record.phase and d.record.phase in _CRASH_POINTS:
                    crash_point(_CRASH_POINTS[d.record.phase])
                if d.record.phase != old.record.phase:
                    log.info(
                        "Rollout step",
                        pod=name,
                        phase=d.record.phase,
                        target=short(d.record.target),
                        active=short(d.record.active),
                        reason=d.record.reason,
                    )
                self._rewritten.update(h for h in (old.record.active, d.record.active) if h)
                self._act(d, pod)
            self.on_change()

        self._writing[name] = asyncio.get_running_loop().create_task(write(), name=f"rollout-write-{name}")

    def _act(self, d: Decision, pod: Pod) -> None:
        """A decision's events and pull, once its record is what the manager holds."""
        for e in d.events:
            (self._events.warning if e.type == "Warning" else self._events.normal)(pod_ref(pod), e.reason, e.message)
        if d.pull:
            self._start_pull(full_name(pod), pod)

    def writing(self) -> bool:
        """Whether a record is being written (its step not yet taken)."""
        return bool(self._writing)

    async def settle(self) -> None:
        """Wait for the record writes under way (tests, and the agent's stop)."""
        while self._writing:
            await asyncio.gather(*list(self._writing.values()), return_exceptions=True)

    def _forget(self, name: str) -> None:
        try:
            self._store.delete(name)
        except OSError as exc:
            log.warning("Cannot remove a rollout record", pod=name, err=str(exc))
        self._stored.pop(name, None)
        self._gate_due.pop(name, None)
        task = self._pulls.pop(name, None)
        if task is not None:
            task.cancel()

    # Pulls.
    def _start_pull(self, name: str, pod: Pod) -> None:
        uid = pod_uid(pod)
        under_way = self._pulls.get(name)
        if under_way is not None and not under_way.done():
            if self._pulling.get(name) == uid or self._images is None:
                return
            under_way.cancel()  # a pull for a version since replaced: its images are no longer wanted
        if self._images is None:
            return
        if self._backoff is not None:
            now = self._clock.monotonic()
            spec = pod.spec
            names = [c.name for c in [*(spec.init_containers or []), *spec.containers]] if spec is not None else []
            if any(self._backoff.remaining((uid, "image:" + n), now) > 0 for n in names):
                return  # the pull failed lately: the back-off paces the retries
        self._pulling[name] = uid
        self._pulls[name] = asyncio.get_running_loop().create_task(self._pull(pod), name=f"rollout-pull-{name}")

    async def _pull(self, pod: Pod) -> None:
        from edgelet.images.manager import ImageUnavailable

        uid = pod_uid(pod)
        spec = pod.spec
        assert self._images is not None and spec is not None
        try:
            for c in spec.init_containers or []:
                await self._images.ensure(pod, c, init=True)
            for c in spec.containers:
                await self._images.ensure(pod, c)
        except ImageUnavailable as exc:
            self._pull_error[uid] = f"{exc.reason}: {exc.message}"
            log.warning(
                "Pull of a new version failed; the running version stays",
                pod=full_name(pod),
                version=short(uid),
                reason=exc.reason,
                err=exc.message,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._pull_error[uid] = str(exc)
            log.error("Pull of a new version failed", exc, pod=full_name(pod))
        else:
            self._pull_error.pop(uid, None)
            self._pulled.add(uid)
        finally:
            self.on_change()

    async def close(self) -> None:
        await self.settle()
        tasks = [t for t in self._pulls.values() if not t.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["RolloutManager", "full_name"]
