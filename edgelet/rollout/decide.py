"""The rollout state machine of one static pod and its health gate, as pure functions of observations.

One record per static pod (namespace/name). Phases:

    pulling -> replacing -> gating -> good
                               \\-> rolling-back -> rolled-back
                               \\-> failed      (no last good version: it keeps running, as kubelet would)

`active` is the version (config hash, the static pod's UID) that is meant to
run; the caller runs exactly that one and nothing else of the name, so the
record alone says what runs after a restart. Every transition is returned as
a new record that the caller writes to disk before it acts on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

Strategy = Literal["Replace", "Surge"]
Phase = Literal["pulling", "replacing", "gating", "good", "rolling-back", "rolled-back", "failed"]
Outcome = Literal["pending", "good", "failed"]

DEFAULT_DEADLINE = 300.0
DEFAULT_WINDOW = 30.0
HISTORY_MAX = 20

# Waiting reasons that can never turn good on their own; a pull that failed for a
# reason other than "not there" or "refused" (a bad link) waits for the deadline instead.
_FATAL_WAITING = frozenset({"CreateContainerConfigError", "CrashLoopBackOff", "ErrImageNeverPull", "InvalidImageName"})
_PULL_REFUSED = (
    "not found",
    "manifest unknown",
    "name unknown",
    "unauthorized",
    "denied",
    "forbidden",
    "status 401",
    "status 403",
    "status 404",
    "refused",
)


@dataclass(frozen=True)
class ContainerObs:
    """What the gate needs of one container's status."""

    name: str
    started: bool = False  # running and its startup probe (if any) passed
    restarts: int = 0
    waiting: str = ""  # the waiting reason, "" when not waiting
    message: str = ""
    exit_code: int | None = None  # of the current instance when it terminated


@dataclass(frozen=True)
class GateObs:
    """The status of the version under the gate, from its published PodStatus."""

    restart_policy: str = "Always"
    phase: str = "Pending"
    ready: bool = False  # the pod's Ready condition
    containers: tuple[ContainerObs, ...] = ()
    init_containers: tuple[ContainerObs, ...] = ()


@dataclass(frozen=True)
class GateVerdict:
    outcome: Outcome
    reason: str = ""
    ready_since: float | None = None
    restarts_at_ready: int = 0


@dataclass(frozen=True)
class Policy:
    deadline: float = DEFAULT_DEADLINE
    window: float = DEFAULT_WINDOW
    rollback: bool = True
    # Replace: stop the old version, then start the new. Surge: start the new beside the old, stop the old once
    # the new is good (refused, falling back to Replace, where the two would clash).
    strategy: Strategy = "Replace"


def is_pull_refused(message: str) -> bool:
    low = message.lower()
    return any(s in low for s in _PULL_REFUSED)


def fatal_failure(g: GateObs) -> str | None:
    """An unambiguous failure of the version: why, or None."""
    for c in (*g.init_containers, *g.containers):
        if c.waiting in _FATAL_WAITING:
            return f"container {c.name}: {c.waiting}" + (f": {c.message}" if c.message else "")
        if c.waiting == "ErrImagePull" and is_pull_refused(c.message):
            return f"container {c.name}: ErrImagePull: {c.message}"
    if g.restart_policy == "Never":
        for c in g.init_containers:
            if c.exit_code not in (None, 0):
                return f"init container {c.name} failed with exit code {c.exit_code} (restartPolicy Never)"
    if g.phase == "Failed":
        failed = [c for c in g.containers if c.exit_code not in (None, 0)]
        detail = ", ".join(f"{c.name} exited {c.exit_code}" for c in failed)
        return "the pod failed" + (f": {detail}" if detail else "")
    return None


def _missing(g: GateObs | None) -> str:
    if g is None:
        return "the pod has not started"
    not_started = [c.name for c in g.containers if not c.started]
    if not_started:
        return "not started: " + ", ".join(not_started)
    return "the pod is not Ready"


def assess_gate(
    g: GateObs | None,
    *,
    started_at: float,
    now: float,
    policy: Policy,
    ready_since: float | None,
    restarts_at_ready: int,
) -> GateVerdict:
    """Good once every container started and the pod is Ready for `window` seconds without a restart (a
    run-to-completion pod: once it succeeded); failed on an unambiguous failure or at the deadline."""
    if g is not None:
        why = fatal_failure(g)
        if why is not None:
            return GateVerdict("failed", why)
        if g.phase == "Succeeded":
            return GateVerdict("good", "the pod succeeded")
        restarts = sum(c.restarts for c in g.containers)
        # A run-to-completion pod (OnFailure, Never) is good only once it succeeded.
        healthy = (
            g.restart_policy == "Always" and g.ready and bool(g.containers) and all(c.started for c in g.containers)
        )
        if healthy:
            if ready_since is None or restarts > restarts_at_ready:
                # Ready now, or a restart since: the stability window starts (again).
                return GateVerdict("pending", "", now, restarts)
            if now - ready_since >= policy.window:
                return GateVerdict("good", f"Ready and no restart for {policy.window:g}s")
            return GateVerdict("pending", "", ready_since, restarts_at_ready)
    if now - started_at >= policy.deadline:
        return GateVerdict("failed", f"not healthy within the {policy.deadline:g}s deadline: {_missing(g)}")
    return GateVerdict("pending")


