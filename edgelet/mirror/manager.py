"""Keeps the apiserver's view of this node current: Node, Lease, mirror pods, their status and events.

It only reports. It reads pod statuses from the status publisher and events
from the event recorder, and never stops, restarts or delays a static pod:
all of its work runs in its own tasks, every request has a timeout, and a
slow or dead apiserver costs the sync loop nothing (kubelet's
kubernetes#139502 had a synchronous mirror delete block SyncPod for 30 s).

Tasks (under the agent's TaskGroup, via `run`):
- sync: while the link is down, one probe per backoff step (jittered); on
  the way up, a full resync (register the Node or find it, list this
  node's pods, reconcile, push every status); then every `batch_interval`,
  the incremental work: node status when it changed (or every
  `report_frequency`), mirror creates and deletes, changed pod statuses,
  new or repeated events.
- lease: renews `kube-node-lease/<node>` every `lease_renew_interval` (by
  the monotonic clock, so a wall-clock jump does not skip or storm renewals).
- watch: this node's pods, so a mirror an admin deletes is recreated at once.

Statuses and events are not queued as requests: the publisher and the
recorder hold the latest of each (coalesced per pod, bounded by the ring),
and what was last sent is remembered here, so an outage of any length ends
in one push per changed object.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from edgelet.api.annotations import CONFIG_HASH
from edgelet.mirror.client import STRATEGIC_MERGE, KubeClient, q
from edgelet.mirror.errors import ApiStatusError, MirrorError, Unreachable
from edgelet.mirror.node import (
    LEASE_NAMESPACE,
    PRESSURE_CONDITIONS,
    NodeFacts,
    advance_transitions,
    build_lease,
    build_node,
    build_node_status,
    format_time,
    status_fingerprint,
)
from edgelet.mirror.reconcile import (
    MirrorInfo,
    build_mirror_pod,
    build_status_patch,
    decide,
    key_of,
    mirror_info,
    statuses_to_push,
)
from edgelet.util.backoff import Backoff
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.events import Event, EventRecorder
    from edgelet.status.publisher import StatusPublisher
    from edgelet.util.clock import Clock

log = get_logger(__name__)

STATUS_BURST = 20  # pod status patches per batch: an outage's backlog drains at this pace
EVENT_BURST = 25  # events posted per batch
WATCH_TIMEOUT = 300  # seconds; the server ends a watch after this and we start the next one


class MirrorState(msgspec.Struct, kw_only=True):
    """What `edgelet node` shows."""

    node: str
    server: str
    link: str = "connecting"  # connecting | up | down
    registered: bool = False
    node_uid: str = ""
    last_error: str = ""
    last_lease_renewal: float | None = None  # wall time
    last_status_update: float | None = None
    last_resync: float | None = None
    resyncs: int = 0
    mirror_pods: int = 0
    queue_depth: int = 0
    requests: int = 0


class _Down(Exception):
    """Internal: the link went down in the middle of a step (the cause is already recorded)."""


class MirrorManager:
    def __init__(
        self,
        client: KubeClient,
        *,
        node: str,
        server: str,
        facts: Callable[[], NodeFacts],
        publisher: StatusPublisher,
        events: EventRecorder,
        clock: Clock,
        is_ready: Callable[[], tuple[bool, str]],
        register_node: bool = True,
        status_frequency: float = 10.0,
        report_frequency: float = 300.0,
        lease_duration: int = 40,
        lease_renew_interval: float = 10.0,
        batch_interval: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        self._c = client
        self._node = node
        self._facts = facts
        self._publisher = publisher
        self._events = events
        self._clock = clock
        self._is_ready = is_ready
        self._register = register_node
        self._status_frequency = status_frequency
        self._report_frequency = report_frequency
        self._lease_duration = lease_duration
        self._lease_interval = lease_renew_interval
        self._batch = batch_interval
        self._rng = rng or random.Random()
        cap = max(1.0, min(30.0, 3 * lease_renew_interval))
        self._backoff = Backoff(initial=min(0.2, cap), cap=cap, reset_after=cap * 4)
        self._item_backoff = Backoff(initial=1.0, cap=60.0, reset_after=300.0)
        self.state = MirrorState(node=node, server=server)
        self._up = asyncio.Event()
        self._wake = asyncio.Event()
        self._node_uid = ""
        self._mirrors: dict[str, MirrorInfo] = {}
        self._pushed: dict[str, tuple[str, str]] = {}  # key -> (mirror uid, status fingerprint)
        self._posted: dict[tuple, tuple[str, int]] = {}  # event key -> (api name, count posted)
        self._list_rv = ""
        self._lease: dict[str, Any] | None = None
        self._node_fp = ""
        self._next_status_check = 0.0
        self._last_report = -1e18
        self._ready: bool | None = None
        self._transitions: dict[str, float] = {}
        self._last_status: dict[str, bool] = {}  # condition type -> status at the last check

    # --- public -------------------------------------------------------------------------------------------

    def snapshot(self) -> MirrorState:
        self.state.requests = self._c.requests
        self.state.mirror_pods = len(self._mirrors)
        self.state.queue_depth = self._queue_depth()
        return self.state

    def wake(self) -> None:
        """Something changed (a status, an event): do the incremental work now rather than at the next batch."""
        self._wake.set()

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._sync_loop(), name="mirror-sync")
                tg.create_task(self._lease_loop(), name="mirror-lease")
                tg.create_task(self._watch_loop(), name="mirror-watch")
        finally:
            await self._c.aclose()

    # --- link state ---------------------------------------------------------------------------------------

    def _went_down(self, exc: MirrorError) -> None:
        was_up = self._up.is_set()
        self._up.clear()
        self.state.link = "down"
        error = _describe(exc)
        # Logged when the link goes down or the reason changes, not on every probe of a months-long outage.
        if was_up or error != self.state.last_error:
            if isinstance(exc, ApiStatusError) and exc.is_auth:
                log.error(
                    "The apiserver refuses this node; pods keep running, statuses and events wait",
                    node=self._node,
                    err=error,
                )
            else:
                log.warning(
                    "apiserver unreachable; pods keep running, statuses and events wait", node=self._node, err=error
                )
        self.state.last_error = error

    def _went_up(self) -> None:
        self._backoff.reset("link")
        self.state.link = "up"
        self.state.last_error = ""
        self._up.set()

    def _link_error(self, exc: MirrorError) -> bool:
        """Whether `exc` means the apiserver as a whole is not usable (rather than one object being refused)."""
        return isinstance(exc, Unreachable) or (
            isinstance(exc, ApiStatusError) and (exc.status in (401, 403, 429) or exc.status >= 500)
        )

    async def _sleep_backoff(self) -> None:
        delay = self._backoff.next("link", self._clock.monotonic())
        await self._clock.sleep(delay * self._rng.uniform(0.8, 1.2))

    # --- sync ---------------------------------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        while True:
            if not self._up.is_set():
                try:
                    await self._resync()
                except MirrorError as exc:
                    self._went_down(exc)
                    await self._sleep_backoff()
                    continue
                self._went_up()
            try:
                await self._step()
            except _Down:
                continue
            except MirrorError as exc:
                if self._link_error(exc):
                    self._went_down(exc)
                    continue
                log.warning("apiserver refused a request; retrying later", err=_describe(exc))
            self._wake.clear()
            try:
                async with asyncio.timeout(self._batch):  # not wait_for: it can swallow a cancellation
                    await self._wake.wait()
            except TimeoutError:
                pass
            # Batch: a burst of changes within one interval goes out as one round.
            await self._clock.sleep(min(self._batch, 0.2))

    async def _resync(self) -> None:
        """Register or find the Node, list this node's pods, and forget what was sent: everything goes again."""
        await self._ensure_node()
        listed = await self._c.request("GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={self._node}"})
        self._mirrors = {}
        for obj in listed.get("items") or []:
            info = mirror_info(obj)
            if info is not None:
                self._mirrors[key_of(obj)] = info
        self._list_rv = (listed.get("metadata") or {}).get("resourceVersion", "")
        self._pushed.clear()
        self._node_fp = ""
        self._next_status_check = 0.0
        self._item_backoff = Backoff(initial=1.0, cap=60.0, reset_after=300.0)
        self.state.resyncs += 1
        self.state.last_resync = self._clock.now()
        log.info("Resynced with the apiserver", node=self._node, mirrors=len(self._mirrors), resync=self.state.resyncs)

    async def _ensure_node(self) -> None:
        path = f"/api/v1/nodes/{q(self._node)}"
        try:
            node = await self._c.request("GET", path)
        except ApiStatusError as exc:
            if exc.status != 404:
                raise
            if not self._register:
                raise
            facts = self._facts()
            body = build_node(facts)
            body["status"] = build_node_status(
                facts, ready=False, ready_message="edgelet is starting", now=self._clock.now()
            )
            try:
                node = await self._c.request("POST", "/api/v1/nodes", body)
                log.info("Registered the node", node=self._node, uid=node["metadata"]["uid"])
                self._events.normal(
                    _node_ref(self._node, node["metadata"]["uid"]),
                    "RegisteredNode",
                    f"Node {self._node} registered by edgelet",
                )
            except ApiStatusError as exc2:
                if exc2.status != 409:
                    raise
                node = await self._c.request("GET", path)
        uid = node["metadata"]["uid"]
        if uid != self._node_uid and self._node_uid:
            log.warning(
                "The Node was replaced (deleted by an admin?); mirror pods follow the new one",
                node=self._node,
                old_uid=self._node_uid,
                uid=uid,
            )
            self._lease = None
        self._node_uid = uid
        self.state.node_uid = uid
        self.state.registered = True

    async def _step(self) -> None:
        now = self._clock.monotonic()
        if now >= self._next_status_check:
            self._next_status_check = now + self._status_frequency
            await self._update_node_status(now)
        await self._reconcile_mirrors()
        await self._push_statuses()
        await self._post_events()

    async def _update_node_status(self, mono: float) -> None:
        ready, message = self._is_ready()
        wall = self._clock.now()
        if ready != self._ready:
            if self._ready is not None or ready:
                self._events.normal(
                    _node_ref(self._node, self._node_uid),
                    "NodeReady" if ready else "NodeNotReady",
                    f"Node {self._node} status is now: {'NodeReady' if ready else 'NodeNotReady'}",
                )
            self._ready = ready
        facts = self._facts()
        now_status = {t: t in facts.pressure for t, _, _ in PRESSURE_CONDITIONS}
        now_status["Ready"] = ready
        if facts.tunnel is not None:
            now_status["TunnelReady"] = facts.tunnel[0]
        self._transitions, self._last_status = advance_transitions(
            self._transitions, self._last_status, now_status, wall
        )
        status = build_node_status(facts, ready=ready, ready_message=message, now=wall, transitions=self._transitions)
        fp = status_fingerprint(status)
        if fp == self._node_fp and mono - self._last_report < self._report_frequency:
            return
        try:
            await self._c.request(
                "PATCH", f"/api/v1/nodes/{q(self._node)}/status", {"status": status}, content_type=STRATEGIC_MERGE
            )
        except ApiStatusError as exc:
            if exc.status == 404:
                log.warning("The Node is gone (deleted by an admin?); registering it again", node=self._node)
                self.state.registered = False
                self._up.clear()
                self.state.link = "connecting"
                raise _Down from exc
            raise
        self._node_fp = fp
        self._last_report = mono
        self.state.last_status_update = wall

    def _static_hashes(self) -> tuple[dict[str, str], dict[str, Any]]:
        hashes: dict[str, str] = {}
        entries: dict[str, Any] = {}
        for e in self._publisher.entries():
            meta = e.pod.metadata
            if meta is None:
                continue
            key = f"{meta.namespace or 'default'}/{meta.name}"
            hashes[key] = (meta.annotations or {}).get(CONFIG_HASH) or meta.uid or ""
            entries[key] = e
        return hashes, entries

    async def _reconcile_mirrors(self) -> None:
        hashes, entries = self._static_hashes()
        actions = decide(hashes, self._mirrors, self._node_uid)
        mono = self._clock.monotonic()
        for key, uid in actions.delete:
            if self._item_backoff.is_in_backoff(("delete", key), mono):
                continue
            ns, name = key.split("/", 1)
            try:
                await self._c.request(
                    "DELETE",
                    f"/api/v1/namespaces/{q(ns)}/pods/{q(name)}",
                    {
                        "kind": "DeleteOptions",
                        "apiVersion": "v1",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": uid},
                    },
                )
                log.info("Deleted mirror pod", pod=key, uid=uid)
            except ApiStatusError as exc:
                if exc.status not in (404, 409):
                    if self._link_error(exc):
                        raise
                    self._item_backoff.next(("delete", key), mono)
                    log.warning("Failed to delete mirror pod", pod=key, err=_describe(exc))
                    continue
            if self._mirrors.get(key, MirrorInfo(uid="", hash="")).uid == uid:
                self._mirrors.pop(key, None)
            self._pushed.pop(key, None)
        for key in actions.create:
            if key in self._mirrors or self._item_backoff.is_in_backoff(("create", key), mono):
                continue
            entry = entries[key]
            body = build_mirror_pod(entry.row.pod or {}, self._node, self._node_uid)
            ns = key.split("/", 1)[0]
            try:
                obj = await self._c.request("POST", f"/api/v1/namespaces/{q(ns)}/pods", body)
                log.info("Created mirror pod", pod=key, uid=obj["metadata"]["uid"])
            except ApiStatusError as exc:
                if exc.status == 409:  # one exists we did not know of: read it, decide next round
                    obj = await self._c.request("GET", f"/api/v1/namespaces/{q(ns)}/pods/{q(key.split('/', 1)[1])}")
                elif self._link_error(exc) and not admission_refused(exc):
                    raise
                else:
                    self._item_backoff.next(("create", key), mono)
                    log.warning("Failed to create mirror pod", pod=key, err=_describe(exc))
                    continue
            info = mirror_info(obj)
            if info is not None:
                self._mirrors[key] = info
        self.state.mirror_pods = len(self._mirrors)

    def _current_statuses(self) -> tuple[dict[str, str], dict[str, Any]]:
        fps: dict[str, str] = {}
        encoded: dict[str, Any] = {}
        for e in self._publisher.entries():
            if e.pod.metadata is None:
                continue
            key = f"{e.pod.metadata.namespace or 'default'}/{e.pod.metadata.name}"
            data = msgspec.json.encode(e.status)
            fps[key] = hashlib.sha1(data).hexdigest()
            encoded[key] = e.status
        return fps, encoded

    async def _push_statuses(self) -> None:
        fps, statuses = self._current_statuses()
        for key in statuses_to_push(fps, self._pushed, self._mirrors)[:STATUS_BURST]:
            m = self._mirrors[key]
            ns, name = key.split("/", 1)
            patch = build_status_patch(msgspec.to_builtins(statuses[key]), m.uid)
            try:
                await self._c.request(
                    "PATCH", f"/api/v1/namespaces/{q(ns)}/pods/{q(name)}/status", patch, content_type=STRATEGIC_MERGE
                )
            except ApiStatusError as exc:
                if self._link_error(exc):
                    raise
                if exc.status in (404, 409, 422):  # the mirror went or was replaced: the watch or a GET tells
                    self._mirrors.pop(key, None)
                    continue
                raise
            self._pushed[key] = (m.uid, fps[key])

    def _pending_events(self) -> list[Event]:
        out = []
        for ev in self._events.events():
            posted = self._posted.get(_event_key(ev))
            if posted is None or posted[1] < ev.count:
                out.append(ev)
        return out

    def _queue_depth(self) -> int:
        fps, _ = self._current_statuses()
        return len(statuses_to_push(fps, self._pushed, self._mirrors)) + len(self._pending_events())

    async def _post_events(self) -> None:
        sent = 0
        static, _ = self._static_hashes()
        for ev in self._pending_events():
            if sent >= EVENT_BURST:
                break
            obj = ev.object
            if obj.kind == "Pod":
                key = f"{obj.namespace or 'default'}/{obj.name}"
                m = self._mirrors.get(key)
                if m is None:
                    if key not in static:  # the pod is gone (or never ran): its events have nothing to name
                        self._posted[_event_key(ev)] = ("", ev.count)
                    continue  # posted once its mirror exists
                ref = {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "namespace": obj.namespace or "default",
                    "name": obj.name,
                    "uid": m.uid,
                }
                ns = obj.namespace or "default"
            else:
                ref = {"kind": obj.kind, "apiVersion": "v1", "name": obj.name or self._node, "uid": self._node_uid}
                ns = "default"
            if obj.field_path:
                ref["fieldPath"] = obj.field_path
            k = _event_key(ev)
            posted = self._posted.get(k)
            try:
                if posted is None:
                    name = f"{ref['name']}.{int(ev.first_timestamp * 1e9):x}{hashlib.sha1(repr(k).encode()).hexdigest()[:6]}"
                    await self._c.request(
                        "POST",
                        f"/api/v1/namespaces/{q(ns)}/events",
                        {
                            "apiVersion": "v1",
                            "kind": "Event",
                            "metadata": {"name": name, "namespace": ns},
                            "involvedObject": ref,
                            "reason": ev.reason,
                            "message": ev.message,
                            "type": ev.type,
                            "count": ev.count,
                            "firstTimestamp": format_time(ev.first_timestamp),
                            "lastTimestamp": format_time(ev.last_timestamp),
                            "source": {"component": "kubelet", "host": self._node},
                        },
                    )
                else:
                    name = posted[0]
                    await self._c.request(
                        "PATCH",
                        f"/api/v1/namespaces/{q(ns)}/events/{q(name)}",
                        {"count": ev.count, "lastTimestamp": format_time(ev.last_timestamp)},
                        content_type=STRATEGIC_MERGE,
                    )
            except ApiStatusError as exc:
                if self._link_error(exc):
                    raise
                # An event the server refuses (or one that expired there) is not worth a retry loop.
                log.debug("Event not posted", reason=ev.reason, err=_describe(exc))
                name = posted[0] if posted else ""
            self._posted[k] = (name, ev.count)
            sent += 1
        if len(self._posted) > 4 * 1000:  # forget what fell out of the recorder's ring
            live = {_event_key(e) for e in self._events.events()}
            self._posted = {k: v for k, v in self._posted.items() if k in live}

    # --- lease --------------------------------------------------------------------------------------------

    async def _lease_loop(self) -> None:
        # Cadence by the monotonic clock: a wall clock set back a year (no RTC, then NTP) neither stalls nor
        # bunches renewals; renewTime itself is the wall time, the only one the cluster can read.
        next_renew = self._clock.monotonic()
        while True:
            await self._up.wait()
            delay = next_renew - self._clock.monotonic()
            if delay > 0:
                await self._clock.sleep(delay)
                continue
            try:
                await self._renew_lease()
                next_renew = self._clock.monotonic() + self._lease_interval
            except MirrorError as exc:
                if self._link_error(exc):
                    self._went_down(exc)
                else:
                    log.warning("Failed to renew the node lease", err=_describe(exc))
                next_renew = self._clock.monotonic() + min(self._lease_interval, 1.0)

    async def _renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{q(self._node)}"
        for _ in range(3):
            if self._lease is None:
                try:
                    self._lease = await self._c.request("GET", path)
                except ApiStatusError as exc:
                    if exc.status != 404:
                        raise
                    body = build_lease(self._node, self._node_uid, duration=self._lease_duration, now=self._clock.now())
                    try:
                        self._lease = await self._c.request(
                            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", body
                        )
                    except ApiStatusError as exc2:
                        if exc2.status == 409:
                            continue
                        raise
                    self._lease_renewed()
                    # A missing Lease can mean the Node went with it: check the Node at once.
                    self._next_status_check = 0.0
                    self._last_report = -1e18
                    return
            rv = (self._lease.get("metadata") or {}).get("resourceVersion", "")
            body = build_lease(
                self._node, self._node_uid, duration=self._lease_duration, now=self._clock.now(), resource_version=rv
            )
            try:
                self._lease = await self._c.request("PUT", path, body)
            except ApiStatusError as exc:
                if exc.status in (404, 409):  # gone, or changed under us: re-read
                    self._lease = None
                    continue
                raise
            self._lease_renewed()
            return
        raise ApiStatusError(409, "lease kept changing under us", method="PUT", path=path, reason="Conflict")

    def _lease_renewed(self) -> None:
        self.state.last_lease_renewal = self._clock.now()

    # --- watch --------------------------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        while True:
            await self._up.wait()
            rv = self._list_rv
            try:
                async for ev in self._c.watch(
                    "/api/v1/pods",
                    {
                        "fieldSelector": f"spec.nodeName={self._node}",
                        "resourceVersion": rv,
                        "allowWatchBookmarks": "true",
                        "timeoutSeconds": str(WATCH_TIMEOUT),
                    },
                    timeout=WATCH_TIMEOUT + 30,
                ):
                    self._on_watch_event(ev)
            except MirrorError as exc:
                if isinstance(exc, ApiStatusError) and exc.status == 410:
                    self._up.clear()  # our resourceVersion is too old: a full resync
                    self.state.link = "connecting"
                    continue
                if self._link_error(exc):
                    self._went_down(exc)
                    continue
                log.warning("Watch of this node's pods failed", err=_describe(exc))
                await self._clock.sleep(self._lease_interval)

    def _on_watch_event(self, ev: dict[str, Any]) -> None:
        kind, obj = ev.get("type"), ev.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                self._up.clear()
                self.state.link = "connecting"
            return
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self._list_rv = rv
        if kind == "BOOKMARK":
            return
        key = key_of(obj)
        info = mirror_info(obj)
        if info is None:
            return
        known = self._mirrors.get(key)
        if kind == "DELETED":
            if known is not None and known.uid == info.uid:
                self._mirrors.pop(key, None)
                self._pushed.pop(key, None)
        else:
            self._mirrors[key] = info
        self._wake.set()


def _event_key(ev: Event) -> tuple:
    return (ev.object, ev.type, ev.reason, ev.message, ev.first_timestamp)


def _node_ref(node: str, uid: str) -> Any:
    from edgelet.events import InvolvedObject

    return InvolvedObject(kind="Node", name=node, uid=uid)


def admission_refused(exc: BaseException) -> bool:
    """A 403 that refuses this one pod (an admission plugin's "pod rejected: ...", e.g. a runtimeClassName whose
    RuntimeClass the cluster lacks), not the node's identity: the other mirrors and statuses go on."""
    return isinstance(exc, ApiStatusError) and exc.status == 403 and "pod rejected:" in exc.server_message


def _describe(exc: BaseException) -> str:
    if admission_refused(exc) and "RuntimeClass" in str(exc):
        return (
            f"{exc} (static pods name edgelet's runtime handler in runtimeClassName; the cluster's RuntimeClass"
            " admission wants the object: create a RuntimeClass of that name whose handler is the same name)"
        )
    if admission_refused(exc):
        return str(exc)
    if isinstance(exc, ApiStatusError) and exc.status == 403:
        return f"{exc} (forbidden: the node's identity must be system:node:<name> in group system:nodes)"
    return str(exc)
