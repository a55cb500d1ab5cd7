"""Runs an agent: its components built in dependency order (by edgelet.wiring), the task group, signals and
shutdown, and --runonce."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from edgelet import agentprocess, wiring
from edgelet.util.clock import clock_from_environ
from edgelet.util.log import configure, get_logger
from edgelet.util.memory import limit_arenas, trim, trim_periodically
from edgelet.util.table import format_table

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from edgelet.api.types import Pod, PodStatus
    from edgelet.cgroups.controllers import Admission
    from edgelet.container.types import PodRuntimeStatus
    from edgelet.sdnotify import Notifier
    from edgelet.settings import Settings
    from edgelet.sources import SourceSnapshot
    from edgelet.status.runonce import RunonceVerdict
    from edgelet.sync.workers import SyncResult

log = get_logger("edgelet")


class Agent:
    """Every long-lived component of a running edgelet, built from Settings (by `edgelet.wiring`)."""

    def __init__(self, settings: Settings) -> None:
        limit_arenas()  # before the worker threads exist, so they share arenas
        self.settings = settings
        self.clock = clock_from_environ(os.environ)
        self.paths = settings.runtime_paths()
        wiring.prepare_state_dirs(settings, self.paths)
        # In dependency order: each phase uses what the ones before it built.
        self._build_images_and_runtime()
        self._build_sync()
        self._build_reporting()

    def _build_images_and_runtime(self) -> None:
        """Trust, events, the image store and its import directories, the runtime and PLEG, pulls and image GC."""
        from edgelet.events import EventRecorder, events_path
        from edgelet.images.manager import ImageManager
        from edgelet.pleg import Pleg
        from edgelet.runtime.logrotation import LogRotator
        from edgelet.util.backoff import Backoff

        settings, clock, paths = self.settings, self.clock, self.paths
        self.trust = wiring.load_trust(settings, paths, clock)
        self.events = EventRecorder(clock, events_path(paths.run_dir))
        self.images = wiring.open_image_store(settings)
        self.import_dir, self.card_import_dir = wiring.build_import_dirs(
            settings, self.images, clock, self.trust, self.events
        )
        # The local API's metrics (not for --runonce, which serves nobody); the runtime reports into them.
        self.metrics = None
        if settings.enable_server and not settings.runonce:
            from edgelet.server.metrics import Metrics

            self.metrics = Metrics(clock)
        # The accepted ConfigMaps and Secrets: the sync loop replaces them, the runtime reads them.
        self.config_objects = wiring.build_config_objects(paths)
        self.runtime = wiring.build_runtime(
            settings,
            paths,
            clock,
            self.images,
            self.metrics,
            on_warning=self._runtime_warning,
            config_objects=self.config_objects,
        )
        self.log_rotator = LogRotator(
            paths,
            clock,
            max_size=settings.container_log_max_size,
            max_files=settings.container_log_max_files,
            interval=settings.container_log_monitor_interval,
        )
        self.pleg = Pleg(self.runtime, paths.exit_dir, clock=clock)
        self._networks_marked = float("-inf")  # monotonic time a CNI CHECK last marked sandboxes broken
        self.backoff = Backoff()
        self.puller = wiring.build_puller(settings, self.images, clock)
        self.image_manager = ImageManager(
            self.images, self.puller, events=self.events, backoff=self.backoff, clock=clock
        )
        self.image_gc = wiring.build_image_gc(settings, self.images, self._images_in_use, clock)

    def _build_sync(self) -> None:
        """The rollout, the status publisher, probes, the syncer, the per-pod workers, the sync loop and the
        manifest files' source."""
        from edgelet.probes.manager import ProbeManager
        from edgelet.status.publisher import StatusPublisher
        from edgelet.sync.loop import SyncLoop
        from edgelet.sync.syncpod import Syncer
        from edgelet.sync.workers import PodWorkers

        settings, clock, paths = self.settings, self.clock, self.paths
        self.rollout = wiring.build_rollout(
            settings,
            paths,
            clock,
            self.events,
            self.image_manager,
            self.backoff,
            self.pleg,
            status_of=self._published_status,
        )
        # `pods -o wide` and `describe pod` show pulls under way, and the rollout's word on a pod.
        self.publisher = StatusPublisher(
            paths.root_dir,
            settings.node_name,
            clock,
            pull_progress=self.puller.progress,
            rollout_condition=self.rollout.pod_condition,
        )
        # The probes, the syncer, the workers and the loop call each other: the later ones are reached when called.
        self.probes = ProbeManager(
            self.runtime,
            clock,
            self.events,
            state_of=lambda uid: self.syncer.state(uid),
            on_change=lambda uid: self.loop.emit_probe_result(uid),
        )
        self.syncer = Syncer(
            self.runtime,
            self.image_manager,  # type: ignore[arg-type]
            self.backoff,
            clock,
            publish=self.publisher.update if self.metrics is None else self.metrics.observing_publish(self.publisher),
            events=self.events,
            probes=self.probes,
            admit=self._admit,
            newer_than=self._relisted_newer_than,
            relisted_after=self._relisted_after,
        )
        # Surge: the new version starts beside the old one.
        self.workers = PodWorkers(
            self.syncer,
            on_result=self._on_sync_result,
            on_terminated=lambda uid: self.loop.on_terminated(uid),
            clock=clock,
            may_run_beside=self.rollout.is_surging,
        )
        self.loop = SyncLoop(
            workers=self.workers,
            publisher=self.publisher,
            clock=clock,
            expected_sources={"file"} | ({"http"} if settings.manifest_url else set()),
            runtime_uids=self.pleg.uids,
            events=self.events,
            rollout=self.rollout,
            objects=self.config_objects,
        )
        self.file_source = wiring.build_file_sources(settings, clock, self.trust)
        wiring.warn_about_card(settings)

    def _build_reporting(self) -> None:
        """What reports and serves (the tunnel, the mirror, the local and node APIs, the manifest URL) and what
        reacts to the node (eviction, graceful shutdown)."""
        settings, clock, paths = self.settings, self.clock, self.paths
        self._base_facts = None  # the host as the Node reports it, read once (_node_facts)
        self._runtime_version = ""  # the OCI runtime's version line, read when the mirror starts
        self.mirror = None
        # The WireGuard tunnel, before the mirror and the node API: the Node's InternalIP and the node API's
        # certificate name its address.
        self.tunnel = None if settings.runonce else wiring.build_tunnel(settings, clock)
        self.tunnel_address = self.tunnel.address if self.tunnel is not None else None
        if settings.kubeconfig is not None and not settings.runonce:
            self.mirror = wiring.build_mirror(
                settings,
                publisher=self.publisher,
                events=self.events,
                clock=clock,
                facts=self._node_facts,
                is_ready=self._is_ready,
            )
        self.eviction = wiring.build_eviction(
            settings, paths, clock, loop=self.loop, syncer=self.syncer, runtime=self.runtime, image_gc=self.image_gc
        )
        self.node_shutdown = (
            None
            if settings.runonce
            else wiring.build_node_shutdown(settings, clock, loop=self.loop, syncer=self.syncer, runtime=self.runtime)
        )
        self.api_server = None
        self.node_api = None
        if self.metrics is not None:
            self.stats, self.api_server, self.node_api = wiring.build_api(
                settings,
                paths,
                clock,
                metrics=self.metrics,
                publisher=self.publisher,
                events=self.events,
                pleg=self.pleg,
                loop=self.loop,
                runtime=self.runtime,
                mirror=self.mirror,
                rollout=self.rollout,
                node_conditions=self._node_conditions,
                object_reports=self._object_reports,
                tunnel=self.tunnel,
            )
        self.update = None if settings.runonce else self._build_update()
        if self.update is not None and self.metrics is not None:
            self.metrics.update_outcomes = self.update.outcomes
        self.http_source = wiring.build_http_source(settings, paths, clock, self.trust)

    def _build_update(self):
        """Self-update: releases from the card and --update-url, judged by this agent's trial."""
        from edgelet.update.build import build_update_manager

        mirror = self.mirror
        return build_update_manager(
            self.settings,
            root_dir=self.paths.root_dir,
            clock=self.clock,
            events=self.events,
            keys=self.trust.keys if self.trust is not None else None,
            first_sync_done=self.loop.first_sync_done,
            runtime_pods=self.pleg.pods,
            healthz_served=self.api_server is not None,
            has_apiserver=mirror is not None,
            last_lease_renewal=lambda: mirror.state.last_lease_renewal if mirror is not None else None,
        )

    def _published_status(self, uid: str) -> PodStatus | None:
        """The status last published for the pod (the rollout's health gate reads it)."""
        entry = self.publisher.get(uid)
        return entry.status if entry is not None else None

    def _admit(self, pod: Pod) -> Admission | None:
        """The runtime's word on whether the pod's limits can be applied here (cgroup controllers)."""
        return self.runtime.admit(pod)

    async def _images_in_use(self) -> set[str]:
        """The image references of every container the runtime holds (image GC keeps those)."""
        used = {c.image for rt in (await self.runtime.list_pods()).values() for c in rt.containers if c.image}
        # A last good version's images stay, whether or not it runs: a rollback must not need a pull.
        return used | self.rollout.kept_images()

    def _runtime_warning(self, pod: Pod, container: str | None, reason: str, message: str) -> None:
        """The runtime's word on what a container runs without although asked (an AppArmor default not loaded)."""
        from edgelet.events import pod_ref

        self.events.warning(pod_ref(pod, container), reason, message)

    def _relisted_newer_than(self, uid: str, since: float) -> PodRuntimeStatus | None:
        """PLEG's last relist of the pod for a sync's before-state, if newer than `since` and than the last
        time a network CHECK marked sandboxes broken (that mark is applied when the runtime lists)."""
        return self.pleg.status_newer_than(uid, max(since, self._networks_marked))

    async def _relisted_after(self, uid: str, since: float) -> PodRuntimeStatus:
        """The pod as a relist that asked runc after `since` (and after the last network CHECK's mark) saw it: a
        sync's after-state, from the relist it shares with the syncs waiting beside it and with PLEG."""
        from edgelet.container.types import PodRuntimeStatus

        status = (await self.pleg.pods_newer_than(max(since, self._networks_marked))).get(uid)
        return status if status is not None else PodRuntimeStatus(uid=uid)

    def _on_sync_result(self, uid: str, result: SyncResult) -> None:
        self.loop.on_result(uid, result)
        # A sync that created or stopped containers: relist soon, so PLEG knows them (between
        # relists it only checks the processes it knows, see pleg.FULL_RELIST_EVERY) — unless the
        # sync read its after-state from a relist, which PLEG has then seen. A resync that changed
        # nothing (a pull back-off, say, every second) costs no `runc list`.
        if result.changed and not result.relisted:
            self.pleg.kick()

    async def run(self, notifier: Notifier | None = None) -> None:
        """Run until cancelled; cancellation stops edgelet and leaves every pod running.

        With a `notifier` (systemd's Type=notify): READY=1 once the sync loop
        has run its first iteration, WATCHDOG=1 every half WatchdogSec from
        the start (the image import before it can be long), STOPPING=1 when
        shutting down.
        """
        from edgelet.sdnotify import Notifier

        notifier = notifier if notifier is not None else Notifier(None)
        _small_executor()
        watchdog = asyncio.create_task(notifier.run_watchdog(self.clock), name="sd-watchdog")
        try:
            if self.api_server is not None:
                await self.api_server.start()  # first, so `edgelet pods` reaches a starting agent
            node_api = await self.node_api.start() if self.node_api is not None else None
            # Each step that moves extends systemd's (short) start timeout; a hung one is killed by it.
            await asyncio.to_thread(self._import_all, notifier.progress)
            notifier.progress()
            await self.pleg.adopt()  # adopt what runs before the first config arrives
            notifier.progress()
            await self._release_stale_networks()
            notifier.progress()
            if self.update is not None:
                self.update.begin()  # a rollback the launcher made is recorded; a trial of this release is judged
            log.info(
                "edgelet started",
                node=self.settings.node_name,
                manifests=",".join(str(p) for p in self.file_source.paths),
                adopted=len(self.pleg.uids()),
            )
            trim()  # what importing and the image scan allocated only for a moment
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._notify_ready(notifier), name="sd-ready")
                tg.create_task(self.loop.run(), name="syncloop")
                if self.api_server is not None:
                    tg.create_task(self.api_server.run(), name="api")
                if node_api is not None:
                    tg.create_task(node_api.run(), name="node-api")
                tg.create_task(self.pleg.run(self.loop.emit_lifecycle), name="pleg")
                tg.create_task(self.probes.run(), name="probes")
                tg.create_task(self.publisher.run(), name="status")
                tg.create_task(self.events.run(), name="events")
                tg.create_task(self.file_source.run(self.loop.emit_config), name="source-file")
                if self.http_source is not None:
                    tg.create_task(self.http_source.run(self.loop.emit_config), name="source-http")
                tg.create_task(self.import_dir.run(self.loop.resync_all), name="image-import")
                if self.card_import_dir is not None:
                    tg.create_task(self.card_import_dir.run(self.loop.resync_all), name="image-import-card")
                tg.create_task(self.image_gc.run(), name="image-gc")
                tg.create_task(self.log_rotator.run(), name="log-rotation")
                if self.eviction is not None:
                    tg.create_task(self.eviction.run(), name="eviction")
                if self.node_shutdown is not None:
                    tg.create_task(self.node_shutdown.run(), name="node-shutdown")
                tg.create_task(trim_periodically(self.clock), name="memory-trim")
                if self.settings.cni_check_period > 0:
                    tg.create_task(self._check_networks(), name="cni-check")
                if self.mirror is not None:
                    tg.create_task(self._run_mirror(), name="mirror")
                if self.tunnel is not None:
                    tg.create_task(self.tunnel.keep_up(), name="tunnel")
                if self.update is not None:
                    tg.create_task(self.update.run(), name="self-update")
        finally:
            notifier.stopping()
            watchdog.cancel()
            if self.api_server is not None:
                await self.api_server.close()  # removes the socket: the CLI reads the files again
            await self.workers.shutdown()
            self.publisher.flush()
            self.events.flush()

    async def _release_stale_networks(self) -> None:
        """What a crash or power cut left goes first: pod networks (addresses, rules, namespaces), and exit files
        of containers a killed removal left behind."""
        try:
            released = await self.runtime.cleanup_networks()
        except Exception as exc:
            log.warning("Cannot release stale pod networks", err=str(exc))
            return
        if released:
            log.info("Released the networks of sandboxes that are gone", count=released)
        try:
            swept = await self.runtime.remove_stray_files()
        except Exception as exc:
            log.warning("Cannot sweep stray exit files", err=str(exc))
            return
        if swept:
            log.info("Removed the exit files, sockets and exec scratch of what is gone", count=swept)

    async def _check_networks(self) -> None:
        """Housekeeping of pod networks: at each `cni_check_period`, CNI CHECK of the sandboxes whose links a
        notification said changed, or whose rare safety CHECK is due (network.checkplan); a pod whose network
        is broken is told so and synced, and its sync replaces the sandbox (kubelet's answer to a sandbox
        that is not ready)."""
        from edgelet.events import pod_ref
        from edgelet.network.checkplan import checked, due, first

        def running(pods: Mapping[str, PodRuntimeStatus]) -> set[str]:
            return {s.id for p in pods.values() for s in p.sandboxes if s.state == "running"}

        plan = first(running(self.pleg.pods()))
        while True:
            await self.clock.sleep(self.settings.cni_check_period)
            pods = self.pleg.pods()
            try:
                marked = await self.runtime.network_changes(pods)
            except Exception as exc:
                log.warning("Cannot watch pod networks' links", err=str(exc))
                marked = set()
            sandboxes, plan = due(plan, running(pods), marked)
            if not sandboxes:
                continue
            try:
                broken = await self.runtime.check_networks(pods, set(sandboxes))
            except Exception as exc:
                log.warning("Cannot check pod networks", err=str(exc))
                plan = checked(plan, sandboxes, ran=False)
                continue
            plan = checked(plan, sandboxes, ran=True)
            if broken:
                # The runtime marks those sandboxes not ready from now on; a relist before this does not show it.
                self._networks_marked = self.clock.monotonic()
            if not broken:
                continue
            desired = self.loop.desired()
            for uid, why in broken.items():
                log.warning("Pod network check failed; the sandbox will be re-created", uid=uid, err=why)
                pod = desired.get(uid)
                if pod is not None:
                    self.events.warning(
                        pod_ref(pod, None),
                        "SandboxChanged",
                        f"Pod sandbox network check failed ({why}); it will be killed and re-created.",
                    )
            self.loop.emit_lifecycle(broken)

    async def _run_mirror(self) -> None:
        """The apiserver reporting; it may fail on its own without taking a pod (or the agent) with it."""
        from edgelet.util.proc import version_line

        assert self.mirror is not None
        # The one version probe (util.proc), as `edgelet version` and `edgelet check` use.
        line = await asyncio.to_thread(version_line, self.settings.runtime)
        if line is None or line.startswith("error: "):
            log.warning("Cannot read the OCI runtime's version", runtime=self.settings.runtime, err=line)
        else:
            self._runtime_version = line
        await self.mirror.run()

    def _node_facts(self):
        """The host as the Node reports it; images and disk size are read again each time."""
        import dataclasses

        from edgelet import __version__
        from edgelet.cgroups.allocatable import total_reserved
        from edgelet.eviction.thresholds import hard_reserved
        from edgelet.mirror.node import Taint, host_facts, parse_runc_version, with_reservations

        settings = self.settings
        if self._base_facts is None:
            host = host_facts(
                settings.node_name,
                root_dir=self.paths.root_dir,
                runtime_version=parse_runc_version(self._runtime_version),
                edgelet_version=self.update.label if self.update is not None else __version__,
                node_ip=settings.node_ip or self.tunnel_address or self.publisher.host_ip,
            )
            taints = tuple(Taint(key, value, effect) for key, value, effect in settings.register_with_taints)
            self._base_facts = with_reservations(
                dataclasses.replace(host, labels=settings.node_labels, taints=taints),
                total_reserved(settings.system_reserved, settings.kube_reserved),
                hard_reserved(settings.eviction_hard, memory_bytes=host.memory_bytes, disk_bytes=host.ephemeral_bytes),
            )
        images = tuple((tuple(r.references) + (r.id,), r.size) for r in self.images.list())
        pressure = self.eviction.conditions if self.eviction is not None else frozenset()
        port = self.node_api.port if self.node_api is not None else None
        return dataclasses.replace(
            self._base_facts,
            images=images,
            pressure=pressure,
            tunnel=self._tunnel_ready(),
            extra_conditions=tuple(tuple(c.items()) for c in [self.update.condition()] if c)
            if self.update is not None
            else (),
            **({"port": port} if port is not None else {}),
        )

    def _object_reports(self) -> list:
        """The accepted ConfigMaps and Secrets and the pods that use them, for `edgelet get`."""
        from edgelet.api.configobjects import object_reports

        return object_reports(self.config_objects.all(), self.loop.desired().values())

    def _node_conditions(self) -> list[dict[str, str]]:
        """The Node's conditions as the mirror reports them (for `edgelet node`, with or without an apiserver)."""
        from edgelet.mirror.node import node_conditions

        ready, message = self._is_ready()
        pressure = self.eviction.conditions if self.eviction is not None else frozenset()
        trial = self.update.condition() if self.update is not None else None
        conditions = node_conditions(pressure, ready=ready, ready_message=message, tunnel=self._tunnel_ready())
        return conditions + ([trial] if trial is not None else [])

    def _tunnel_ready(self) -> tuple[bool, str, str] | None:
        from edgelet.tunnel.device import readiness

        return readiness(self.tunnel.status, self.clock.now()) if self.tunnel is not None else None

    def _is_ready(self) -> tuple[bool, str]:
        last = self.loop.last_iteration
        if last is None:
            return False, "edgelet is starting"
        if self.clock.monotonic() - last > READY_STALE:
            return False, f"edgelet's sync loop has not run for {self.clock.monotonic() - last:.0f}s"
        return True, "edgelet is posting ready status"

    async def _notify_ready(self, notifier: Notifier) -> None:
        from edgelet.sdnotify import pods_summary

        await self.loop.first_sync_done.wait()
        if notifier.ready(pods_summary(self.publisher.entries())):
            log.info("Notified systemd: ready")
        if not notifier.enabled:
            return  # not under systemd: no status line to keep up to date, nothing to wake for
        # `systemctl status edgelet` shows the pods as they are, not as they were at start.
        shown = ""
        while True:
            await self.clock.sleep(STATUS_INTERVAL)
            text = pods_summary(self.publisher.entries())
            if text != shown:
                notifier.status(text)
                shown = text

    def _import_all(self, on_progress: Callable[[], object] | None = None) -> None:
        """Import what the import dirs hold (blocking): the node's, then the card's."""
        self.import_dir.scan(on_progress)
        if self.card_import_dir is not None:
            self.card_import_dir.scan(on_progress)

    async def run_once(self, out: TextIO) -> int:
        """--runonce: read every source once, run the pods, wait until they run or completed, report."""
        timeout = self.settings.runonce_timeout
        deadline = self.clock.monotonic() + timeout
        _small_executor()
        await self._read_once()
        verdict, gating = await self._run_until_judged(deadline)
        await self.workers.finish()  # resyncs end as at a stop of the daemon; terminations run to their end
        # The checkpoint and the events, each fsynced, side by side.
        writes = [(f.write, data) for f in (self.publisher, self.events) if (data := f.encode()) is not None]
        await asyncio.gather(*(asyncio.to_thread(write, data) for write, data in writes))
        return self._report_once(verdict, gating, timeout, out)

    async def _read_once(self) -> None:
        """--runonce's start: images, the runtime's state and every source read once, then the pods applied."""

        async def runtime_state() -> None:
            await self.pleg.adopt()
            await self._release_stale_networks()

        async def fetched() -> SourceSnapshot | None:
            if self.http_source is None:
                return None
            try:
                return await self.http_source.scan_once()
            finally:
                await self.http_source.aclose()

        # Images, the runtime's state and the sources do not depend on each other: read side by side (a cold
        # `runc list`, the manifests from a cold cache, a URL), and only then is anything synced.
        _, _, local, remote = await asyncio.gather(
            asyncio.to_thread(self._import_all), runtime_state(), self.file_source.scan_once(), fetched()
        )
        self.loop.apply_snapshot(local)
        if remote is not None:
            self.loop.apply_snapshot(remote)
        # Everything else the runtime holds is left over from an earlier configuration.
        self.loop.housekeeping()

    async def _run_until_judged(self, deadline: float) -> tuple[RunonceVerdict, list[str]]:
        """Run the loop and PLEG until every pod is judged (or `deadline`): the last verdict, and the pods whose
        health gate is still undecided."""
        # The daemon's loop and PLEG drive the pods (exits, back-offs, probe verdicts); the pods are judged
        # from what they publish as soon as their states are final (edgelet.status.runonce), not on a timer.
        from edgelet.status.runonce import note_running, note_started, running_ids, runonce_verdict

        started: dict[str, float] = {}  # containerID -> monotonic start of its process
        pids: dict[str, int] = {}
        self.publisher.observed = lambda rt: note_started(
            started, pids, rt.containers, self.clock.monotonic(), self.clock.now()
        )
        tasks = [
            asyncio.create_task(self.loop.run(), name="syncloop"),
            asyncio.create_task(self.pleg.run(self.loop.emit_lifecycle), name="pleg"),
        ]
        try:
            while True:
                # Judged on every publish, not once the workers are idle: the resyncs PLEG's events cause
                # change nothing a verdict needs, and a pod mid-sync is judged by what it published last.
                self.publisher.changed.clear()
                self.loop.iterated.clear()
                for t in tasks:
                    if t.done():
                        t.result()  # the loop or PLEG died: say why rather than wait for the timeout
                now = self.clock.monotonic()
                desired = self.loop.desired()
                statuses = {uid: (e.status if (e := self.publisher.get(uid)) is not None else None) for uid in desired}
                note_running(started, statuses.values(), now)
                # Whether each running process is still there, read now: the verdict does not wait for an
                # exit to reach PLEG, a sync and a status.
                gone = {
                    cid
                    for cid in running_ids(statuses.values())
                    if _instance_gone(self.paths.exit_dir, cid, pids.get(cid))
                }
                verdict = runonce_verdict(desired, statuses, started, now, gone=gone)
                # A changed pod at boot goes through the same health gate (the sync loop's rounds judge it):
                # runonce waits for its decision too.
                gating = self.rollout.unsettled()
                if verdict.done and not gating or now >= deadline:
                    break
                wake = deadline if verdict.next_check is None else min(deadline, verdict.next_check)
                # Woken by a status published, a container's window ending, or, while a gate decides (in the
                # sync loop's rounds), by the loop's next round.
                await _any_set(
                    [self.publisher.changed, *([self.loop.iterated] if gating else [])], max(0.0, wake - now)
                )
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.publisher.observed = None
        return verdict, gating

    def _report_once(self, verdict: RunonceVerdict, gating: list[str], timeout: float, out: TextIO) -> int:
        """--runonce's summary on `out`, and its exit status: 1 when a pod rolled back, a gate is undecided, or a
        pod neither runs nor completed."""
        print_runonce_summary(self.publisher, self.loop.config, out)
        rolled_back = [r for r in self.rollout.records() if r.phase in ("rolled-back", "rolling-back")]
        for r in rolled_back:
            print(f"rolled back: {r.name}: {r.reason}", file=out)
        if rolled_back or gating:
            if gating:
                print(
                    f"runonce: health gate not decided for: {', '.join(gating)} (gave up after {timeout:g}s)", file=out
                )
            print(f"runonce: {len(rolled_back)} pod(s) rolled back: {', '.join(r.name for r in rolled_back)}", file=out)
            return 1
        if verdict.failed or not verdict.done:
            bad = verdict.failed or verdict.pending
            print(
                f"runonce: {len(bad)} pod(s) not running or completed: {', '.join(bad)}"
                + ("" if verdict.done else f" (gave up after {timeout:g}s)"),
                file=out,
            )
            return 1
        return 0


