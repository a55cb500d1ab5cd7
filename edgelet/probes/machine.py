"""The probe state machine of kubelet's prober worker (worker.go doProbe) and its results cache (pure).

Semantics (KUBELET-SEMANTICS "Probes"):

- Defaults: timeoutSeconds 1, periodSeconds 10, successThreshold 1,
  failureThreshold 3, initialDelaySeconds 0.
- Initial results: readiness Failure, liveness Success, startup Unknown.
- No probe runs before `initialDelaySeconds` have passed since the container
  started (kubelet truncates the elapsed time to whole seconds). Right
  after an agent start, adopted containers' first probes are spread over a
  period (`initial_jitter`).
- A probe that errors (could not be carried out) is tried again at once,
  3 tries in all; a failure is not retried.
- Liveness and readiness do not run until the container has started (its
  startup probe succeeded, or it has none); startup stops once it has.
- A result is published only after `successThreshold` successes or
  `failureThreshold` failures in a row.
- After a published liveness or startup Failure the worker holds (probes no
  more) until the container is replaced: the container is killed and a new
  instance gets fresh state, because results are keyed by container id.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from edgelet.api.types import Probe

ProbeKind = Literal["startup", "liveness", "readiness"]
MAX_PROBE_TRIES = 3  # kubelet maxProbeRetries: a probe that errors is run again at once, 3 tries in all
KINDS: tuple[ProbeKind, ...] = ("startup", "liveness", "readiness")


class Result(enum.Enum):
    SUCCESS = "Success"
    FAILURE = "Failure"
    UNKNOWN = "Unknown"


def initial_result(kind: ProbeKind) -> Result:
    """kubelet prober/worker.go newWorker: what a probe reports before its first verdict."""
    if kind == "readiness":
        return Result.FAILURE
    if kind == "liveness":
        return Result.SUCCESS
    return Result.UNKNOWN


def event_name(kind: ProbeKind) -> str:
    """kubelet's probeType strings, as they appear in event messages ("Liveness probe failed: ...")."""
    return kind.capitalize()


@dataclass(frozen=True)
class ProbeParams:
    """A probe's timing, with kubelet's defaults applied (the manifest may or may not be defaulted)."""

    kind: ProbeKind
    initial_delay: int = 0
    period: int = 10
    timeout: int = 1
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace: int | None = None

    @classmethod
    def from_probe(cls, kind: ProbeKind, probe: Probe) -> ProbeParams:
        def pos(value: int | None, default: int) -> int:
            # Validation rejects values below 1; a defaulted 0 would mean "every tick" and spin.
            return value if value is not None and value >= 1 else default

        return cls(
            kind=kind,
            initial_delay=max(0, probe.initial_delay_seconds or 0),
            period=pos(probe.period_seconds, 10),
            timeout=pos(probe.timeout_seconds, 1),
            # kubelet validation: liveness and startup must have successThreshold 1.
            success_threshold=pos(probe.success_threshold, 1) if kind == "readiness" else 1,
            failure_threshold=pos(probe.failure_threshold, 3),
            termination_grace=probe.termination_grace_period_seconds,
        )


def initial_jitter(period: float, *, agent_uptime: float, adopted: bool, rand: Callable[[], float]) -> float:
    """How long a new probe worker waits before its first probe (kubelet worker.run).

    kubelet: "If kubelet restarted the probes could be started in rapid
    succession", so a worker created less than one period after the agent
    started waits a random part of the period. **edgelet:** only for a
    container that was already running when the agent started (adopted);
    kubelet also delays the first probes of a container started in that
    first period, which only holds back its readiness. `rand` gives [0, 1).
    """
    if not adopted or agent_uptime >= period:
        return 0.0
    return rand() * period


class ProbeMachine:
    """One probe of one container instance (kubelet's worker state, minus the goroutine)."""

    def __init__(self, params: ProbeParams) -> None:
        self.params = params
        self.result = initial_result(params.kind)  # the published result
        self._last: Result | None = None
        self._run = 0  # how many times in a row `_last` came out
        self.on_hold = False

    def should_probe(self, *, now: float, started_at: float, started: bool) -> bool:
        """Whether to run the probe now; `started` is whether the container has started (startup gate)."""
        if self.on_hold:
            return False
        # kubelet: int32(time.Since(startedAt).Seconds()) < InitialDelaySeconds
        if int(now - started_at) < self.params.initial_delay:
            return False
        if self.params.kind == "startup":
            return not started
        return started

    def record(self, result: Result) -> bool:
        """Feed one probe's result; True when the published result changed."""
        if result == self._last:
            self._run += 1
        else:
            self._last, self._run = result, 1
        if (result == Result.FAILURE and self._run < self.params.failure_threshold) or (
            result == Result.SUCCESS and self._run < self.params.success_threshold
        ):
            return False
        changed = result != self.result
        self.result = result
        if self.params.kind in ("liveness", "startup") and result == Result.FAILURE:
            # kubelet: stop probing until a new container id is seen; the container will be restarted.
            self.on_hold = True
            self._run = 0
        return changed


ResultKey = tuple[ProbeKind, str, str, str]  # (kind, pod uid, container name, container id)


class ResultsCache:
    """Published results by (kind, pod uid, container name, container id): a new container id starts afresh."""

    def __init__(self) -> None:
        self._results: dict[ResultKey, Result] = {}

    def set(self, kind: ProbeKind, uid: str, name: str, cid: str, result: Result) -> bool:
        """Store a result; True when it differs from the stored one."""
        key = (kind, uid, name, cid)
        old = self._results.get(key)
        self._results[key] = result
        return old != result

    def get(self, kind: ProbeKind, uid: str, name: str, cid: str) -> Result | None:
        return self._results.get((kind, uid, name, cid))

    def remove(self, kind: ProbeKind, uid: str, name: str, cid: str) -> None:
        self._results.pop((kind, uid, name, cid), None)

    def remove_pod(self, uid: str) -> None:
        for key in [k for k in self._results if k[1] == uid]:
            del self._results[key]

    def of_pod(self, uid: str) -> dict[ResultKey, Result]:
        return {k: v for k, v in self._results.items() if k[1] == uid}