@dataclass(frozen=True)
class HistoryEntry:
    hash: str
    outcome: str  # "pulling", "gating", "good", "failed", "rolled-back", "superseded", "retry"
    reason: str
    at: float


@dataclass(frozen=True)
class Record:
    """One static pod's rollout, as written to disk before each step."""

    name: str  # namespace/name
    phase: Phase
    target: str  # the version the sources want
    active: str | None  # the version meant to run now
    last_good: str | None = None
    blocked: str | None = None  # a failed version, not tried again until the manifest changes or a retry
    since: float = 0.0  # wall time the phase began (the gate's deadline counts from it)
    ready_since: float | None = None
    restarts_at_ready: int = 0
    reason: str = ""
    history: tuple[HistoryEntry, ...] = ()
    surge_from: str | None = None  # Surge: the previous version, kept running beside `active` during the gate


@dataclass(frozen=True)
class Observation:
    """What the manager saw of one static pod this round."""

    desired: str  # the hash the sources want now
    pulled: bool = False  # every image of `desired` is in the store
    pull_error: str = ""  # why the last pull of `desired` failed
    running: frozenset[str] = frozenset()  # hashes of this name with live containers or sandboxes
    gate: GateObs | None = None  # status of the target, when it has one
    clash: str = ""  # why the target cannot run beside the active version (Surge), "" when it can


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    record: Record
    events: tuple[Event, ...] = ()
    pull: bool = False  # pull the target's images (the manager's back-off paces retries)


def _hist(rec: Record, h: str, outcome: str, reason: str, wall: float) -> tuple[HistoryEntry, ...]:
    return (*rec.history, HistoryEntry(h, outcome, reason, wall))[-HISTORY_MAX:]


def short(h: str | None) -> str:
    return (h or "-")[:8]


def changes_what_runs(rec: Record, *, rollback: bool) -> bool:
    """Whether the record's open step can still change which version runs: a pull or a replacement under way,
    a rollback, a Surge gate (its end stops the previous version), or a gate with a last good version to fall
    back to. A first version's gate (or any gate with rollback off) only marks the version good for a later
    update: `--runonce` leaves it to the daemon that adopts the pod rather than wait out the window."""
    if rec.phase in ("pulling", "replacing", "rolling-back"):
        return True
    if rec.phase != "gating":
        return False
    if rec.surge_from is not None:
        return True
    return rollback and rec.last_good is not None and rec.last_good != rec.target


def gate_due(rec: Record, policy: Policy) -> float | None:
    """The gate time at which the clock alone can change a gating record's verdict (assess_gate): the end of
    its stability window once Ready, or its deadline, whichever first; None for any other phase. Until then
    only a new status of the version (a sync, a probe) can."""
    if rec.phase != "gating":
        return None
    due = rec.since + policy.deadline
    if rec.ready_since is not None:
        due = min(due, rec.ready_since + policy.window)
    return due


def start(name: str, desired: str, now: float, *, wall: float | None = None) -> Record:
    """A pod seen for the first time: no last good version, so it runs at once (as today) under the gate.
    `now` is gate time (see decide), `wall` the history's timestamp (default: now)."""
    return Record(
        name=name,
        phase="gating",
        target=desired,
        active=desired,
        since=now,
        reason="first version: nothing to roll back to",
        history=(HistoryEntry(desired, "gating", "first version", now if wall is None else wall),),
    )


def decide(rec: Record, obs: Observation, now: float, policy: Policy, *, wall: float | None = None) -> Decision:
    """The next record, the events to record and whether to pull, for one round of one static pod.

    `now` is gate time: monotonic, continuing across agent restarts and reboots from the last record written
    (sync/rollout.py), so a wall clock that NTP sets hours forward or back moves no deadline nor window.
    `wall` dates the history (default: now)."""
    wall = now if wall is None else wall
    if obs.desired != rec.target:
        return _new_target(rec, obs, now, policy, wall)
    if rec.phase == "pulling":
        return _pulling(rec, obs, now, policy, wall)
    if rec.phase == "replacing":
        return _replacing(rec, obs, now, policy, wall)
    if rec.phase == "gating":
        return _gating(rec, obs, now, policy, wall)
    if rec.phase == "rolling-back":
        return _rolling_back(rec, obs, now, policy, wall)
    return Decision(rec)  # good, rolled-back, failed: steady


