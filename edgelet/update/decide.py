"""Every update decision as a pure function: may a release be applied, what a start does, is a trial committed.

`acceptance_problem` is the gate a signed release passes before anything
is written. `launch_action` is what `packaging/launch` does at each start
(the sh script is the one that runs; this is its specification, and a test
runs both on one table). `resolve_trial` says what a trial record found at
start means. `trial_verdict` judges a running trial: commit, wait, or roll
back with a reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# What a start does (launch_action).
START = "start"  # no trial in progress: run `current`
COUNT = "count"  # a trial runs: count this start, then run `current` (the new release)
ROLLBACK = "rollback"  # too many starts without a commit: `current` back to the previous release, then run it

# What a trial record found at the agent's start means (resolve_trial).
NONE = "none"  # no trial
TRIAL = "trial"  # this agent is the release on trial
ROLLED_BACK = "rolled-back"  # the trial ended in a rollback (the launcher's or an agent's): record it
ABANDONED = "abandoned"  # the record was written but the swap never happened (a crash before it): forget it

# A trial's verdict (trial_verdict).
COMMIT = "commit"
WAIT = "wait"

REASON_ATTEMPTS = "restart loop: {n} starts without a commit"


@dataclass(frozen=True)
class Candidate:
    """A release whose signature holds: what its release.json and its signature say."""

    version: int
    arch: str
    signed_version: int | None  # the signature's own version (minisign's trusted comment), None when it has none


def acceptance_problem(candidate: Candidate, *, arch: str, running: int, rolled_back: Iterable[int] = ()) -> str | None:
    """Why a release with a valid signature is not applied, or None (pure).

    Only upwards: a version no higher than the running one, or than one rolled back from before (a replay of a
    bad release), is refused; `edgelet update rollback` is the only way down.
    """
    if candidate.arch != arch:
        return f"built for {candidate.arch}, this device is {arch}"
    if candidate.signed_version is not None and candidate.signed_version != candidate.version:
        return f"its signature says version {candidate.signed_version}, its release.json {candidate.version}"
    if candidate.version <= running:
        return f"version {candidate.version} is not newer than the running version {running}"
    worst = max(rolled_back, default=None)
    if worst is not None and candidate.version <= worst:
        return f"version {candidate.version} is not newer than version {worst}, rolled back before"
    return None


@dataclass(frozen=True)
class TrialRecord:
    """`<state>/update/trial`, in the key=value lines the launcher reads and writes."""

    version: int
    target: str  # the new release's directory (what `current` points at during the trial)
    previous: str  # the release it replaced, where a rollback points `current`
    previous_version: int = 0
    attempts: int = 0  # starts of the new release counted by the launcher
    outcome: str = ""  # "" while the trial runs; "rolled-back" once a rollback swapped `current`
    reason: str = ""  # why it was rolled back
    started: float = 0.0  # wall time the old agent swapped


def launch_action(record: TrialRecord | None, current: str, max_attempts: int) -> tuple[str, int]:
    """What the launcher does at a start, and the attempt count it writes (pure; `current` is where the
    symlink points)."""
    if record is None or record.outcome or current != record.target:
        return START, record.attempts if record else 0
    if record.attempts >= max_attempts:
        return ROLLBACK, record.attempts
    return COUNT, record.attempts + 1


def resolve_trial(record: TrialRecord | None, running: str) -> str:
    """What a trial record means to the agent that starts from `running` (the directory it runs from) (pure)."""
    if record is None:
        return NONE
    if record.outcome:
        return ROLLED_BACK
    if running == record.target:
        return TRIAL
    # `current` does not point at the new release: a rollback swapped it back before it could write its outcome,
    # or the old agent crashed between writing the record and the swap (no start was ever counted).
    return ROLLED_BACK if record.attempts > 0 else ABANDONED


@dataclass(frozen=True)
class PodInstance:
    """A container as the old agent left it: id and pid (the pod's key and the container's name are the keys)."""

    container_id: str
    pid: int


@dataclass(frozen=True)
class TrialObservation:
    """What the running trial has shown so far."""

    elapsed: float  # seconds since this agent started
    before: Mapping[str, PodInstance]  # "<pod>/<container>" -> the old agent's instance; empty when unknown
    now: Mapping[str, PodInstance] | None  # the same after this agent's first full sync (None before it)
    healthz: bool  # /healthz answered ok
    lease_needed: bool  # the old agent had an apiserver link
    lease_renewed: bool


def changed_pods(before: Mapping[str, PodInstance], now: Mapping[str, PodInstance]) -> list[str]:
    """The containers the new agent did not adopt as they were: gone, or another id or pid (pure)."""
    changed = []
    for key, old in sorted(before.items()):
        new = now.get(key)
        if new is None:
            changed.append(f"{key} is gone")
        elif new.container_id != old.container_id:
            changed.append(f"{key} was restarted (container {old.container_id[:12]} -> {new.container_id[:12]})")
        elif new.pid != old.pid:
            changed.append(f"{key} was restarted (pid {old.pid} -> {new.pid})")
    return changed


def trial_verdict(obs: TrialObservation, deadline: float) -> tuple[str, str]:
    """COMMIT, WAIT, or ROLLBACK with the reason (pure).

    A restarted pod rolls back at once (the harm is done; the old release adopts what is left); every other
    condition may take until the deadline.
    """
    if obs.now is not None:
        changed = changed_pods(obs.before, obs.now)
        if changed:
            return ROLLBACK, "pods not adopted as they ran: " + "; ".join(changed)
    waiting = []
    if obs.now is None:
        waiting.append("no full sync")
    if not obs.healthz:
        waiting.append("/healthz not answered")
    if obs.lease_needed and not obs.lease_renewed:
        waiting.append("the Lease not renewed")
    if not waiting:
        return COMMIT, ""
    if obs.elapsed >= deadline:
        return ROLLBACK, f"not healthy within {deadline:g}s: " + ", ".join(waiting)
    return WAIT, ", ".join(waiting)


STAGING_RETRY_FIRST = 60.0
STAGING_RETRY_MAX = 3600.0


def staging_retry_delay(failures: int) -> float:
    """Seconds before a release whose staging failed on this device (a full disk, an I/O error: not the
    release's fault) is tried again after its `failures`-th failure: a minute, doubling up to an hour, because
    every try writes up to the release's size to the flash before it fails again."""
    return min(STAGING_RETRY_MAX, STAGING_RETRY_FIRST * 2 ** max(0, failures - 1))


def settle_step(
    pods: Mapping[str, PodInstance] | None,
    last: Mapping[str, PodInstance] | None,
    quiet_since: float | None,
    now: float,
    *,
    quiet: float,
    waited: float,
    limit: float,
) -> tuple[str, float | None]:
    """Whether the old agent may swap now (pure): ("go", _) once its first full sync is done and its running
    containers stayed the same for `quiet` seconds, or after `limit` seconds of waiting whatever they do (a
    crash-looping pod never settles); else ("wait", the time the current set of containers was first seen).

    The trial holds the new agent to the snapshot taken at the swap: one taken before the first sync, or while
    pods were still being started, would miss containers the new agent then adopts or restarts unseen.
    """
    if waited >= limit:
        return "go", quiet_since
    if pods is None:
        return "wait", None
    if last is None or dict(pods) != dict(last) or quiet_since is None:
        return "wait", now
    return ("go" if now - quiet_since >= quiet else "wait"), quiet_since
