"""SyncPod and TerminatePod: apply one pod's computed actions to the images and the runtime.

The decisions are made by the pure `edgelet.plan.compute_pod_actions`; this
module only carries them out, in kubelet's order (kuberuntime_manager.go
SyncPod):

  1. Compute the actions from the desired pod and the runtime's actual state.
  2. Kill the pod's containers and sandbox if the sandbox has to be recreated.
  3. Kill the containers the actions name (spec changed, not in the pod).
  4. Create the sandbox if needed.
  5. Start the next init container, if any.
  6. Start the regular containers that must run (image first, then create, then start).
  7. Remove exited instances older than the newest of each container.
  8. Publish the pod's status.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from edgelet.events import EventRecorder, pod_ref
from edgelet.plan import compute_pod_actions
from edgelet.sync.workers import SyncResult
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.images.store import ImageStore
    from edgelet.images.types import ImageRecord
    from edgelet.runtime import Runtime
    from edgelet.runtime.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
    from edgelet.util.backoff import Backoff
    from edgelet.util.clock import Clock

log = get_logger(__name__)

DEFAULT_GRACE = 30.0


class ImageUnavailable(Exception):
    """The container's image cannot be had now; `reason` is the kubelet waiting reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def resolve_image(store: "ImageStore", container: "Container") -> "ImageRecord":
    """The image a container runs, honouring imagePullPolicy against the local store.

    edgelet: registry pulls are not built yet, so `Always` and `IfNotPresent`
    both use the local store; a missing image is ErrImagePull (kubelet would
    pull it) and `Never` gives ErrImageNeverPull exactly as kubelet does.
    """
    ref = container.image or ""
    record = store.get(ref)
    if record is not None:
        return record
    if container.image_pull_policy == "Never":
        raise ImageUnavailable(
            "ErrImageNeverPull", f'Container image "{ref}" is not present with pull policy of Never'
        )
    raise ImageUnavailable(
        "ErrImagePull",
        f'Failed to pull image "{ref}": not present in the local store and registry pulls are not '
        "available; import it with `edgelet images import` or the import directory",
    )


@dataclass
class PodSyncState:
    """What the syncer remembers of a pod between syncs (lost on restart, like kubelet's caches)."""

    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    pod_failed: bool = False
    # Probe verdicts by container name, filled by the probe manager: a container
    # without a readiness (startup) probe is absent and counts as ready (started)
    # once running, as kubelet's status manager has it.
    ready: dict[str, bool] = field(default_factory=dict)
    started: dict[str, bool] = field(default_factory=dict)


