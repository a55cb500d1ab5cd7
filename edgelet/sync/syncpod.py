"""SyncPod and TerminatePod: apply one pod's computed actions to the images and the runtime.

The decisions are made by the pure `edgelet.plan.compute_pod_actions`; this
module only carries them out, in kubelet's order (kuberuntime_manager.go
SyncPod):

  1. Compute the actions from the desired pod and the runtime's actual state.
  2. Kill the pod's containers and sandbox if the sandbox has to be recreated.
  3. Kill the containers the actions name (spec changed, not in the pod).
  4. Create the sandbox if needed; its containers' images and bundles, and the first one's create, are made
     while it is set up (`sync.podstart`).
  5. Start the next init container, if any.
  6. Start the regular containers that must run (image first, then create, then start).
  7. Remove exited instances other than each container's current one and its lastState.
  8. Publish the pod's status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from edgelet.api.pod import log_name, meta
from edgelet.api.pod import spec as pod_spec
from edgelet.api.pod import uid as pod_uid
from edgelet.container.errors import RuntimeError_
from edgelet.events import EventRecorder, InvolvedObject, pod_ref
from edgelet.images.manager import ImageUnavailable
from edgelet.plan import compute_pod_actions
from edgelet.status.syncstate import PodSyncState
from edgelet.sync.podstart import NO_HEAD_START, HeadStart, SandboxStart
from edgelet.sync.podstop import ContainerStopper
from edgelet.sync.workers import SyncResult
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.cgroups.controllers import Admission
    from edgelet.container import Runtime
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
    from edgelet.images.manager import ImageManager
    from edgelet.images.store import ImageStore
    from edgelet.images.types import ImageRecord
    from edgelet.plan import ContainerToStart, PodActions
    from edgelet.probes.manager import ProbeManager
    from edgelet.util.backoff import Backoff
    from edgelet.util.clock import Clock

log = get_logger(__name__)

ERR_IMAGE_PULL_RESYNC = 1.0
# A release (or removal) of an exited container that failed is tried again this soon, not at the next event:
# a settled pod may see none for a long time, and its runc state and mount would stay meanwhile.
CLEANUP_RETRY = 5.0
# Waiting reasons of a start that failed before runc was asked for anything.
_NO_CONTAINER_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})


async def resolve_image(
    images: ImageStore | ImageManager,
    pod: Pod,
    container: Container,
    *,
    events: EventRecorder,
    backoff: Backoff,
    clock: Clock,
    init: bool = False,
) -> ImageRecord:
    """The image a container runs, honouring imagePullPolicy, pulling and backing off as kubelet does.

    `images` is the agent's ImageManager; a bare store (tests, a Syncer built without a puller)
    gets a manager without a puller, so a missing image is ErrImagePull with a clear message.
    Raises ImageUnavailable(reason, message); the events are recorded by the manager.
    """
    from edgelet.images.manager import ImageManager

    manager = (
        images
        if isinstance(images, ImageManager)
        else ImageManager(images, None, events=events, backoff=backoff, clock=clock)
    )  # type: ignore[arg-type]
    return await manager.ensure(pod, container, init=init)


class Syncer:
    """Implements `edgelet.sync.workers.PodSyncer` over a Runtime and an ImageStore."""

    def __init__(
        self,
        runtime: Runtime,
        images: ImageStore,
        backoff: Backoff,
        clock: Clock,
        publish: Callable[[Pod, PodRuntimeStatus, PodSyncState], None],
        forget: Callable[[str], None] = lambda uid: None,
        events: EventRecorder | None = None,
        probes: ProbeManager | None = None,
        admit: Callable[[Pod], Admission | None] | None = None,
        newer_than: Callable[[str, float], PodRuntimeStatus | None] | None = None,
        relisted_after: Callable[[str, float], Awaitable[PodRuntimeStatus]] | None = None,
    ) -> None:
        self._runtime = runtime
        # PLEG's last relist of a pod if it is newer than a time (Pleg.status_newer_than); None: always list.
        self._newer_than = newer_than
        # A pod as a relist that asked runc after a time saw it, waiting for one shared with the other syncs
        # (Pleg.pods_newer_than): the after-states. None: the runtime's pod_status.
        self._relisted_after = relisted_after
        # Whether the pod's limits can be applied on this host (the runtime's cgroup controllers); None: always.
        self._admit = admit
        self._probes = probes  # runs the probes; its liveness/startup failures restart containers
        self._images = images
        self._backoff = backoff
        self._clock = clock
        self._publish = publish
        self._forget = forget
        self._events = events if events is not None else EventRecorder(clock)
        self._state: dict[str, PodSyncState] = {}
        self._stopper = ContainerStopper(
            runtime, images, clock, self._events, probe_grace=self._probe_grace, find=self._find
        )

    def state(self, uid: str) -> PodSyncState:
        return self._state.setdefault(uid, PodSyncState())

    async def sync_pod(self, pod: Pod) -> SyncResult:
        st = self.state(pod_uid(pod))
        st.settled_at = None
        try:
            result = await self._sync_pod(pod, st)
        except BaseException:
            # Failed or cancelled, perhaps halfway through its changes: they end here.
            st.synced_at = self._clock.monotonic()
            raise
        st.synced_at = next_synced_at(st.settled_at, self._clock.monotonic())
        return result

    async def _sync_pod(self, pod: Pod, st: PodSyncState) -> SyncResult:
        """kubelet's SyncPod in the numbered steps of the module docstring; a pod refused or evicted is held stopped."""
        uid = pod_uid(pod)
        now = self._clock.monotonic()
        if not st.host_access_warned:
            self._warn_host_access(pod)
            st.host_access_warned = True
        held = self._why_held(pod, st)
        if held is not None:
            why, grace = held
            return await self._sync_held(pod, st, why, grace)

        # 1. Compute, from PLEG's last relist when it asked runc after this pod's last sync ended (a sync
        # its events started), else from a `runc list` of its own.
        rt = await self._before_state(uid, st)
        actions = self._compute(pod, rt, st, now)

        # 2. Kill the whole pod when its sandbox must be recreated.
        # (A new pod's kill stops nothing, and its state is still the one read in step 1: no relist to wait for.)
        if actions.kill_pod and _live(rt):
            await self._stopper.kill_all(pod, rt, reason="sandbox changed")
            rt, _ = await self._state_after(uid)

        # 3. Kill what must not run any more. kubelet's Killing event carries computePodActions' message
        # ("Container app definition changed, will be restarted"), except for a pod that finished for good,
        # which kubelet's pod worker terminates like a deleted one ("Stopping container side").
        if actions.containers_to_kill:
            await self._stopper.stop_ordered(pod, rt, actions.containers_to_kill, say_reason=True)

        # 4. Sandbox; while it is set up (namespaces, the CNI network), the containers it will run get their
        # images, bundles and rootfs mounts: what does not depend on the order overlaps (sync.podstart).
        to_start = [
            *([actions.next_init_container] if actions.next_init_container is not None else []),
            *actions.containers_to_start,
        ]
        start = SandboxStart(
            self._runtime, pod, to_start, lambda container, init: self._resolve_image(pod, container, init)
        )
        sandbox = _live_sandbox(rt, actions.sandbox_id)
        try:
            if actions.create_sandbox:
                log.info("Creating pod sandbox", pod=log_name(pod), attempt=actions.sandbox_attempt)
                try:
                    sandbox = await start.create(actions.sandbox_attempt)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    return await self._sandbox_failed(pod, st, exc, now)
            # 5 and 6. Init container, then regular containers.
            started = await self._start_containers(pod, st, sandbox, to_start, start)
        finally:
            await start.discard()  # what a failed sandbox or a sync cut short made ahead does not stay

        # ConfigMap and Secret volumes follow their objects while the pod runs (env and subPath do not).
        if sandbox is not None and not actions.create_sandbox:
            await self._runtime.refresh_config_volumes(pod)

        # A pod that will never run anything again keeps its exited containers (its final
        # status) but not its pause process.
        if actions.pod_finished:
            await self._stop_finished_sandbox(uid)

        # 7. Garbage: older exited instances, and dead sandboxes once a newer one runs.
        garbage, cleanup_failed = await self._collect_garbage(pod, rt, actions.containers_to_remove, sandbox)

        # 8. Status (probe workers follow the containers that now run, and fill st.ready/started).
        # A sync that changed nothing reuses what it read in step 1 (a start that failed before anything was
        # created, the image backing off, say, changed nothing). One that changed something publishes a relist
        # that asked runc after its changes, shared with the syncs waiting at the same time, and PLEG's own
        # relist after them (Pleg.pods_newer_than): no `runc list` of its own.
        changed = bool(
            actions.kill_pod
            or actions.containers_to_kill
            or actions.create_sandbox
            or started
            or actions.pod_finished
            or garbage
        )
        relisted = False
        if changed:
            rt, relisted = await self._state_after(uid, st)
        elif st.cached_read and st.synced_at is not None:
            # Nothing changed, and what it publishes is PLEG's cache: any relist that served it serves the next
            # sync too (a resync by a probe verdict or a rollout round then lists nothing either).
            st.settled_at = st.synced_at
        if self._probes is not None:
            self._probes.sync_pod(pod, rt)
        self._publish(pod, rt, st)
        wake = self._next_wake(pod, st, now)
        if cleanup_failed:
            wake = CLEANUP_RETRY if wake is None else min(wake, CLEANUP_RETRY)
        return SyncResult(requeue_after=wake, changed=changed, relisted=relisted)

    def _why_held(self, pod: Pod, st: PodSyncState) -> tuple[tuple[str, str], float | None] | None:
        """Whether the pod is kept stopped, as (reason, message) and the grace of its kill: refused by admission
        (the cgroup controllers its limits need are missing), or evicted under node pressure."""
        if not st.admitted and self._admit is not None:
            verdict = self._admit(pod)
            if verdict is not None and verdict.refused:
                if st.refused is None:
                    self._events.warning(pod_ref(pod), verdict.reason, verdict.message)
                    log.warning("Pod refused", pod=log_name(pod), reason=verdict.reason, message=verdict.message)
                st.refused = (verdict.reason, verdict.message)
                return st.refused, None
            if verdict is not None:
                self._events.warning(pod_ref(pod), verdict.reason, verdict.message)
            st.admitted = True
        if st.evicted is not None:
            return st.evicted, st.evict_grace
        return None

    def _compute(self, pod: Pod, rt: PodRuntimeStatus, st: PodSyncState, now: float) -> PodActions:
        """Step 1's decision (plan.compute_pod_actions), and what it says the pod waits for, recorded in `st`."""
        failures = self._probes.failures(pod_uid(pod)) if self._probes is not None else None
        actions = compute_pod_actions(
            pod, rt, self._backoff, now, started=st.started, probe_failures=failures, start_failed=st.start_failed
        )
        st.waiting = dict(actions.waiting)
        if st.start_failed:
            st.start_failed &= {c.id for c in rt.containers}  # only instances that still exist
        st.pod_failed = actions.pod_failed
        self._record_backoffs(pod, st)
        return actions

    async def _sandbox_failed(self, pod: Pod, st: PodSyncState, exc: Exception, now: float) -> SyncResult:
        """Step 4 failed: every container waits in ContainerCreating with the reason, and the sandbox's back-off
        says when the next sync tries again."""
        log.error("Failed to create pod sandbox", exc, pod=log_name(pod))
        self._events.warning(pod_ref(pod), "FailedCreatePodSandBox", f"Failed to create pod sandbox: {exc}")
        for c in pod_spec(pod).containers:
            st.waiting[c.name] = ("ContainerCreating", f"failed to create pod sandbox: {exc}")
        failed_rt, relisted = await self._state_after(pod_uid(pod), st)
        self._publish(pod, failed_rt, st)
        return SyncResult(requeue_after=self._retry_delay(pod_uid(pod), "sandbox", now), relisted=relisted)

    async def _start_containers(
        self,
        pod: Pod,
        st: PodSyncState,
        sandbox: SandboxRecord | None,
        to_start: Sequence[ContainerToStart],
        start: SandboxStart,
    ) -> int:
        """Steps 5 and 6, in the pod's order, each from what the sandbox's start made for it; the number of
        containers created in the runtime (a failure to start one still counts: it was created)."""
        if not to_start:
            return 0
        if sandbox is None:
            log.warning("No running sandbox to start containers in", pod=log_name(pod))
            return 0
        started = 0
        specs = {c.name: c for c in [*(pod_spec(pod).init_containers or []), *pod_spec(pod).containers]}
        for item in to_start:
            container = specs[item.name]
            if item.existing is not None:
                reason = await self._resume_container(
                    pod, container, sandbox, item.existing, item.attempt, item.container_type, st
                )
            else:
                reason = await self._start_container(
                    pod, container, sandbox, item.attempt, item.container_type, st, head_start=start.take(item.name)
                )
            if reason is not None:
                st.waiting[item.name] = reason
            if reason is None or reason[0] not in _NO_CONTAINER_REASONS:
                started += 1
        return started

    async def _stop_finished_sandbox(self, uid: str) -> None:
        """Stop the sandbox of a pod that will never run anything again, once none of its containers runs."""
        now_rt, _ = await self._state_after(uid)
        if not any(c.state in ("running", "created") for c in now_rt.containers):
            for s in now_rt.sandboxes:
                if s.state in ("running", "created"):
                    await self._runtime.stop_sandbox(s.id)

    async def _collect_garbage(
        self, pod: Pod, rt: PodRuntimeStatus, to_remove: Sequence[str], sandbox: SandboxRecord | None
    ) -> tuple[list[str], bool]:
        """Step 7: remove older exited instances, and dead sandboxes once a newer one runs; release the exited
        instances that stay. What was removed, and whether a removal or release failed (retried soon)."""
        garbage = list(to_remove)
        if sandbox is not None:
            garbage += [
                s.id
                for s in rt.sandboxes
                if s.id != sandbox.id
                and s.state not in ("running", "created")
                and not any(c.sandbox_id == s.id for c in rt.containers if c.id not in garbage)
            ]
        cleanup_failed = False
        for cid in garbage:
            try:
                await self._runtime.remove_container(cid)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                cleanup_failed = True
                log.warning("Failed to remove old container", pod=log_name(pod), container=cid, err=str(exc))
        # An exited instance that stays (the current one, or the lastState) keeps its record but not its
        # runc state, cgroup and rootfs mount, as containerd deletes a task when it exits.
        for rec in rt.containers:
            if rec.state == "exited" and rec.id not in garbage:
                try:
                    await self._runtime.release_container(rec.id)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    cleanup_failed = True
                    log.warning(
                        "Failed to release an exited container", pod=log_name(pod), container=rec.id[:12], err=str(exc)
                    )
        return garbage, cleanup_failed

    async def _resolve_image(self, pod: Pod, container: Container, init: bool) -> ImageRecord:
        # Events and the image back-off (uid, "image:<name>") are the manager's; _next_wake sees the latter.
        return await resolve_image(
            self._images, pod, container, events=self._events, backoff=self._backoff, clock=self._clock, init=init
        )

    async def _before_state(self, uid: str, st: PodSyncState) -> PodRuntimeStatus:
        st.cached_read = False
        if self._newer_than is not None and st.synced_at is not None:
            cached = self._newer_than(uid, st.synced_at)
            if cached is not None:
                st.cached_read = True
                return cached
        return await self._runtime.pod_status(uid)

    async def _state_after(self, uid: str, st: PodSyncState | None = None) -> tuple[PodRuntimeStatus, bool]:
        """The pod as read after everything this sync did so far, and whether a relist (PLEG's) read it.

        Read from a relist that asked runc after now, so never older than the sync's own actions; with `st`
        the sync's changes end here (its synced_at: that relist then serves the next sync's before-state too).
        A relist that fails is not the sync's failure: it reads the pod itself, as it did before relists were
        shared (and PLEG, not having seen the changes, is kicked after it: SyncResult.relisted).
        """
        since = self._clock.monotonic()
        if st is not None:
            st.settled_at = since
        if self._relisted_after is not None:
            try:
                return await self._relisted_after(uid, since), True
            except (RuntimeError_, OSError) as exc:
                log.warning("Relist for a sync's state failed; reading the pod alone", uid=uid, err=str(exc))
        if st is not None:
            st.settled_at = None  # what it publishes is newer than the cache: the next sync needs a newer one
        return await self._runtime.pod_status(uid), False

    def _warn_host_access(self, pod: Pod) -> None:
        """kubelet runs static pods with host namespaces or a writable host `/` without a word; edgelet says so."""
        from edgelet.api.hostaccess import REASON, describe_host_access, host_access_message

        found = describe_host_access(pod)
        if found:
            self._events.warning(pod_ref(pod), REASON, host_access_message(found))

    async def _start_container(
        self,
        pod: Pod,
        container: Container,
        sandbox: SandboxRecord,
        attempt: int,
        ctype: str,
        st: PodSyncState | None = None,
        *,
        head_start: HeadStart = NO_HEAD_START,
    ) -> tuple[str, str] | None:
        """Image, create, start; returns a waiting (reason, message) on failure. `head_start`: what the sandbox's
        setup already did for it (its image, its prepared bundle, which create_container then owns, or its
        create beside the network), each step done here only when it was not."""
        uid = pod_uid(pod)
        key = (uid, container.name)
        image = head_start.image
        try:
            if isinstance(image, ImageUnavailable):
                raise image
            if image is None:
                image = await self._resolve_image(pod, container, ctype != "regular")
        except ImageUnavailable as exc:
            log.warning(
                "Image not available", pod=log_name(pod), container=container.name, reason=exc.reason, err=exc.message
            )
            return (exc.reason, exc.message)
        ref = pod_ref(pod, container.name, init=ctype != "regular")
        if attempt > 0:
            # The restart itself counts as a failure for CrashLoopBackOff (kubelet doBackOff).
            self._backoff.next(key, self._clock.monotonic())
        try:
            if isinstance(head_start.created, Exception):
                raise head_start.created
            if head_start.created is not None:
                cid = head_start.created
            elif head_start.prepared is not None:
                cid = await self._runtime.create_container(
                    pod, container, sandbox, image, attempt, ctype, prepared=head_start.prepared
                )
            else:
                cid = await self._runtime.create_container(pod, container, sandbox, image, attempt, ctype)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("Failed to create container", exc, pod=log_name(pod), container=container.name)
            self._backoff.next(key, self._clock.monotonic())
            reason = "CreateContainerConfigError" if _is_config_error(exc) else "CreateContainerError"
            self._events.warning(ref, "Failed", f"Error: {exc}")
            return (reason, str(exc))
        self._events.normal(ref, "Created", f"Created container: {container.name}")
        return await self._start_created(pod, container, sandbox, cid, attempt, ref, st)

    async def _resume_container(
        self,
        pod: Pod,
        container: Container,
        sandbox: SandboxRecord,
        cid: str,
        attempt: int,
        ctype: str,
        st: PodSyncState,
    ) -> tuple[str, str] | None:
        """Start an instance a killed agent created but never started (plan.actions resumable).

        The Created event went out with its create; the restart it is (attempt > 0) counts for the
        back-off as the one it replaces would have. A failed start marks it for replacement.
        """
        key = (pod_uid(pod), container.name)
        ref = pod_ref(pod, container.name, init=ctype != "regular")
        if attempt > 0:
            self._backoff.next(key, self._clock.monotonic())
        log.info(
            "Starting a container created by the previous agent",
            pod=log_name(pod),
            container=container.name,
            id=cid[:12],
            attempt=attempt,
        )
        return await self._start_created(pod, container, sandbox, cid, attempt, ref, st)

    async def _start_created(
        self,
        pod: Pod,
        container: Container,
        sandbox: SandboxRecord,
        cid: str,
        attempt: int,
        ref: InvolvedObject,
        st: PodSyncState | None,
    ) -> tuple[str, str] | None:
        """Start a created instance, then its postStart hook; a waiting (reason, message) on failure.

        Shared by a fresh create and by resuming one a killed agent created: a failed start counts for the
        back-off and marks the instance (in `st`) for replacement at the next sync, not a second start.
        """
        key = (pod_uid(pod), container.name)
        try:
            await self._runtime.start_container(cid)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("Failed to start container", exc, pod=log_name(pod), container=container.name)
            if st is not None:
                st.start_failed.add(cid)  # left created, it is replaced at the next sync, not started again
            self._backoff.next(key, self._clock.monotonic())
            self._events.warning(ref, "Failed", f"Error: {exc}")
            return ("RunContainerError", str(exc))
        log.info("Started container", pod=log_name(pod), container=container.name, id=cid[:12], attempt=attempt)
        self._events.normal(ref, "Started", f"Started container: {container.name}")
        if container.lifecycle is not None and container.lifecycle.post_start is not None:
            return await self._post_start(pod, container, sandbox, cid, ref)
        return None

    async def _post_start(
        self, pod: Pod, container: Container, sandbox: SandboxRecord, cid: str, ref
    ) -> tuple[str, str] | None:
        """kubelet startContainer step 4: run postStart; on failure FailedPostStartHook, kill, PostStartHookError."""
        from edgelet.probes.errors import HookError
        from edgelet.probes.hooks import run_handler
        from edgelet.probes.target import target_for

        target = target_for(cid, container, sandbox.netns_path(), sandbox.host_network)
        try:
            assert container.lifecycle is not None and container.lifecycle.post_start is not None
            await run_handler(
                container.lifecycle.post_start,
                runtime=self._runtime,
                target=target,
                pod=pod,
                container=container,
                sleep=self._clock.sleep,
            )
        except HookError as exc:
            log.warning("PostStart hook failed", pod=log_name(pod), container=container.name, err=str(exc))
            self._events.warning(ref, "FailedPostStartHook", str(exc))
            await self._stopper.stop(pod, cid, "FailedPostStartHook", event_message="FailedPostStartHook")
            return ("PostStartHookError", str(exc))
        return None

    def _probe_grace(self, uid: str, cid: str) -> float | None:
        """The grace period of the kill of a container whose liveness or startup probe failed, when the probe
        gives one (None otherwise: the pod's own)."""
        if self._probes is None or cid not in self._probes.failures(uid):
            return None
        return self._probes.kill_grace(uid, cid)

    async def _find(self, cid: str, uid: str | None = None) -> ContainerRecord | None:
        """The container as read now: of its pod from the shared relist (the containers of a pod stopped side by
        side wait for one `runc list` together), else from a list of every pod (an orphan's)."""
        if uid is not None and self._relisted_after is not None:
            rt, _ = await self._state_after(uid)
            return next((c for c in rt.containers if c.id == cid), None)
        for rt in (await self._runtime.list_pods()).values():
            for c in rt.containers:
                if c.id == cid:
                    return c
        return None

    def evict(self, uid: str, reason: str, message: str, grace: float | None) -> None:
        """Hold the pod stopped under node pressure; the next sync kills it with `grace` (None: its own)."""
        st = self.state(uid)
        st.evicted = (reason, message)
        st.evict_grace = grace

    def readmit(self, uid: str) -> None:
        """The pressure is gone: the next sync starts the evicted pod again, as a new run."""
        st = self.state(uid)
        if st.evicted is not None:
            st.evicted = None
            st.readmitted = True

    async def _sync_held(self, pod: Pod, st: PodSyncState, why: tuple[str, str], grace: float | None) -> SyncResult:
        """Keep a pod stopped (evicted, or refused before it ran): kill what runs, publish it Failed with `why`."""
        uid = pod_uid(pod)
        rt = await self._before_state(uid, st)
        live = _live(rt)
        relisted = False
        if live:
            self._events.warning(pod_ref(pod), why[0], why[1])
            await self._stopper.kill_all(
                pod, rt, reason="evicted" if st.evicted is not None else "refused", grace=grace
            )
            rt, relisted = await self._state_after(uid, st)
        st.waiting = {}
        self._publish(pod, rt, st)
        return SyncResult(changed=live, relisted=relisted)

    async def terminate_pod(self, uid: str, pod: Pod | None) -> None:
        """Stop everything with the pod's grace period, then remove all the pod left behind."""
        st = self._state.get(uid)
        rt = await self._before_state(uid, st) if st is not None else await self._runtime.pod_status(uid)
        name = log_name(pod) or f"{rt.namespace}/{rt.name}"
        log.info("Terminating pod", pod=name, uid=uid)
        if self._probes is not None:
            self._probes.remove_pod(uid)
        # Sidecars after the main containers, in reverse order; the sandbox last.
        running = {c.id: "pod removed" for c in rt.containers if c.state in ("running", "created")}
        await self._stopper.stop_ordered(pod, rt, running)
        for s in rt.sandboxes:
            if s.state in ("running", "created"):
                await self._runtime.stop_sandbox(s.id)
        await self._runtime.remove_pod(uid)
        # PLEG's cache must stop listing the pod: housekeeping takes every uid it lists and no source wants for
        # an orphan, so one removed at start (its manifest deleted while the agent was down) would be
        # terminated again every round, and reported, until a periodic relist.
        await self._state_after(uid)
        self._state.pop(uid, None)
        self._backoff_forget(uid)
        self._forget(uid)
        log.info("Pod terminated", pod=name, uid=uid)

    def _record_backoffs(self, pod: Pod, st: PodSyncState) -> None:
        """A BackOff event for each container held back, as kubelet emits one per sync that hits it."""
        init_names = {c.name for c in pod_spec(pod).init_containers or []}
        for name, (reason, _) in st.waiting.items():
            ref = pod_ref(pod, name, init=name in init_names)
            if reason == "CrashLoopBackOff":
                self._events.warning(
                    ref,
                    "BackOff",
                    f"Back-off restarting failed container {name} in pod "
                    f"{meta(pod).name}_{meta(pod).namespace}({pod_uid(pod)})",
                )
            elif reason == "ImagePullBackOff":
                self._events.normal(ref, "BackOff", f'Back-off pulling image "{_image_of(pod, name)}"')

    def _backoff_forget(self, uid: str) -> None:
        forget = getattr(self._backoff, "forget_pod", None)
        if forget is not None:
            forget(uid)

    def _retry_delay(self, uid: str, what: str, now: float) -> float:
        return self._backoff.next((uid, what), now)

    def _next_wake(self, pod: Pod, st: PodSyncState, now: float) -> float | None:
        """When a waiting container's back-off ends, so the loop syncs the pod again then."""
        delays = []
        for name, (reason, _) in st.waiting.items():
            if reason == "ErrImagePull":
                # kubelet resyncs a pod whose pull failed soon after, and the container then shows
                # ImagePullBackOff for the rest of the back-off instead of ErrImagePull throughout.
                delays.append(ERR_IMAGE_PULL_RESYNC)
            for key in ((pod_uid(pod), name), (pod_uid(pod), "image:" + name)):
                rem = self._backoff.remaining(key, now)
                if rem > 0:
                    delays.append(rem)
        if delays:
            return min(delays) + 0.05
        return 1.0 if st.waiting else None