async def _any_set(events: list[asyncio.Event], timeout: float) -> None:
    """Return once any of `events` is set, or after `timeout` seconds."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _instance_gone(exit_dir: Path, cid: str, pid: int | None) -> bool:
    """Whether a container instance's process has exited: its conmon wrote the exit file, or /proc shows the
    pid a zombie or no more (a container killed with its conmon leaves no exit file)."""
    from edgelet.status.runonce import exited_by_stat

    if (exit_dir / cid.removeprefix("runc://")).exists():
        return True
    if pid is None:
        return False
    try:
        return exited_by_stat(Path(f"/proc/{pid}/stat").read_bytes())
    except OSError:
        return True


READY_STALE = 60.0  # seconds without a sync loop iteration before the Node is reported NotReady


def _small_executor() -> None:
    """Blocking work (unpacking, fsync, pulls) in at most 4 threads: Python's default of cores + 4
    threads, each with its stack and heap, is memory a small board does not have to spare."""
    from edgelet.util.cpuaccount import AccountedExecutor

    asyncio.get_running_loop().set_default_executor(AccountedExecutor(max_workers=4, thread_name_prefix="edgelet"))


def print_runonce_summary(publisher, config, out: TextIO) -> None:
    rows = [("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "MESSAGE")]
    for e in sorted(publisher.entries(), key=lambda e: (e.row.namespace, e.row.name)):
        r = e.row
        rows.append((r.namespace, r.name, r.ready, r.status, str(r.restarts), r.message[:80]))
    print(format_table(rows), file=out)
    # The table cuts messages; a pod that failed as a whole (refused, evicted) gets its reason and fix in full.
    for e in sorted(publisher.entries(), key=lambda e: (e.row.namespace, e.row.name)):
        if e.status.phase == "Failed" and e.status.reason:
            print(f"failed: {e.row.namespace}/{e.row.name}: {e.status.reason}: {e.status.message or ''}", file=out)
    problems = list(config.rejected) + [e for errs in config.errors.values() for e in errs]
    for p in problems:
        print(f"rejected: {getattr(p, 'origin', '')}: {p.message}", file=out)


async def _main(settings: Settings, notifier: Notifier | None = None) -> int:
    agent = Agent(settings)
    if notifier is not None:
        notifier.progress()
    loop = asyncio.get_running_loop()
    if settings.runonce:
        return await agent.run_once(sys.stdout)
    from edgelet.frozen import remove_stale_unpack_dirs

    await asyncio.to_thread(remove_stale_unpack_dirs, agent.clock.now())
    task = asyncio.current_task()
    stopping = False
    stopper: list[asyncio.Future] = []  # keeps the stopping task referenced

    async def _stop_pods_then_exit(signame: str) -> None:
        shutdown = agent.node_shutdown
        # systemd SIGTERMs edgelet while it takes the system down: without logind's lock, this is the moment
        # to stop the pods gracefully. A plain `systemctl stop edgelet` leaves them running.
        if shutdown is not None and not shutdown.lock_held and signame == "SIGTERM":
            from edgelet.sync.shutdown import system_is_stopping

            if await system_is_stopping():
                log.info("The system is shutting down: stopping pods", grace=shutdown.total)
                agentprocess.exit_if_stuck(shutdown.total + SHUTDOWN_TIMEOUT)
                await shutdown.shutdown_pods()
        log.info("Stopping edgelet; pods keep running", signal=signame)
        agentprocess.exit_if_stuck(SHUTDOWN_TIMEOUT)
        assert task is not None
        task.cancel()

    def _stop(signame: str) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            stopper.append(asyncio.ensure_future(_stop_pods_then_exit(signame)))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _stop, sig.name)
    try:
        await agent.run(notifier)
    except asyncio.CancelledError:
        if not stopping:
            raise
    return 0


SHUTDOWN_TIMEOUT = 15.0
STATUS_INTERVAL = 5.0  # how often systemd's STATUS= line is brought up to date (sent only when it changed)


def run_agent(settings: Settings) -> int:
    """Entry point for the CLI: run the agent, returning its exit status; --runonce ends the process instead."""
    from edgelet.sdnotify import Notifier

    configure(settings.verbosity)
    agentprocess.set_process_name()
    agentprocess.die_with_bootloader()
    # Before any subprocess: this also unsets NOTIFY_SOCKET, which runc must not inherit.
    notifier = Notifier.from_environ()
    notifier.progress()  # the start runs from here: systemd's start timeout counts from the fork
    # asyncio's own loop, not uvloop: uvloop imports ssl (OpenSSL) at its own import and costs memory of its own,
    # while edgelet's loop is mostly idle and its subprocesses are waited for through pidfds either way.
    agentprocess.wait_children_by_pidfd()
    from edgelet.util import cpuaccount

    cpuaccount.install()
    with asyncio.Runner(loop_factory=cpuaccount.AccountedLoop) as runner:
        rc = runner.run(_main(settings, notifier))
    if settings.runonce:
        agentprocess.exit_now(rc)
    return rc