def _pulling(rec: Record, obs: Observation, now: float, policy: Policy, wall: float) -> Decision:
    """Pulling the new version's images while the old one runs: once present, replace it (or start beside it
    under Surge, unless its ports or name clash)."""
    if obs.pulled and policy.strategy == "Surge" and rec.active is not None and not obs.clash:
        updated = replace(
            rec,
            phase="gating",
            active=rec.target,
            surge_from=rec.active,
            since=now,
            ready_since=None,
            restarts_at_ready=0,
            reason="waiting for the health gate (Surge: the previous version runs)",
            history=_hist(rec, rec.target, "gating", f"started beside {short(rec.active)} (Surge)", wall),
        )
        return Decision(
            updated,
            (
                Event(
                    "Normal",
                    "RolloutSurging",
                    f"Images of version {short(rec.target)} present: started beside version "
                    f"{short(rec.active)}, which stops once the new one is good",
                ),
            ),
        )
    if obs.pulled:
        refused = (
            (Event("Warning", "SurgeRefused", f"Surge refused: {obs.clash}; replacing instead"),)
            if policy.strategy == "Surge" and obs.clash
            else ()
        )
        updated = replace(rec, phase="replacing", active=rec.target, since=now, reason="images present")
        return Decision(
            updated,
            (
                *refused,
                Event(
                    "Normal",
                    "RolloutReplacing",
                    f"Images of version {short(rec.target)} present: replacing version {short(rec.active)}",
                ),
            ),
        )
    reason = f"pulling the images of version {short(rec.target)}; version {short(rec.active)} keeps running" + (
        f": {obs.pull_error}" if obs.pull_error else ""
    )
    return Decision(replace(rec, reason=reason), pull=True)


def _replacing(rec: Record, obs: Observation, now: float, policy: Policy, wall: float) -> Decision:
    """The old version stopping: once only the target runs, its health gate starts."""
    if obs.running <= {rec.target}:
        return Decision(
            replace(
                rec,
                phase="gating",
                since=now,
                ready_since=None,
                restarts_at_ready=0,
                reason="waiting for the health gate",
                history=_hist(rec, rec.target, "gating", "replaced the previous version", wall),
            )
        )
    return Decision(rec)


def _gating(rec: Record, obs: Observation, now: float, policy: Policy, wall: float) -> Decision:
    """The health gate: still pending, good, or failed (then rolled back to the last good version when there is
    one and rollback is on)."""
    verdict = assess_gate(
        obs.gate,
        started_at=rec.since,
        now=now,
        policy=policy,
        ready_since=rec.ready_since,
        restarts_at_ready=rec.restarts_at_ready,
    )
    if verdict.outcome == "pending":
        return Decision(replace(rec, ready_since=verdict.ready_since, restarts_at_ready=verdict.restarts_at_ready))
    if verdict.outcome == "good":
        updated = replace(
            rec,
            phase="good",
            last_good=rec.target,
            blocked=None,
            since=now,
            ready_since=None,
            surge_from=None,
            reason=verdict.reason,
            history=_hist(rec, rec.target, "good", verdict.reason, wall),
        )
        return Decision(
            updated, (Event("Normal", "RolloutSucceeded", f"Version {short(rec.target)} is good: {verdict.reason}"),)
        )
    if rec.last_good is not None and rec.last_good != rec.target and policy.rollback:
        why = f"version {short(rec.target)} failed: {verdict.reason}"
        updated = replace(
            rec,
            phase="rolling-back",
            active=rec.last_good,
            blocked=rec.target,
            since=now,
            surge_from=None,
            ready_since=None,
            reason=why,
            history=_hist(rec, rec.target, "failed", verdict.reason, wall),
        )
        return Decision(
            updated, (Event("Warning", "RollingBack", f"{why}; rolling back to version {short(rec.last_good)}"),)
        )
    why = (
        "no last good version to roll back to"
        if rec.last_good is None or rec.last_good == rec.target
        else "rollback is off"
    )
    updated = replace(
        rec,
        phase="failed",
        since=now,
        surge_from=None,
        reason=f"{verdict.reason} ({why}; it stays, as with kubelet)",
        history=_hist(rec, rec.target, "failed", f"{verdict.reason} ({why})", wall),
    )
    return Decision(
        updated, (Event("Warning", "RolloutFailed", f"Version {short(rec.target)} failed: {verdict.reason}; {why}"),)
    )


def _rolling_back(rec: Record, obs: Observation, now: float, policy: Policy, wall: float) -> Decision:
    """Rolling back: once the failed version no longer runs, the rollback is done."""
    if rec.target not in obs.running:
        reason = rec.reason
        updated = replace(
            rec,
            phase="rolled-back",
            since=now,
            history=_hist(rec, rec.target, "rolled-back", f"back to {short(rec.active)}", wall),
        )
        return Decision(
            updated,
            (
                Event(
                    "Warning",
                    "RolledBack",
                    f"Rolled back to version {short(rec.active)}: {reason}; version "
                    f"{short(rec.target)} is not tried again until its manifest changes or "
                    f"`edgelet rollout retry {rec.name}`",
                ),
            ),
        )
    return Decision(rec)