class Syncer:
    """Implements `edgelet.sync.workers.PodSyncer` over a Runtime and an ImageStore."""

    def __init__(
        self,
        runtime: "Runtime",
        images: "ImageStore",
        backoff: "Backoff",
        clock: "Clock",
        publish: Callable[["Pod", "PodRuntimeStatus", PodSyncState], None],
        forget: Callable[[str], None] = lambda uid: None,
        events: EventRecorder | None = None,
    ) -> None:
        self._runtime = runtime
        self._images = images
        self._backoff = backoff
        self._clock = clock
        self._publish = publish
        self._forget = forget
        self._events = events if events is not None else EventRecorder(clock)
        self._state: dict[str, PodSyncState] = {}

    def state(self, uid: str) -> PodSyncState:
        return self._state.setdefault(uid, PodSyncState())

    async def sync_pod(self, pod: "Pod") -> SyncResult:
        uid = pod.metadata.uid
        st = self.state(uid)
        now = self._clock.monotonic()

        # 1. Compute.
        rt = await self._runtime.pod_status(uid)
        actions = compute_pod_actions(pod, rt, self._backoff, now)
        st.waiting = dict(actions.waiting)
        st.pod_failed = actions.pod_failed
        self._record_backoffs(pod, st)

        # 2. Kill the whole pod when its sandbox must be recreated.
        if actions.kill_pod:
            await self._kill_all(pod, rt, reason="sandbox changed")
            rt = await self._runtime.pod_status(uid)

        # 3. Kill what must not run any more.
        if actions.containers_to_kill:
            await asyncio.gather(
                *(self._stop(pod, cid, why) for cid, why in actions.containers_to_kill.items())
            )

        # 4. Sandbox.
        sandbox = _live_sandbox(rt, actions.sandbox_id)
        if actions.create_sandbox:
            log.info("Creating pod sandbox", pod=_full(pod), attempt=actions.sandbox_attempt)
            try:
                sandbox = await self._runtime.run_sandbox(pod, actions.sandbox_attempt)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("Failed to create pod sandbox", exc, pod=_full(pod))
                self._events.warning(pod_ref(pod), "FailedCreatePodSandBox", f"Failed to create pod sandbox: {exc}")
                for c in pod.spec.containers:
                    st.waiting[c.name] = ("ContainerCreating", f"failed to create pod sandbox: {exc}")
                self._publish(pod, await self._runtime.pod_status(uid), st)
                return SyncResult(requeue_after=self._retry_delay(uid, "sandbox", now))

        # 5 and 6. Init container, then regular containers.
        to_start = []
        if actions.next_init_container is not None:
            to_start.append(actions.next_init_container)
        to_start.extend(actions.containers_to_start)
        if to_start and sandbox is None:
            log.warning("No running sandbox to start containers in", pod=_full(pod))
        elif to_start:
            specs = {c.name: c for c in [*(pod.spec.init_containers or []), *pod.spec.containers]}
            for item in to_start:
                container = specs[item.name]
                reason = await self._start_container(pod, container, sandbox, item.attempt, item.container_type)
                if reason is not None:
                    st.waiting[item.name] = reason

        # A pod that will never run anything again keeps its exited containers (its final
        # status) but not its pause process.
        if actions.pod_finished:
            now_rt = await self._runtime.pod_status(uid)
            if not any(c.state in ("running", "created") for c in now_rt.containers):
                for s in now_rt.sandboxes:
                    if s.state in ("running", "created"):
                        await self._runtime.stop_sandbox(s.id)

        # 7. Garbage: older exited instances, and dead sandboxes once a newer one runs.
        garbage = list(actions.containers_to_remove)
        if sandbox is not None:
            garbage += [s.id for s in rt.sandboxes if s.id != sandbox.id and s.state not in ("running", "created")
                        and not any(c.sandbox_id == s.id for c in rt.containers if c.id not in garbage)]
        for cid in garbage:
            try:
                await self._runtime.remove_container(cid)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("Failed to remove old container", pod=_full(pod), container=cid, err=str(exc))

        # 8. Status.
        rt = await self._runtime.pod_status(uid)
        self._publish(pod, rt, st)
        return SyncResult(requeue_after=self._next_wake(pod, st, now))

    async def _start_container(
        self, pod: "Pod", container: "Container", sandbox: "SandboxRecord", attempt: int, ctype: str
    ) -> tuple[str, str] | None:
        """Image, create, start; returns a waiting (reason, message) on failure."""
        uid = pod.metadata.uid
        key = (uid, container.name)
        try:
            image = await asyncio.to_thread(resolve_image, self._images, container)
        except ImageUnavailable as exc:
            log.warning("Image not available", pod=_full(pod), container=container.name, reason=exc.reason, err=exc.message)
            ref = pod_ref(pod, container.name, init=ctype != "regular")
            self._events.warning(ref, exc.reason if exc.reason == "ErrImageNeverPull" else "Failed", exc.message)
            self._backoff.next((uid, "image:" + container.name), self._clock.monotonic())
            return (exc.reason, exc.message)
        ref = pod_ref(pod, container.name, init=ctype != "regular")
        self._events.normal(ref, "Pulled", f'Container image "{container.image}" already present on machine')
        if attempt > 0:
            # The restart itself counts as a failure for CrashLoopBackOff (kubelet doBackOff).
            self._backoff.next(key, self._clock.monotonic())
        try:
            cid = await self._runtime.create_container(pod, container, sandbox, image, attempt, ctype)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("Failed to create container", exc, pod=_full(pod), container=container.name)
            self._backoff.next(key, self._clock.monotonic())
            reason = "CreateContainerConfigError" if type(exc).__name__ == "SpecError" else "CreateContainerError"
            self._events.warning(ref, "Failed", f"Error: {exc}")
            return (reason, str(exc))
        self._events.normal(ref, "Created", f"Created container: {container.name}")
        try:
            await self._runtime.start_container(cid)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("Failed to start container", exc, pod=_full(pod), container=container.name)
            self._backoff.next(key, self._clock.monotonic())
            self._events.warning(ref, "Failed", f"Error: {exc}")
            return ("RunContainerError", str(exc))
        log.info("Started container", pod=_full(pod), container=container.name, id=cid[:12], attempt=attempt)
        self._events.normal(ref, "Started", f"Started container: {container.name}")
        return None

    async def _stop(self, pod: "Pod | None", cid: str, why: str, grace: float | None = None) -> None:
        if grace is None:
            grace = _grace(pod)
        record = await self._find(cid)
        log.info("Killing container", pod=_full(pod), container=cid[:12], reason=why, grace=grace)
        if record is not None and pod is not None:
            self._events.normal(pod_ref(pod, record.name, init=record.container_type == "init"), "Killing",
                                f"Stopping container {record.name}")
        await self._runtime.stop_container(cid, grace, self._stop_signal(record))

    async def _find(self, cid: str) -> "ContainerRecord | None":
        for rt in (await self._runtime.list_pods()).values():
            for c in rt.containers:
                if c.id == cid:
                    return c
        return None

    def _stop_signal(self, record: "ContainerRecord | None") -> str:
        """The image's STOPSIGNAL, SIGTERM when it has none."""
        if record is not None and record.image:
            rec = self._images.get(record.image)
            if rec is not None and rec.config.stop_signal:
                return rec.config.stop_signal
        return "SIGTERM"

    async def _kill_all(self, pod: "Pod | None", rt: "PodRuntimeStatus", reason: str) -> None:
        """Stop every container in parallel, then the sandboxes (kubelet killPodWithSyncResult).

        Exited containers are kept: the newest of each is the container's lastState and
        carries its restart count and back-off across the new sandbox; older ones go
        through `containers_to_remove` like any other dead instance.
        """
        running = [c for c in rt.containers if c.state in ("running", "created")]
        await asyncio.gather(*(self._stop(pod, c.id, reason) for c in running))
        for s in rt.sandboxes:
            if s.state in ("running", "created"):
                await self._runtime.stop_sandbox(s.id)

    async def terminate_pod(self, uid: str, pod: "Pod | None") -> None:
        """Stop everything with the pod's grace period, then remove all the pod left behind."""
        rt = await self._runtime.pod_status(uid)
        name = _full(pod) or f"{rt.namespace}/{rt.name}"
        log.info("Terminating pod", pod=name, uid=uid)
        running = [c for c in rt.containers if c.state in ("running", "created")]
        await asyncio.gather(*(self._stop(pod, c.id, "pod removed") for c in running))
        for s in rt.sandboxes:
            if s.state in ("running", "created"):
                await self._runtime.stop_sandbox(s.id)
        await self._runtime.remove_pod(uid)
        self._state.pop(uid, None)
        self._backoff_forget(uid)
        self._forget(uid)
        log.info("Pod terminated", pod=name, uid=uid)

    def _record_backoffs(self, pod: "Pod", st: PodSyncState) -> None:
        """A BackOff event for each container held back, as kubelet emits one per sync that hits it."""
        init_names = {c.name for c in pod.spec.init_containers or []}
        for name, (reason, _) in st.waiting.items():
            ref = pod_ref(pod, name, init=name in init_names)
            if reason == "CrashLoopBackOff":
                self._events.warning(ref, "BackOff", f"Back-off restarting failed container {name} in pod "
                                                     f"{pod.metadata.name}_{pod.metadata.namespace}({pod.metadata.uid})")
            elif reason == "ImagePullBackOff":
                self._events.normal(ref, "BackOff", f'Back-off pulling image "{_image_of(pod, name)}"')

    def _backoff_forget(self, uid: str) -> None:
        forget = getattr(self._backoff, "forget_pod", None)
        if forget is not None:
            forget(uid)

    def _retry_delay(self, uid: str, what: str, now: float) -> float:
        return self._backoff.next((uid, what), now)

    def _next_wake(self, pod: "Pod", st: PodSyncState, now: float) -> float | None:
        """When a waiting container's back-off ends, so the loop syncs the pod again then."""
        delays = []
        for name, (reason, _) in st.waiting.items():
            for key in ((pod.metadata.uid, name), (pod.metadata.uid, "image:" + name)):
                rem = self._backoff.remaining(key, now)
                if rem > 0:
                    delays.append(rem)
        if delays:
            return min(delays) + 0.05
        return 1.0 if st.waiting else None


def _live_sandbox(rt: "PodRuntimeStatus", sandbox_id: str | None) -> "SandboxRecord | None":
    for s in rt.sandboxes:
        if s.state == "running" and (sandbox_id is None or s.id == sandbox_id):
            return s
    return None


def _grace(pod: "Pod | None") -> float:
    if pod is None or pod.spec is None or pod.spec.termination_grace_period_seconds is None:
        return DEFAULT_GRACE
    return float(pod.spec.termination_grace_period_seconds)


def _full(pod: "Pod | None") -> str | None:
    if pod is None or pod.metadata is None:
        return None
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def _image_of(pod: "Pod", name: str) -> str:
    for c in [*(pod.spec.init_containers or []), *pod.spec.containers]:
        if c.name == name:
            return c.image or ""
    return ""
