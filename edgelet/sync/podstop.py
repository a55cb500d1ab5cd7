"""Stopping a pod's containers as kubelet's killContainer does: the Killing event, preStop within the grace
period, the termination order (sidecars after the main containers), the stop signal, then SIGKILL."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from edgelet.api.pod import container_spec, log_name
from edgelet.api.pod import spec as pod_spec
from edgelet.api.pod import uid as pod_uid
from edgelet.events import EventRecorder, pod_ref
from edgelet.plan.actions import is_pod_termination
from edgelet.plan.termination import remaining_grace, stop_signal, termination_order
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.container import Runtime
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus
    from edgelet.images.store import ImageStore
    from edgelet.util.clock import Clock

log = get_logger(__name__)

DEFAULT_GRACE = 30.0  # seconds, when the pod gives no terminationGracePeriodSeconds (kubelet's default)


class ContainerStopper:
    """Stops containers of a pod (or an orphan's, without its pod) for the syncer."""

    def __init__(
        self,
        runtime: Runtime,
        images: ImageStore,
        clock: Clock,
        events: EventRecorder,
        *,
        probe_grace: Callable[[str, str], float | None],
        find: Callable[[str, str | None], Awaitable[ContainerRecord | None]],
    ) -> None:
        self._runtime = runtime
        self._images = images
        self._clock = clock
        self._events = events
        # The grace of a container's kill when a liveness or startup probe failed it and gives one; else None.
        self._probe_grace = probe_grace
        # The container as read now (the syncer's shared relist of its pod, else a list of every pod).
        self._find = find

    async def stop(
        self,
        pod: Pod | None,
        cid: str,
        why: str,
        grace: float | None = None,
        turn: Sequence[asyncio.Event] = (),
        event_message: str | None = None,
    ) -> None:
        """kubelet killContainer: event, (preStop), wait for this container's turn, stop signal, SIGKILL.

        `event_message` is the Killing event's message; without one it is kubelet's
        "Stopping container NAME". `turn` is what must finish before the stop signal
        (the termination ordering's waitForTurn); the wait is bounded by, and taken
        from, the grace period.
        """
        if pod is not None and grace is None:
            # kubelet setTerminationGracePeriod: a liveness/startup kill uses the probe's grace when it has one.
            grace = self._probe_grace(pod_uid(pod), cid)
        record = await self._find(cid, pod_uid(pod) if pod is not None else None)
        if grace is None:
            # Without the pod (an orphan), the grace period it had, kept on the container.
            grace = (
                record.grace_period
                if pod is None and record is not None and record.grace_period is not None
                else _grace(pod)
            )
        log.info("Killing container", pod=log_name(pod), container=cid[:12], reason=why, grace=grace)
        if record is not None and pod is not None:
            ref = pod_ref(pod, record.name, init=record.container_type == "init")
            self._events.normal(ref, "Killing", event_message or f"Stopping container {record.name}")
            spec = container_spec(pod, record.name)
            if (
                spec is not None
                and spec.lifecycle is not None
                and spec.lifecycle.pre_stop is not None
                and record.state == "running"
                and grace > 0
            ):
                began = self._clock.monotonic()
                await self._pre_stop(pod, spec, record, ref, grace)
                # kubelet: the hook's time (whole seconds) comes out of the grace period.
                grace = remaining_grace(grace, self._clock.monotonic() - began)
        if turn and grace > 0:
            began = self._clock.monotonic()
            try:
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in turn)), timeout=grace)
            except TimeoutError:
                log.info(
                    "Stopping container before its turn: grace period spent", pod=log_name(pod), container=cid[:12]
                )
            grace = remaining_grace(grace, self._clock.monotonic() - began)
        # The runtime gives at least 2 s between the stop signal and SIGKILL (kubelet minimumGracePeriodInSeconds).
        await self._runtime.stop_container(cid, grace, self._stop_signal(pod, record))

    async def _pre_stop(self, pod: Pod, spec: Container, record: ContainerRecord, ref, grace: float) -> None:
        """kubelet executePreStopHook: run preStop for at most `grace` seconds; a failure is an event, not an error."""
        from edgelet.probes.errors import HookError
        from edgelet.probes.hooks import run_handler
        from edgelet.probes.target import target_for

        rt = await self._runtime.pod_status(record.pod_uid)
        sandbox = next((s for s in rt.sandboxes if s.id == record.sandbox_id), None)
        target = target_for(
            record.id,
            spec,
            sandbox.netns_path() if sandbox is not None else None,
            sandbox.host_network if sandbox is not None else bool(pod_spec(pod).host_network),
        )
        assert spec.lifecycle is not None and spec.lifecycle.pre_stop is not None
        try:
            await asyncio.wait_for(
                run_handler(
                    spec.lifecycle.pre_stop,
                    runtime=self._runtime,
                    target=target,
                    pod=pod,
                    container=spec,
                    sleep=self._clock.sleep,
                ),
                timeout=grace,
            )
        except HookError as exc:
            log.warning("PreStop hook failed", pod=log_name(pod), container=spec.name, err=str(exc))
            self._events.warning(ref, "FailedPreStopHook", str(exc))
        except TimeoutError:
            log.info("PreStop hook not completed in grace period", pod=log_name(pod), container=spec.name, grace=grace)

    async def stop_ordered(
        self,
        pod: Pod | None,
        rt: PodRuntimeStatus,
        kills: Mapping[str, str],
        grace: float | None = None,
        *,
        say_reason: bool = False,
    ) -> None:
        """Stop `kills` (id -> reason) in parallel, sidecars after main containers in reverse order.

        `say_reason`: the Killing events carry the reasons (kubelet SyncPod step 3 passes
        computePodActions' message) but those of a finished pod's termination; else
        kubelet's "Stopping container NAME".
        """
        order = termination_order(pod, [c for c in rt.containers if c.id in kills])
        done = {cid: asyncio.Event() for cid in kills}

        async def one(cid: str) -> None:
            try:
                turn = [done[d] for d in order.get(cid, ()) if d in done]
                say = say_reason and not is_pod_termination(kills[cid])
                await self.stop(pod, cid, kills[cid], grace, turn=turn, event_message=kills[cid] if say else None)
            finally:
                done[cid].set()

        await asyncio.gather(*(one(cid) for cid in kills))

    def _stop_signal(self, pod: Pod | None, record: ContainerRecord | None) -> str:
        """The container's lifecycle.stopSignal, else the image's STOPSIGNAL, else SIGTERM."""
        image_signal = ""
        if record is not None and record.image:
            rec = self._images.get(record.image)
            if rec is not None and rec.config.stop_signal:
                image_signal = rec.config.stop_signal
        return stop_signal(container_spec(pod, record.name) if record is not None else None, image_signal)

    async def kill_all(self, pod: Pod | None, rt: PodRuntimeStatus, reason: str, grace: float | None = None) -> None:
        """Stop every container in parallel, then the sandboxes (kubelet killPodWithSyncResult).

        Exited containers are kept: the newest of each is the container's lastState and
        carries its restart count and back-off across the new sandbox; older ones go
        through `containers_to_remove` like any other dead instance.
        """
        running = {c.id: reason for c in rt.containers if c.state in ("running", "created")}
        await self.stop_ordered(pod, rt, running, grace)
        for s in rt.sandboxes:
            if s.state in ("running", "created"):
                await self._runtime.stop_sandbox(s.id)


def _grace(pod: Pod | None) -> float:
    grace = pod.spec.termination_grace_period_seconds if pod is not None and pod.spec is not None else None
    return DEFAULT_GRACE if grace is None else float(grace)