def _new_target(rec: Record, obs: Observation, now: float, policy: Policy, wall: float) -> Decision:
    """The sources want another version than the record's target."""
    history = rec.history
    if rec.target != rec.last_good and rec.phase not in ("rolled-back", "failed"):
        history = (*history, HistoryEntry(rec.target, "superseded", f"manifest changed to {short(obs.desired)}", wall))[
            -HISTORY_MAX:
        ]
    # A Surge under way ends: the version it started goes, the one it started beside stays.
    base = replace(
        rec,
        target=obs.desired,
        blocked=None,
        since=now,
        ready_since=None,
        restarts_at_ready=0,
        history=history,
        surge_from=None,
        active=rec.surge_from or rec.active,
    )
    if obs.desired == rec.last_good:
        updated = replace(
            base,
            phase="good",
            active=obs.desired,
            reason="manifest back to the last good version",
            history=(*history, HistoryEntry(obs.desired, "good", "manifest back to the last good version", wall))[
                -HISTORY_MAX:
            ],
        )
        return Decision(updated)
    # Download first, always: even with no last good version to fall back to (a first version still in its
    # gate) or rollback off, what runs keeps running until the new version's images are in; a new version
    # whose image cannot be had never leaves the device with nothing running.
    updated = replace(
        base,
        phase="pulling",
        reason=f"pulling the images of version {short(obs.desired)}",
        history=(*history, HistoryEntry(obs.desired, "pulling", "manifest changed", wall))[-HISTORY_MAX:],
    )
    # What runs stays: the last good version, or the one under the gate that this one supersedes.
    return Decision(
        updated,
        (
            Event(
                "Normal",
                "RolloutStarted",
                f"New version {short(obs.desired)}: pulling its images while version "
                f"{short(base.active)} keeps running",
            ),
        ),
        pull=True,
    )


def retry(rec: Record, now: float, *, wall: float | None = None) -> Record:
    """`edgelet rollout retry`: try the blocked version again (pulling first, the last good one still running)."""
    if rec.blocked is None:
        return rec
    return replace(
        rec,
        phase="pulling",
        blocked=None,
        since=now,
        ready_since=None,
        restarts_at_ready=0,
        reason="retry asked by the operator",
        history=_hist(rec, rec.target, "retry", "asked by the operator", now if wall is None else wall),
    )


def gate_clock_offset(saved: Iterable[tuple[str, float, float]], boot_id: str, monotonic: float) -> float:
    """The offset that makes `monotonic + offset` the gate time, from the records' (boot id, offset, gate
    time when written) (pure).

    Within one boot the monotonic clock runs on across agent restarts, so the offset the boot's records were
    written with stays. After a reboot the monotonic clock starts again near zero: gate time then goes on from
    the latest time a record was written, so the time a gate already spent (its elapsed budget) is kept and the
    time the device was off is not counted."""
    latest = 0.0
    for boot, offset, written in saved:
        if boot == boot_id:
            return offset
        latest = max(latest, written)
    return latest - monotonic


def after_reboot(rec: Record, boot_changed: bool, legacy: bool, now: float) -> Record:
    """A record read at start (pure): after a reboot a gate's stability window starts again (the pod was
    restarted, whatever its restart count says); a record from an agent that kept wall time in `since` starts
    its phase's windows now."""
    if legacy:
        return replace(rec, since=now, ready_since=None, restarts_at_ready=0)
    if boot_changed and rec.phase == "gating":
        return replace(rec, ready_since=None, restarts_at_ready=0)
    return rec


def condition(rec: Record) -> tuple[str, str] | None:
    """(reason, message) a pod shows while its rollout is not plain good; None when there is nothing to say."""
    if rec.phase == "rolled-back":
        return "RolledBack", rec.reason + f" (running version {short(rec.active)})"
    if rec.phase == "rolling-back":
        return "RollingBack", rec.reason
    if rec.phase == "pulling":
        return "RolloutPulling", rec.reason
    if rec.phase == "failed" and rec.last_good is not None:
        # A brand-new pod that failed is what kubelet shows too (its event says there was nothing to go back to).
        return "RolloutFailed", rec.reason
    return None


__all__ = [
    "ContainerObs",
    "Decision",
    "Event",
    "GateObs",
    "GateVerdict",
    "HistoryEntry",
    "Observation",
    "Policy",
    "Record",
    "assess_gate",
    "condition",
    "decide",
    "fatal_failure",
    "retry",
    "start",
]
