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
  7. Remove exited instances other than each container's current one and its lastState.
  8. Publish the pod's status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from edgelet.api.pod import container_spec, meta
from edgelet.api.pod import spec as pod_spec
from edgelet.api.pod import uid as pod_uid
from edgelet.container.errors import RuntimeError_
from edgelet.events import EventRecorder, InvolvedObject, pod_ref
from edgelet.images.manager import ImageUnavailable
from edgelet.plan import compute_pod_actions
from edgelet.plan.actions import is_pod_termination
from edgelet.plan.termination import remaining_grace, stop_signal, termination_order
from edgelet.status.syncstate import PodSyncState
from edgelet.sync.workers import SyncResult
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.cgroups.controllers import Admission
    from edgelet.container import Runtime
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus, PreparedContainer, SandboxRecord
    from edgelet.images.manager import ImageManager
    from edgelet.images.store import ImageStore
    from edgelet.images.types import ImageRecord
    from edgelet.plan import ContainerToStart
    from edgelet.probes.manager import ProbeManager
    from edgelet.util.backoff import Backoff
    from edgelet.util.clock import Clock

log = get_logger(__name__)

DEFAULT_GRACE = 30.0
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
        uid = pod_uid(pod)
        now = self._clock.monotonic()

        if not st.host_access_warned:
            self._warn_host_access(pod)
            st.host_access_warned = True
        if not st.admitted and self._admit is not None:
            verdict = self._admit(pod)
            if verdict is not None and verdict.refused:
                if st.refused is None:
                    self._events.warning(pod_ref(pod), verdict.reason, verdict.message)
                    log.warning("Pod refused", pod=_full(pod), reason=verdict.reason, message=verdict.message)
                st.refused = (verdict.reason, verdict.message)
                return await self._sync_held(pod, st, st.refused, None)
            if verdict is not None:
                self._events.warning(pod_ref(pod), verdict.reason, verdict.message)
            st.admitted = True
        if st.evicted is not None:
            return await self._sync_held(pod, st, st.evicted, st.evict_grace)

        # 1. Compute, from PLEG's last relist when it asked runc after this pod's last sync ended (a sync
        # its events started), else from a `runc list` of its own.
        rt = await self._before_state(uid, st)
        failures = self._probes.failures(uid) if self._probes is not None else None
        actions = compute_pod_actions(
            pod, rt, self._backoff, now, started=st.started, probe_failures=failures, start_failed=st.start_failed
        )
        st.waiting = dict(actions.waiting)
        if st.start_failed:
            st.start_failed &= {c.id for c in rt.containers}  # only instances that still exist
        st.pod_failed = actions.pod_failed
        self._record_backoffs(pod, st)

        # 2. Kill the whole pod when its sandbox must be recreated.
        # (A new pod's kill stops nothing, and its state is still the one read in step 1: no relist to wait for.)
        if actions.kill_pod and _live(rt):
            await self._kill_all(pod, rt, reason="sandbox changed")
            rt, _ = await self._state_after(uid)

        # 3. Kill what must not run any more. kubelet's Killing event carries computePodActions' message
        # ("Container app definition changed, will be restarted"), except for a pod that finished for good,
        # which kubelet's pod worker terminates like a deleted one ("Stopping container side").
        if actions.containers_to_kill:
            await self._stop_ordered(pod, rt, actions.containers_to_kill, say_reason=True)

        # 4. Sandbox; while it is set up (namespaces, the CNI network), the containers it will run get their
        # images, bundles and rootfs mounts (issue 25: what does not depend on the order overlaps).
        to_start = []
        started = 0  # containers created in the runtime by this sync
        if actions.next_init_container is not None:
            to_start.append(actions.next_init_container)
        to_start.extend(actions.containers_to_start)
        ahead: dict[str, ImageRecord | ImageUnavailable] = {}
        prepared: dict[str, PreparedContainer] = {}
        # Created while the sandbox's network was attached, not yet started: name -> id, or the create's error.
        early: dict[str, str | Exception] = {}
        sandbox = _live_sandbox(rt, actions.sandbox_id)
        try:
            if actions.create_sandbox:
                log.info("Creating pod sandbox", pod=_full(pod), attempt=actions.sandbox_attempt)
                try:
                    sandbox = await self._sandbox_and_prepare(
                        pod, actions.sandbox_attempt, to_start, ahead, prepared, early
                    )
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.error("Failed to create pod sandbox", exc, pod=_full(pod))
                    self._events.warning(pod_ref(pod), "FailedCreatePodSandBox", f"Failed to create pod sandbox: {exc}")
                    for c in pod_spec(pod).containers:
                        st.waiting[c.name] = ("ContainerCreating", f"failed to create pod sandbox: {exc}")
                    failed_rt, relisted = await self._state_after(uid, st)
                    self._publish(pod, failed_rt, st)
                    return SyncResult(requeue_after=self._retry_delay(uid, "sandbox", now), relisted=relisted)

            # 5 and 6. Init container, then regular containers.
            if to_start and sandbox is None:
                log.warning("No running sandbox to start containers in", pod=_full(pod))
            elif to_start:
                specs = {c.name: c for c in [*(pod_spec(pod).init_containers or []), *pod_spec(pod).containers]}
                for item in to_start:
                    container = specs[item.name]
                    assert sandbox is not None  # the branch above handles a pod without one
                    if item.existing is not None:
                        reason = await self._resume_container(
                            pod, container, sandbox, item.existing, item.attempt, item.container_type, st
                        )
                    else:
                        reason = await self._start_container(
                            pod,
                            container,
                            sandbox,
                            item.attempt,
                            item.container_type,
                            st,
                            image=ahead.get(item.name),
                            prepared=prepared.pop(item.name, None),
                            created=early.pop(item.name, None),
                        )
                    if reason is not None:
                        st.waiting[item.name] = reason
                    if reason is None or reason[0] not in _NO_CONTAINER_REASONS:
                        started += 1  # a container was created, even if it then failed to start
        finally:
            # Prepared ahead for a sandbox that failed (or a sync cut short): nothing of them stays behind.
            for p in prepared.values():
                await asyncio.shield(self._runtime.discard_prepared(p))
            # Created beside the network and never started (a sync cut short): removed, not left to linger.
            for made in early.values():
                if isinstance(made, str):
                    await asyncio.shield(self._remove_quietly(pod, made))

        # ConfigMap and Secret volumes follow their objects while the pod runs (env and subPath do not).
        if sandbox is not None and not actions.create_sandbox:
            await self._runtime.refresh_config_volumes(pod)

        # A pod that will never run anything again keeps its exited containers (its final
        # status) but not its pause process.
        if actions.pod_finished:
            now_rt, _ = await self._state_after(uid)
            if not any(c.state in ("running", "created") for c in now_rt.containers):
                for s in now_rt.sandboxes:
                    if s.state in ("running", "created"):
                        await self._runtime.stop_sandbox(s.id)

        # 7. Garbage: older exited instances, and dead sandboxes once a newer one runs.
        garbage = list(actions.containers_to_remove)
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
                log.warning("Failed to remove old container", pod=_full(pod), container=cid, err=str(exc))
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
                        "Failed to release an exited container", pod=_full(pod), container=rec.id[:12], err=str(exc)
                    )

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

    async def _sandbox_and_prepare(
        self,
        pod: Pod,
        attempt: int,
        items: Sequence[ContainerToStart],
        ahead: dict[str, ImageRecord | ImageUnavailable],
        prepared: dict[str, PreparedContainer],
        early: dict[str, str | Exception],
    ) -> SandboxRecord:
        """The sandbox, and beside it each new container's image and `prepare_container`, filling `ahead` and
        `prepared` (the caller discards what it does not use). A preparation that fails is left to the
        container's own create, which meets the error again and reports it as it always has.

        With a CNI network the sandbox comes in two halves (issue 25): its namespaces, then ADD in them;
        the first container is created meanwhile (`_network_beside_create`), into `early`."""
        specs = {c.name: c for c in [*(pod_spec(pod).init_containers or []), *pod_spec(pod).containers]}
        # Set once the first container's image and preparation are settled, whatever they gave.
        first_settled = asyncio.Event()

        async def prepare_all() -> None:
            try:
                for item in items:
                    await prepare_one(item)
                    first_settled.set()
            finally:
                first_settled.set()

        async def prepare_one(item: ContainerToStart) -> None:
            if item.existing is not None or item.name not in specs:
                return
            container = specs[item.name]
            try:
                image = await resolve_image(
                    self._images,
                    pod,
                    container,
                    events=self._events,
                    backoff=self._backoff,
                    clock=self._clock,
                    init=item.container_type != "regular",
                )
            except ImageUnavailable as exc:
                ahead[item.name] = exc
                return
            ahead[item.name] = image
            try:
                prepared[item.name] = await self._runtime.prepare_container(
                    pod, container, image, item.attempt, item.container_type
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "Preparing a container ahead of its sandbox failed",
                    pod=_full(pod),
                    container=container.name,
                    err=str(exc),
                )

        prep = asyncio.ensure_future(prepare_all())
        try:
            sandbox = await self._runtime.create_sandbox(pod, attempt)
            if sandbox.state != "running":
                sandbox = await self._network_beside_create(
                    pod, sandbox, items, specs, ahead, prepared, early, first_settled
                )
        except asyncio.CancelledError:
            prep.cancel()
            await asyncio.gather(prep, return_exceptions=True)
            raise
        except BaseException:
            # The images and bundles are finished, then discarded by the caller: a pull that began stays useful.
            await asyncio.gather(prep, return_exceptions=True)
            raise
        await prep
        return sandbox

    async def _network_beside_create(
        self,
        pod: Pod,
        sandbox: SandboxRecord,
        items: Sequence[ContainerToStart],
        specs: Mapping[str, Container],
        ahead: Mapping[str, ImageRecord | ImageUnavailable],
        prepared: dict[str, PreparedContainer],
        early: dict[str, str | Exception],
        first_settled: asyncio.Event,
    ) -> SandboxRecord:
        """start_sandbox (the CNI ADD) of a created sandbox, and the first container's `runc create` beside it
        (plan.overlap decides which, and what a failure of either half undoes). The container is only
        created: it starts after this returns, so never before the pod's network is ready."""
        from edgelet.plan.overlap import beside_network, overlap_outcome

        network = asyncio.ensure_future(self._runtime.start_sandbox(pod, sandbox))
        creating: asyncio.Future[str | Exception] | None = None
        first: ContainerToStart | None = None
        try:
            await first_settled.wait()
            at_hand = {name: not isinstance(image, ImageUnavailable) for name, image in ahead.items()}
            first = beside_network(items, at_hand)
            if first is not None:
                image = ahead[first.name]
                assert not isinstance(image, ImageUnavailable)
                creating = asyncio.ensure_future(
                    self._create_only(pod, specs[first.name], sandbox, image, first, prepared.pop(first.name, None))
                )
            await asyncio.shield(asyncio.gather(network, *([creating] if creating else []), return_exceptions=True))
        except asyncio.CancelledError:
            # Shutdown: both halves end (a create undoes itself when cancelled), then neither stays.
            for task in (network, creating):
                if task is not None:
                    task.cancel()
            await asyncio.shield(asyncio.gather(network, *([creating] if creating else []), return_exceptions=True))
            await asyncio.shield(self._undo_overlap(pod, sandbox, _created_id(creating)))
            raise
        failed = network.exception()
        made = creating.result() if creating is not None else None
        outcome = overlap_outcome(network_ok=failed is None, created=isinstance(made, str))
        if outcome.remove_sandbox:
            assert failed is not None
            await asyncio.shield(self._undo_overlap(pod, sandbox, _created_id(creating)))
            raise failed
        if first is not None and made is not None:
            early[first.name] = made
            if outcome.start:
                # The sandbox started and the container is created, not started: the next agent starts it.
                crash_point("sandbox.ready")
        return network.result()

    async def _create_only(
        self,
        pod: Pod,
        container: Container,
        sandbox: SandboxRecord,
        image: ImageRecord,
        item: ContainerToStart,
        prepared: PreparedContainer | None,
    ) -> str | Exception:
        """`create_container` of `item`, its failure returned (reported with its back-off when it would have
        started, as a create failing then is)."""
        try:
            if prepared is not None:
                return await self._runtime.create_container(
                    pod, container, sandbox, image, item.attempt, item.container_type, prepared=prepared
                )
            return await self._runtime.create_container(
                pod, container, sandbox, image, item.attempt, item.container_type
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return exc

    async def _undo_overlap(self, pod: Pod, sandbox: SandboxRecord, created: str | None) -> None:
        """A sandbox that never started goes, the container created in it first (never a container without its
        sandbox's record); a removal that fails is logged, and what it left is found by the next sync."""
        if created is not None:
            await self._remove_quietly(pod, created)
        await self._remove_quietly(pod, sandbox.id)

    async def _remove_quietly(self, pod: Pod, cid: str) -> None:
        try:
            await self._runtime.remove_container(cid)
        except Exception as exc:
            log.warning("Removing what a failed pod start created failed", pod=_full(pod), id=cid[:12], err=str(exc))

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
        image: ImageRecord | ImageUnavailable | None = None,
        prepared: PreparedContainer | None = None,
        created: str | Exception | None = None,
    ) -> tuple[str, str] | None:
        """Image, create, start; returns a waiting (reason, message) on failure. `image` and `prepared`: what
        was resolved and prepared while the sandbox was set up (create_container then owns `prepared`);
        `created`: the create already done while its network was attached (the id, or its error)."""
        uid = pod_uid(pod)
        key = (uid, container.name)
        try:
            if isinstance(image, ImageUnavailable):
                raise image
            if image is None:
                # Events and the image back-off (uid, "image:<name>") are the manager's; _next_wake sees the latter.
                image = await resolve_image(
                    self._images,
                    pod,
                    container,
                    events=self._events,
                    backoff=self._backoff,
                    clock=self._clock,
                    init=ctype != "regular",
                )
        except ImageUnavailable as exc:
            log.warning(
                "Image not available", pod=_full(pod), container=container.name, reason=exc.reason, err=exc.message
            )
            return (exc.reason, exc.message)
        ref = pod_ref(pod, container.name, init=ctype != "regular")
        if attempt > 0:
            # The restart itself counts as a failure for CrashLoopBackOff (kubelet doBackOff).
            self._backoff.next(key, self._clock.monotonic())
        try:
            if isinstance(created, Exception):
                raise created
            if created is not None:
                cid = created
            elif prepared is not None:
                cid = await self._runtime.create_container(
                    pod, container, sandbox, image, attempt, ctype, prepared=prepared
                )
            else:
                cid = await self._runtime.create_container(pod, container, sandbox, image, attempt, ctype)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("Failed to create container", exc, pod=_full(pod), container=container.name)
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
            pod=_full(pod),
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
            log.error("Failed to start container", exc, pod=_full(pod), container=container.name)
            if st is not None:
                st.start_failed.add(cid)  # left created, it is replaced at the next sync, not started again
            self._backoff.next(key, self._clock.monotonic())
            self._events.warning(ref, "Failed", f"Error: {exc}")
            return ("RunContainerError", str(exc))
        log.info("Started container", pod=_full(pod), container=container.name, id=cid[:12], attempt=attempt)
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
            log.warning("PostStart hook failed", pod=_full(pod), container=container.name, err=str(exc))
            self._events.warning(ref, "FailedPostStartHook", str(exc))
            await self._stop(pod, cid, "FailedPostStartHook", event_message="FailedPostStartHook")
            return ("PostStartHookError", str(exc))
        return None

    async def _stop(
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
        if (
            pod is not None
            and self._probes is not None
            and grace is None
            and cid in self._probes.failures(pod_uid(pod))
        ):
            # kubelet setTerminationGracePeriod: a liveness/startup kill uses the probe's grace when it has one.
            grace = self._probes.kill_grace(pod_uid(pod), cid)
        record = await self._find(cid, pod_uid(pod) if pod is not None else None)
        if grace is None:
            # Without the pod (an orphan), the grace period it had, kept on the container.
            grace = (
                record.grace_period
                if pod is None and record is not None and record.grace_period is not None
                else _grace(pod)
            )
        log.info("Killing container", pod=_full(pod), container=cid[:12], reason=why, grace=grace)
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
                log.info("Stopping container before its turn: grace period spent", pod=_full(pod), container=cid[:12])
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
            log.warning("PreStop hook failed", pod=_full(pod), container=spec.name, err=str(exc))
            self._events.warning(ref, "FailedPreStopHook", str(exc))
        except TimeoutError:
            log.info("PreStop hook not completed in grace period", pod=_full(pod), container=spec.name, grace=grace)

    async def _stop_ordered(
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
                await self._stop(pod, cid, kills[cid], grace, turn=turn, event_message=kills[cid] if say else None)
            finally:
                done[cid].set()

        await asyncio.gather(*(one(cid) for cid in kills))

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

    def _stop_signal(self, pod: Pod | None, record: ContainerRecord | None) -> str:
        """The container's lifecycle.stopSignal, else the image's STOPSIGNAL, else SIGTERM."""
        image_signal = ""
        if record is not None and record.image:
            rec = self._images.get(record.image)
            if rec is not None and rec.config.stop_signal:
                image_signal = rec.config.stop_signal
        return stop_signal(container_spec(pod, record.name) if record is not None else None, image_signal)

    async def _kill_all(self, pod: Pod | None, rt: PodRuntimeStatus, reason: str, grace: float | None = None) -> None:
        """Stop every container in parallel, then the sandboxes (kubelet killPodWithSyncResult).

        Exited containers are kept: the newest of each is the container's lastState and
        carries its restart count and back-off across the new sandbox; older ones go
        through `containers_to_remove` like any other dead instance.
        """
        running = {c.id: reason for c in rt.containers if c.state in ("running", "created")}
        await self._stop_ordered(pod, rt, running, grace)
        for s in rt.sandboxes:
            if s.state in ("running", "created"):
                await self._runtime.stop_sandbox(s.id)

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
            await self._kill_all(pod, rt, reason="evicted" if st.evicted is not None else "refused", grace=grace)
            rt, relisted = await self._state_after(uid, st)
        st.waiting = {}
        self._publish(pod, rt, st)
        return SyncResult(changed=live, relisted=relisted)

    async def terminate_pod(self, uid: str, pod: Pod | None) -> None:
        """Stop everything with the pod's grace period, then remove all the pod left behind."""
        st = self._state.get(uid)
        rt = await self._before_state(uid, st) if st is not None else await self._runtime.pod_status(uid)
        name = _full(pod) or f"{rt.namespace}/{rt.name}"
        log.info("Terminating pod", pod=name, uid=uid)
        if self._probes is not None:
            self._probes.remove_pod(uid)
        # Sidecars after the main containers, in reverse order; the sandbox last.
        running = {c.id: "pod removed" for c in rt.containers if c.state in ("running", "created")}
        await self._stop_ordered(pod, rt, running)
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


def _created_id(creating: asyncio.Future[str | Exception] | None) -> str | None:
    """The id a finished `_create_only` created; None when it failed, was cancelled or never ran."""
    if creating is None or not creating.done() or creating.cancelled() or creating.exception() is not None:
        return None
    made = creating.result()
    return made if isinstance(made, str) else None


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


def _grace(pod: Pod | None) -> float:
    grace = pod.spec.termination_grace_period_seconds if pod is not None and pod.spec is not None else None
    return DEFAULT_GRACE if grace is None else float(grace)


def _full(pod: Pod | None) -> str | None:
    if pod is None or pod.metadata is None:
        return None
    return f"{meta(pod).namespace}/{meta(pod).name}"


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
