"""The --runonce verdict: whether every pod is judged, from its containers' observed states (pure).

kubelet's runOnce syncs a pod, sleeps a retry delay (1 s, doubling) and then
checks that every container in spec.containers runs; its own TODO says health
checking would be better than waiting. The wait is what keeps a container
that dies at once from being reported running.

**edgelet:** judges each pod from the states PLEG observed, as soon as they
are final, instead of on a timer:

- a regular container is final when it completed (exited 0 under
  OnFailure or Never), or when its current instance runs, is ready (its
  readiness probe passed, where it has one) and started (its startup probe,
  where it has one), its process has lived STABLE seconds since its own
  `runc start` (the runtime's record, not when a status said so), and that
  process is still there when the verdict is taken: no exit file from its
  conmon, not a zombie (`gone`, checked by the caller at that moment). That
  is kubelet's rule that a container must not be restarting, without the
  latency of the exit reaching PLEG, a sync and a status in the window: a
  new instance (a restart, under a new id) starts its own window;
- a container waiting (CrashLoopBackOff, an image back-off, a start error)
  is not final;
- a pod Succeeded is done; a pod Failed is final and fails the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgelet.api.types import ContainerStatus, Pod, PodStatus
    from edgelet.container.types import ContainerRecord

# Seconds a container's process must have lived since its `runc start` to count as not restarting. What it
# catches is a process that fails at its own start (a bad flag, a missing file, a shell error): those exit
# within tens of milliseconds. Its exit is read directly when the verdict is taken, so no event latency has
# to fit in the window; a process that lives longer and dies later is outside any window, kubelet's 1 s too.
STABLE = 0.25

# The scheme of a ContainerStatus's containerID (edgelet.status.compute), to match it to runtime records.
_SCHEME = "runc://"


@dataclass(frozen=True)
class RunonceVerdict:
    failed: tuple[str, ...] = ()  # pods Failed (final)
    pending: tuple[str, ...] = ()  # pods not yet judged
    # Monotonic time at which a running container becomes stable (judge again then), None: only events help.
    next_check: float | None = None

    @property
    def done(self) -> bool:
        return not self.pending


def note_started(
    started: MutableMapping[str, float],
    pids: MutableMapping[str, int],
    records: Iterable[ContainerRecord],
    now: float,
    wall: float,
) -> None:
    """Record, by containerID, the monotonic time each running instance's process started (from the wall time
    the runtime wrote at its `runc start`; never in the future, so a clock step cannot delay a verdict) and its
    pid; an instance without a start time counts from `now`, when it was first seen running."""
    for rec in records:
        if rec.state != "running":
            continue
        cid = _SCHEME + rec.id
        if cid not in started:
            age = max(0.0, wall - rec.started_at) if rec.started_at is not None else 0.0
            started[cid] = now - age
        if rec.pid is not None:
            pids[cid] = rec.pid


def note_running(seen: MutableMapping[str, float], statuses: Iterable[PodStatus | None], now: float) -> None:
    """Record when each running container instance (by containerID) was first seen running, for one whose
    runtime record was not noted (the verdict counts its window from then)."""
    for status in statuses:
        for cs in (status.container_statuses or []) if status is not None else []:
            if cs.container_id and cs.state is not None and cs.state.running is not None:
                seen.setdefault(cs.container_id, now)


def _container_final(
    cs: ContainerStatus | None,
    policy: str,
    started: Mapping[str, float],
    gone: AbstractSet[str],
    now: float,
    stable: float,
) -> tuple[bool, float | None]:
    """(final?, when it may become final by itself) of one regular container."""
    if cs is None or cs.state is None:
        return False, None
    term = cs.state.terminated
    if term is not None:
        return term.exit_code == 0 and policy != "Always", None
    if cs.state.running is None or not cs.ready or cs.started is False or not cs.container_id:
        return False, None
    if cs.container_id in gone:
        return False, None  # it exited: the status saying so is on its way (PLEG), and wakes the verdict
    since = started.get(cs.container_id)
    if since is None:
        return False, None
    if now - since >= stable:
        return True, None
    return False, since + stable


def runonce_verdict(
    desired: Mapping[str, Pod],
    statuses: Mapping[str, PodStatus | None],
    started: Mapping[str, float],
    now: float,
    stable: float = STABLE,
    gone: AbstractSet[str] = frozenset(),
) -> RunonceVerdict:
    """The verdict over every desired pod (uid -> pod) given its published status (uid -> status), the start
    of each running instance (containerID -> monotonic time) and the instances whose process is gone."""
    failed: list[str] = []
    pending: list[str] = []
    wakes: list[float] = []
    for uid, pod in desired.items():
        name = f"{pod.metadata.namespace}/{pod.metadata.name}" if pod.metadata is not None else uid
        status = statuses.get(uid)
        if status is None:
            pending.append(name)
            continue
        if status.phase == "Failed":
            failed.append(name)
            continue
        if status.phase == "Succeeded":
            continue
        policy = (pod.spec.restart_policy if pod.spec is not None else None) or "Always"
        by_name = {cs.name: cs for cs in status.container_statuses or []}
        judged = True
        for c in pod.spec.containers if pod.spec is not None else []:
            final, wake = _container_final(by_name.get(c.name), policy, started, gone, now, stable)
            if not final:
                judged = False
                if wake is not None:
                    wakes.append(wake)
        if not judged:
            pending.append(name)
    return RunonceVerdict(tuple(failed), tuple(pending), min(wakes) if wakes and pending else None)


def running_ids(statuses: Iterable[PodStatus | None]) -> list[str]:
    """The containerIDs the statuses show running (those whose process the caller checks is still there)."""
    return [
        cs.container_id
        for status in statuses
        if status is not None
        for cs in status.container_statuses or []
        if cs.container_id and cs.state is not None and cs.state.running is not None
    ]


def exited_by_stat(stat: bytes) -> bool:
    """Whether /proc/PID/stat's text says the process has exited (a zombie its conmon has not reaped yet, or
    dead); the state follows the command name's closing parenthesis, which may itself hold one."""
    state = stat[stat.rfind(b")") + 1 :].split(None, 1)[:1]
    return state in ([b"Z"], [b"X"], [b"x"], [])
