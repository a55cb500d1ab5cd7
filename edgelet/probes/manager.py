"""The probe manager: one asyncio task per probe of each running container, their verdicts, and resync requests.

kubelet prober_manager.go + worker.go. The syncer calls `sync_pod` after
every sync with what the runtime holds; workers start for the probes of each
running container (regular containers and sidecars) and stop when that
container instance is gone, so a restarted container begins with fresh
results (readiness false, liveness true, startup unknown). Right after an
agent start, an adopted container's first probe waits a random part of the
period (`initial_jitter`); a probe that errors is tried 3 times in a row. A
worker feeds its `ProbeMachine`, records an `Unhealthy` event for every
failed run and a `ProbeWarning` for a success with a warning, as kubelet does, and when the published result flips it updates the pod's
`ready`/`started` maps and asks for a resync (`on_change(uid)`): a liveness
or startup Failure then shows up in `failures(uid)`, which the syncer hands
to `compute_pod_actions` so the container is killed and restarted.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from edgelet.api.pod import meta
from edgelet.api.pod import spec as pod_spec
from edgelet.api.pod import uid as pod_uid
from edgelet.events import EventRecorder, pod_ref
from edgelet.probes.machine import (
    KINDS,
    MAX_PROBE_TRIES,
    ProbeKind,
    ProbeMachine,
    ProbeParams,
    Result,
    ResultsCache,
    event_name,
    initial_jitter,
)
from edgelet.probes.probers import Executor, Outcome, ProbeTarget, run_probe
from edgelet.probes.target import target_for
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod, Probe
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus
    from edgelet.util.clock import Clock

log = get_logger(__name__)

WorkerKey = tuple[str, str, ProbeKind]  # (pod uid, container name, kind)


class ProbeVerdicts(Protocol):
    """Where verdicts go (edgelet.sync.syncpod.PodSyncState): container name -> ready / started."""

    ready: dict[str, bool]
    started: dict[str, bool]


@dataclass
class _Worker:
    cid: str
    machine: ProbeMachine
    task: asyncio.Task | None = None


def probes_of(container: Container) -> list[tuple[ProbeKind, Probe]]:
    found = zip(KINDS, (container.startup_probe, container.liveness_probe, container.readiness_probe))
    return [(kind, probe) for kind, probe in found if probe is not None]


class ProbeManager:
    """Runs the probes; `sync_pod`/`remove_pod` are called from the pod workers, `run` under the TaskGroup."""

    def __init__(
        self,
        runtime: Executor,
        clock: Clock,
        events: EventRecorder,
        *,
        state_of: Callable[[str], ProbeVerdicts] | None = None,
        on_change: Callable[[str], None] | None = None,
        runner: Callable[[Probe, ProbeTarget, Executor], Awaitable[Outcome]] = run_probe,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._runtime = runtime
        self._clock = clock
        self._events = events
        self.state_of = state_of
        self.on_change = on_change or (lambda uid: None)
        self._runner = runner
        self._rand = rand
        self._started_at = clock.now()  # wall time, as containers' startedAt: tells adopted containers apart
        self.results = ResultsCache()
        self._workers: dict[WorkerKey, _Worker] = {}

    # ---------------------------------------------------------------- called by the syncer

    def sync_pod(self, pod: Pod, rt: PodRuntimeStatus) -> None:
        """Start the workers the pod's running containers need, stop those whose container is gone."""
        uid = pod_uid(pod)
        specs = {c.name: c for c in pod_spec(pod).init_containers or [] if c.restart_policy == "Always"}
        specs.update({c.name: c for c in pod_spec(pod).containers or []})
        sandboxes = {s.id: s for s in rt.sandboxes}
        wanted: dict[WorkerKey, tuple[ContainerRecord, Probe, ProbeTarget]] = {}
        for name, container in specs.items():
            rec = rt.latest(name)
            if rec is None or rec.state != "running":
                continue
            sb = sandboxes.get(rec.sandbox_id)
            host_network = sb.host_network if sb is not None else bool(pod_spec(pod).host_network)
            target = target_for(rec.id, container, sb.netns_path() if sb is not None else None, host_network)
            for kind, probe in probes_of(container):
                wanted[(uid, name, kind)] = (rec, probe, target)
        for key, worker in list(self._workers.items()):
            if key[0] == uid and (key not in wanted or wanted[key][0].id != worker.cid):
                self._stop_worker(key)
        for key, (rec, probe, target) in wanted.items():
            if key not in self._workers:
                self._start_worker(pod, key, rec, probe, target, has_startup=specs[key[1]].startup_probe is not None)

    def remove_pod(self, uid: str) -> None:
        """The pod is terminating: no more probes (kubelet stops liveness and startup on deletion)."""
        for key in [k for k in self._workers if k[0] == uid]:
            self._stop_worker(key)
        self.results.remove_pod(uid)

    def failures(self, uid: str) -> dict[str, str]:
        """Container id -> "liveness" or "startup" for running containers whose probe has failed."""
        return {
            w.cid: key[2]
            for key, w in self._workers.items()
            if key[0] == uid and key[2] in ("liveness", "startup") and w.machine.result == Result.FAILURE
        }

    def kill_grace(self, uid: str, cid: str) -> float | None:
        """The failed probe's terminationGracePeriodSeconds, which kubelet uses instead of the pod's."""
        for key, w in self._workers.items():
            if (
                key[0] == uid
                and w.cid == cid
                and key[2] in ("liveness", "startup")
                and w.machine.result == Result.FAILURE
                and w.machine.params.termination_grace is not None
            ):
                return float(w.machine.params.termination_grace)
        return None

    async def run(self) -> None:
        """Wait; on cancellation (shutdown) stop every worker. Containers are not touched."""
        try:
            await asyncio.Event().wait()
        finally:
            tasks = [w.task for w in self._workers.values() if w.task is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._workers.clear()

    # ---------------------------------------------------------------- workers

    def _start_worker(
        self, pod: Pod, key: WorkerKey, rec: ContainerRecord, probe: Probe, target: ProbeTarget, *, has_startup: bool
    ) -> None:
        uid, name, kind = key
        machine = ProbeMachine(ProbeParams.from_probe(kind, probe))
        worker = _Worker(cid=rec.id, machine=machine)
        self._workers[key] = worker
        self.results.set(kind, uid, name, rec.id, machine.result)
        self._apply(uid, name, kind, machine.result)
        worker.task = asyncio.get_running_loop().create_task(
            self._run_worker(pod, key, worker, rec, probe, target, has_startup), name=f"probe-{kind}-{name}-{uid[:8]}"
        )

    def _stop_worker(self, key: WorkerKey) -> None:
        worker = self._workers.pop(key)
        if worker.task is not None:
            worker.task.cancel()
        uid, name, kind = key
        self.results.remove(kind, uid, name, worker.cid)
        st = self.state_of(uid) if self.state_of is not None else None
        if st is not None:
            (st.ready if kind == "readiness" else st.started if kind == "startup" else {}).pop(name, None)

    def _apply(self, uid: str, name: str, kind: ProbeKind, result: Result) -> None:
        st = self.state_of(uid) if self.state_of is not None else None
        if st is None:
            return
        if kind == "readiness":
            st.ready[name] = result == Result.SUCCESS
        elif kind == "startup":
            st.started[name] = result == Result.SUCCESS

    def _started(self, uid: str, name: str, cid: str, has_startup: bool) -> bool:
        """kubelet's containerStatus.started: its startup probe succeeded, or it has none."""
        return not has_startup or self.results.get("startup", uid, name, cid) == Result.SUCCESS

    async def _run_worker(
        self,
        pod: Pod,
        key: WorkerKey,
        worker: _Worker,
        rec: ContainerRecord,
        probe: Probe,
        target: ProbeTarget,
        has_startup: bool,
    ) -> None:
        uid, name, kind = key
        machine = worker.machine
        started_at = rec.started_at if rec.started_at is not None else rec.created_at
        ref = pod_ref(pod, name, init=rec.container_type == "init")
        period = float(machine.params.period)
        jitter = initial_jitter(
            machine.params.period,
            agent_uptime=self._clock.now() - self._started_at,
            adopted=started_at < self._started_at,
            rand=self._rand,
        )
        if jitter > 0:
            await self._clock.sleep(jitter)
        while True:
            began = self._clock.monotonic()
            if machine.should_probe(
                now=self._clock.now(), started_at=started_at, started=self._started(uid, name, rec.id, has_startup)
            ):
                outcome = await self._probe(probe, target)
                try:
                    self._judge(pod, key, worker, outcome, ref)
                except Exception as exc:  # a probe loop never dies: log, and the next period tries again
                    log.error("Probe result handling failed", exc, container=name, probe=kind)
            await self._clock.sleep(max(0.0, period - (self._clock.monotonic() - began)))

    async def _probe(self, probe: Probe, target: ProbeTarget) -> Outcome:
        """kubelet runProbeWithRetries: a probe that errored (not one that failed) is run again at once, 3 tries in all."""
        outcome = Outcome(Result.UNKNOWN, "", error=True)
        for _ in range(MAX_PROBE_TRIES):
            try:
                outcome = await self._runner(probe, target, self._runtime)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a probe loop never dies; the result is thrown away like a prober error
                log.error("Probe crashed", exc, container=target.container_id[:12])
                outcome = Outcome(Result.UNKNOWN, str(exc), error=True)
            if not outcome.error:
                break
        return outcome

    def _judge(self, pod: Pod, key: WorkerKey, worker: _Worker, outcome: Outcome, ref) -> None:
        uid, name, kind = key
        if outcome.error:
            # kubelet prober.probe: the error is reported and the result thrown away.
            self._events.warning(
                ref, "Unhealthy", f"{event_name(kind)} probe errored and resulted in unknown state: {outcome.message}"
            )
            return
        if outcome.warning:
            # kubelet probe.Warning (an httpGet redirect it did not follow): a success, with a warning.
            self._events.warning(ref, "ProbeWarning", f"{event_name(kind)} probe warning: {outcome.message}")
        elif outcome.result != Result.SUCCESS:
            self._events.warning(ref, "Unhealthy", f"{event_name(kind)} probe failed: {outcome.message}")
        if worker.machine.record(outcome.result):
            result = worker.machine.result
            self.results.set(kind, uid, name, worker.cid, result)
            self._apply(uid, name, kind, result)
            log.info(
                "Probe result changed",
                pod=f"{meta(pod).namespace}/{meta(pod).name}",
                container=name,
                probe=kind,
                result=result.value,
            )
            self.on_change(uid)