def next_synced_at(settled_at: float | None, now: float) -> float:
    """A sync's synced_at, the time after which a relist is fresh enough for the pod's next sync: where its
    changes ended and it read the relist it published (or, having changed nothing, the one its cached
    state was fresh against), else now (it read the runtime itself: nothing older may follow it)."""
    return settled_at if settled_at is not None else now


def _live(rt: PodRuntimeStatus) -> bool:
    """Whether anything of the pod runs (or is created): what a kill of the whole pod stops."""
    return any(c.state in ("running", "created") for c in rt.containers) or any(
        s.state in ("running", "created") for s in rt.sandboxes
    )


def _live_sandbox(rt: PodRuntimeStatus, sandbox_id: str | None) -> SandboxRecord | None:
    for s in rt.sandboxes:
        if s.state == "running" and (sandbox_id is None or s.id == sandbox_id):
            return s
    return None


def _image_of(pod: Pod, name: str) -> str:
    for c in [*(pod_spec(pod).init_containers or []), *pod_spec(pod).containers]:
        if c.name == name:
            return c.image or ""
    return ""


def _is_config_error(exc: BaseException) -> bool:
    """kubelet reports a spec that cannot be expressed, and volume mounts it cannot make (a subPath that is
    a symlink, say), as CreateContainerConfigError."""
    from edgelet.container.errors import CreateContainerConfigError, VolumeError

    return isinstance(exc, (CreateContainerConfigError, VolumeError))
