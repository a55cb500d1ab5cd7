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
  where it has one), and has been seen running for STABLE seconds without
  exiting: kubelet's rule that a container must not be restarting. An exit
  reaches PLEG within milliseconds (conmon's exit file, inotify), the pod
  is synced and its container restarted under a new id, whose time starts
  again;
- a container waiting (CrashLoopBackOff, an image back-off, a start error)
  is not final;
- a pod Succeeded is done; a pod Failed is final and fails the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, MutableMapping

if TYPE_CHECKING:
    from edgelet.api.types import ContainerStatus, Pod, PodStatus

# Seconds a container's instance must have been seen running to count as not restarting. Half of
# kubelet's first retry delay, but from the container's own start, not from the end of every sync.
STABLE = 0.5


@dataclass(frozen=True)
class RunonceVerdict:
    failed: tuple[str, ...] = ()  # pods Failed (final)
    pending: tuple[str, ...] = ()  # pods not yet judged
    # Monotonic time at which a running container becomes stable (judge again then), None: only events help.
    next_check: float | None = None

    @property
    def done(self) -> bool:
        return not self.pending


def note_running(seen: MutableMapping[str, float], statuses: Iterable["PodStatus | None"], now: float) -> None:
    """Record when each running container instance (by containerID) was first seen running."""
    for status in statuses:
        for cs in (status.container_statuses or []) if status is not None else []:
            if cs.container_id and cs.state is not None and cs.state.running is not None:
                seen.setdefault(cs.container_id, now)


def _container_final(cs: "ContainerStatus | None", policy: str, seen: Mapping[str, float], now: float,
                     stable: float) -> tuple[bool, float | None]:
    """(final?, when it may become final by itself) of one regular container."""
    if cs is None or cs.state is None:
        return False, None
    term = cs.state.terminated
    if term is not None:
        return term.exit_code == 0 and policy != "Always", None
    if cs.state.running is None or not cs.ready or cs.started is False or not cs.container_id:
        return False, None
    since = seen.get(cs.container_id)
    if since is None:
        return False, None
    if now - since >= stable:
        return True, None
    return False, since + stable


def runonce_verdict(desired: Mapping[str, "Pod"], statuses: Mapping[str, "PodStatus | None"],
                    seen: Mapping[str, float], now: float, stable: float = STABLE) -> RunonceVerdict:
    """The verdict over every desired pod (uid -> pod) given its published status (uid -> status)."""
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
            final, wake = _container_final(by_name.get(c.name), policy, seen, now, stable)
            if not final:
                judged = False
                if wake is not None:
                    wakes.append(wake)
        if not judged:
            pending.append(name)
    return RunonceVerdict(tuple(failed), tuple(pending), min(wakes) if wakes and pending else None)
