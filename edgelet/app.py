"""Wires the real components together, owns the task group, signals and shutdown, and --runonce."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from edgelet.errors import EdgeletError
from edgelet.util.clock import clock_from_environ
from edgelet.util.log import configure, get_logger
from edgelet.util.memory import limit_arenas, trim, trim_periodically
from edgelet.util.table import format_table

if TYPE_CHECKING:
    from edgelet.api.types import Pod
    from edgelet.cgroups.controllers import Admission
    from edgelet.cgroups.qos import PodResources
    from edgelet.container.types import PodRuntimeStatus
    from edgelet.sdnotify import Notifier
    from edgelet.settings import Settings
    from edgelet.sources import SourceSnapshot
    from edgelet.sync.workers import SyncResult

log = get_logger("edgelet")


class ConfigurationError(EdgeletError):
    """The settings ask for something this machine does not have (the CLI exits 1 with the message)."""


class Agent:
    """Every long-lived component of a running edgelet, built from Settings."""

    def __init__(self, settings: Settings) -> None:
        limit_arenas()  # before the worker threads exist, so they share arenas
        from edgelet.images.importdir import ImportDir
        from edgelet.images.store import ImageStore
        from edgelet.pleg import Pleg
        from edgelet.runtime.logrotation import LogRotator, backstop_size
        from edgelet.runtime.runc_runtime import RuncRuntime
        from edgelet.sources.file import FileSource, FileSources
        from edgelet.status.publisher import StatusPublisher
        from edgelet.sync.loop import SyncLoop
        from edgelet.sync.syncpod import Syncer
        from edgelet.sync.workers import PodWorkers
        from edgelet.util.backoff import Backoff

        self.settings = settings
        self.clock = clock_from_environ(os.environ)
        paths = settings.runtime_paths()
        self.paths = paths
        from edgelet.logs import LOG_DIR_MODE
        from edgelet.state import ensure_dir

        # State and run dirs are edgelet's own and private; an existing log dir (/var/log) keeps its mode.
        for d in (paths.root_dir, paths.run_dir):
            ensure_dir(d, tighten_from=d)
        ensure_dir(paths.log_dir, LOG_DIR_MODE)
        from edgelet.state import remove_temp_files

        # What a crash left half-written by write_atomic: never read, so removed before anything reads.
        swept = remove_temp_files(
            [
                paths.root_dir / "state",
                settings.images_dir,
                paths.root_dir / "sources",
                paths.root_dir / "cni",
                paths.run_dir,
                paths.root_dir / "trust",
                paths.root_dir / "trust" / "accepted",
                paths.root_dir / "state" / "rollout",
            ]
        )
        if swept:
            log.info("Removed temp files a crash left behind", count=swept)
        # Trusted delivery: loaded (with the cryptography library) only when asked for; a key file that cannot
        # be used stops the start (KeyFileError names the file and line).
        self.trust = None
        if settings.trusted_keys is not None:
            from edgelet.trust.verify import Trust

            self.trust = Trust.load(settings.trusted_keys, paths.root_dir / "trust", self.clock)
            log.info(
                "Trusted keys loaded: every manifest and imported archive needs a signature",
                path=str(settings.trusted_keys),
                keys=len(self.trust.keys),
            )
        elif settings.manifest_url_signature:
            log.warning("--manifest-url-signature is ignored without --trusted-keys")
        self.images = ImageStore(settings.images_dir)
        if self.images.corrupt_index is not None:
            # Its records are gone: let the archives in the import dir be imported again.
            (settings.images_dir / "imported.json").unlink(missing_ok=True)
            (settings.images_dir / "imported-card.json").unlink(missing_ok=True)
        self.import_dir = ImportDir(
            settings.import_dir, self.images, settings.images_dir / "imported.json", clock=self.clock, trust=self.trust
        )
        # The card's images/ (a FAT partition a laptop wrote): imported the same way, with its own cache
        # because the cache is keyed by file name.
        self.card_import_dir = None
        if settings.card_import_dir is not None:
            self.card_import_dir = ImportDir(
                settings.card_import_dir,
                self.images,
                settings.images_dir / "imported-card.json",
                clock=self.clock,
                trust=self.trust,
            )
        pause = None
        if settings.pod_infra_container_image:
            pause = self.images.get(settings.pod_infra_container_image)
            if pause is None:
                raise ConfigurationError(
                    f"--pod-infra-container-image {settings.pod_infra_container_image}: not in the image store "
                    "(import it first)"
                )
        from edgelet.network.manager import PodNetwork

        network = PodNetwork(
            settings.cni_conf_dir,
            [d for d in settings.cni_bin_dir.split(":") if d],
            paths.run_dir / "netns",
            paths.root_dir / "cni",
        )
        self.runtime = RuncRuntime(
            paths,
            runtime_bin=settings.runtime,
            conmon_bin=settings.conmon,
            pause_image=pause,
            clock=self.clock,
            pod_max_pids=settings.pod_max_pids,
            node_cgroup=_node_cgroup(settings),
            allow_missing_controllers=settings.allow_missing_cgroup_controllers,
            network=network,
            cluster_dns=settings.cluster_dns,
            cluster_domain=settings.cluster_domain or "",
            allowed_unsafe_sysctls=settings.allowed_unsafe_sysctls,
            seccomp_default=settings.seccomp_default,
            on_warning=self._runtime_warning,
            log_size_max=backstop_size(settings.container_log_max_size),
            infra_container=settings.pod_infra_container,
        )
        self.log_rotator = LogRotator(
            paths,
            self.clock,
            max_size=settings.container_log_max_size,
            max_files=settings.container_log_max_files,
            interval=settings.container_log_monitor_interval,
        )
        # The local API and its metrics (not for --runonce, which serves nobody).
        self.metrics = None
        if settings.enable_server and not settings.runonce:
            from edgelet.server.metrics import InstrumentedRuntime, Metrics

            self.metrics = Metrics(self.clock)
            self.runtime = InstrumentedRuntime(self.runtime, self.metrics)  # type: ignore[assignment]
        from edgelet.events import EventRecorder, events_path

        self.events = EventRecorder(self.clock, events_path(paths.run_dir))
        # Archives refused for their signature are reported.
        self.import_dir.events = self.events
        if self.card_import_dir is not None:
            self.card_import_dir.events = self.events
        self.publisher = StatusPublisher(paths.root_dir, settings.node_name, self.clock)
        self.pleg = Pleg(self.runtime, paths.exit_dir, clock=self.clock)
        self._networks_marked = float("-inf")  # monotonic time a CNI CHECK last marked sandboxes broken
        self.backoff = Backoff()
        from edgelet.images.auth import credential_paths, load_credentials
        from edgelet.images.manager import ImageManager
        from edgelet.images.puller import Puller
        from edgelet.trust.policy import load_optional_policy

        self.puller = Puller(
            self.images,
            registries=dict(settings.registries),
            credentials=load_credentials(credential_paths(settings.image_credential_file)),
            clock=self.clock,
            signature_policy=load_optional_policy(settings.signature_policy),
        )
        self.image_manager = ImageManager(
            self.images, self.puller, events=self.events, backoff=self.backoff, clock=self.clock
        )
        self.publisher.pull_progress = self.puller.progress  # `pods -o wide` and `describe pod` show pulls
        from edgelet.images.gc import ImageGC

        self.image_gc = ImageGC(
            self.images,
            self._images_in_use,
            self.clock,
            high=settings.image_gc_high_threshold,
            low=settings.image_gc_low_threshold,
            min_age=settings.image_minimum_gc_age,
        )
        from edgelet.probes.manager import ProbeManager

        self.probes = ProbeManager(self.runtime, self.clock, self.events)
        self.syncer = Syncer(
            self.runtime,
            self.image_manager,  # type: ignore[arg-type]
            self.backoff,
            self.clock,
            publish=self.publisher.update if self.metrics is None else self.metrics.observing_publish(self.publisher),
            events=self.events,
            probes=self.probes,
            admit=self._admit,
            newer_than=self._relisted_newer_than,
            relisted_after=self._relisted_after,
        )
        self.workers = PodWorkers(self.syncer, clock=self.clock)
        self.rollout = _build_rollout(self)
        self.loop = SyncLoop(
            workers=self.workers,
            publisher=self.publisher,
            clock=self.clock,
            expected_sources={"file"} | ({"http"} if settings.manifest_url else set()),
            runtime_uids=self.pleg.uids,
            events=self.events,
            rollout=self.rollout,
        )
        self.workers._on_result = self._on_sync_result
        self.probes.state_of = self.syncer.state
        self.probes.on_change = self.loop.emit_probe_result
        self.workers._on_terminated = self.loop.on_terminated
        self.file_source = FileSources(
            [
                FileSource(path, settings.node_name, settings.file_check_frequency, self.clock, trust=self.trust)
                for path in (settings.pod_manifest_path, settings.card_manifest_path)
                if path is not None
            ]
        )
        if settings.card_config_error is not None:
            # Reported, never fatal: a device must boot whatever a laptop wrote onto its card.
            log.error("Card configuration ignored", err=settings.card_config_error)
        if settings.card_dir is not None:
            from edgelet.settings import CARD_SECRETS

            for name in CARD_SECRETS:
                if (settings.card_dir / name).exists():
                    log.warning(
                        "Secret on the card's FAT partition, readable by every local user; "
                        "edgelet-card-setup moves it to /etc/edgelet at boot",
                        path=str(settings.card_dir / name),
                    )
        self.mirror = None
        self._base_facts = None
        self._taints: tuple = ()
        # The WireGuard tunnel, first: the Node's InternalIP and the node API's certificate name its address.
        self.tunnel = _build_tunnel(self) if settings.wireguard_config is not None and not settings.runonce else None
        self.tunnel_address = str(self.tunnel.config.addresses[0].ip) if self.tunnel is not None else None
        if settings.kubeconfig is not None and not settings.runonce:
            self.mirror = _build_mirror(self)
        # Node-pressure eviction; its thresholds are checked for --runonce too, so a bad one is refused there as
        # well, but nothing is built: runonce exits once its pods run.
        self.eviction = _build_eviction(self)
        self.node_shutdown = None if settings.runonce else _build_node_shutdown(self)
        self.api_server = None
        self.node_api = None
        if self.metrics is not None:
            from edgelet.server.api import Api, ApiServer, ApiSources
            from edgelet.stats.collector import StatsCollector

            self.metrics.watch_publisher(self.publisher)
            if self.tunnel is not None:
                self.metrics.watch_tunnel(self.tunnel)
            self.stats = StatsCollector(
                paths,
                self.pleg.pods,
                self.clock,
                node_name=settings.node_name,
                pod_cgroup=self.runtime.pod_cgroup,
                images_dir=settings.images_dir,
            )
            api = Api(
                ApiSources(
                    publisher=self.publisher,
                    events=self.events,
                    paths=paths,
                    clock=self.clock,
                    metrics=self.metrics,
                    last_sync_iteration=lambda: self.loop.last_iteration,
                    last_relist=lambda: self.pleg.last_relist,
                    node_state=self.mirror.snapshot if self.mirror is not None else None,
                    stats=self.stats,
                    start_exec=self.runtime.start_exec,
                    node_conditions=self._node_conditions,
                    rollout_records=self.rollout.records,
                    rollout_retry=self.rollout.retry,
                )
            )
            if settings.node_api_enabled:
                self.node_api = _NodeApiPlan(self, api)
            self.api_server = ApiServer(
                api,
                paths.run_dir,
                healthz_port=settings.healthz_port,
                healthz_bind_address=settings.healthz_bind_address,
            )
        self.http_source = None
        if settings.manifest_url:
            from edgelet.sources.http import HttpSource

            self.http_source = HttpSource(
                settings.manifest_url,
                settings.node_name,
                headers=settings.manifest_url_header,
                check_frequency=settings.http_check_frequency,
                clock=self.clock,
                cache_dir=paths.root_dir / "sources",
                ca_file=settings.manifest_url_ca,
                header_file=settings.manifest_url_header_file,
                trust=self.trust,
                signature_url=settings.manifest_url_signature,
            )

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
            await asyncio.to_thread(self._import_all)
            await self.pleg.adopt()  # adopt what runs before the first config arrives
            await self._release_stale_networks()
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
        """Housekeeping of pod networks: CNI CHECK every running sandbox each `cni_check_period`; a pod whose
        network is broken is told so and synced, and its sync replaces the sandbox (kubelet's answer to a
        sandbox that is not ready)."""
        from edgelet.events import pod_ref
        from edgelet.network.checkplan import checked, due, first, host_links

        # Every period while the pods' links change, stretching while nothing does.
        plan = first(adopted=any(s.state == "running" for p in self.pleg.pods().values() for s in p.sandboxes))
        while True:
            await self.clock.sleep(self.settings.cni_check_period)
            pods = self.pleg.pods()
            links = await asyncio.to_thread(self.runtime.network_host_links, pods)
            now = await asyncio.to_thread(host_links, links)
            go, plan = due(plan, now)
            if not go:
                continue
            try:
                broken = await self.runtime.check_networks(pods)
            except Exception as exc:
                log.warning("Cannot check pod networks", err=str(exc))
                plan = checked(plan, now, broken=True)
                continue
            plan = checked(plan, now, broken=bool(broken))
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
        from edgelet.mirror.node import host_facts, parse_runc_version, with_reservations

        if self._base_facts is None:
            self._base_facts = host_facts(
                self.settings.node_name,
                root_dir=self.paths.root_dir,
                runtime_version=parse_runc_version(getattr(self, "_runtime_version", "")),
                edgelet_version=__version__,
                node_ip=self.settings.node_ip or self.tunnel_address or self.publisher.host_ip,
            )
            base = self._base_facts
            self._base_facts = with_reservations(
                dataclasses.replace(base, labels=self.settings.node_labels, taints=self._taints),
                total_reserved(self.settings.system_reserved, self.settings.kube_reserved),
                hard_reserved(
                    self.settings.eviction_hard, memory_bytes=base.memory_bytes, disk_bytes=base.ephemeral_bytes
                ),
            )
        images = tuple((tuple(r.references) + (r.id,), r.size) for r in self.images.list())
        pressure = self.eviction.conditions if self.eviction is not None else frozenset()
        port = self.node_api.port if self.node_api is not None else None
        return dataclasses.replace(
            self._base_facts,
            images=images,
            pressure=pressure,
            tunnel=self._tunnel_ready(),
            **({"port": port} if port is not None else {}),
        )

    def _node_conditions(self) -> list[dict[str, str]]:
        """The Node's conditions as the mirror reports them (for `edgelet node`, with or without an apiserver)."""
        from edgelet.mirror.node import node_conditions

        ready, message = self._is_ready()
        pressure = self.eviction.conditions if self.eviction is not None else frozenset()
        return node_conditions(pressure, ready=ready, ready_message=message, tunnel=self._tunnel_ready())

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
        await self.loop.first_sync_done.wait()
        if notifier.ready(pods_summary(self.publisher.entries())):
            log.info("Notified systemd: ready")
        # `systemctl status edgelet` shows the pods as they are, not as they were at start.
        shown = ""
        while True:
            await self.clock.sleep(STATUS_INTERVAL)
            text = pods_summary(self.publisher.entries())
            if text != shown:
                notifier.status(text)
                shown = text

    def _import_all(self) -> None:
        """Import what the import dirs hold (blocking): the node's, then the card's."""
        self.import_dir.scan()
        if self.card_import_dir is not None:
            self.card_import_dir.scan()

    async def run_once(self, out: TextIO) -> int:
        """--runonce: read every source once, run the pods, wait until they run or completed, report."""
        timeout = self.settings.runonce_timeout
        deadline = self.clock.monotonic() + timeout
        _small_executor()

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
        await self.workers.finish()  # resyncs end as at a stop of the daemon; terminations run to their end
        # The checkpoint and the events, each fsynced, side by side.
        writes = [(f.write, data) for f in (self.publisher, self.events) if (data := f.encode()) is not None]
        await asyncio.gather(*(asyncio.to_thread(write, data) for write, data in writes))
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


def _build_eviction(agent: Agent):
    """The eviction manager over this agent's pods, or None when no threshold is configured."""
    from edgelet.eviction.errors import EvictionConfigError
    from edgelet.eviction.thresholds import configure

    s = agent.settings
    try:
        thresholds = configure(
            s.eviction_hard or "",
            s.eviction_soft or "",
            s.eviction_soft_grace_period or "",
            s.eviction_minimum_reclaim or "",
        )
    except EvictionConfigError as exc:
        raise ConfigurationError(str(exc)) from exc
    if not thresholds or s.runonce:
        return None  # --runonce only checks the thresholds (a bad one is refused there too): it never evicts
    from edgelet.eviction.manager import EvictionManager
    from edgelet.eviction.signals import HostSignals
    from edgelet.eviction.usage import pod_usages

    signals = HostSignals(s.root_dir, s.images_dir)
    paths = agent.paths

    def dirs_of(pod):
        meta = pod.metadata
        return [paths.pod_dir(meta.uid), paths.pod_log_dir(meta.namespace, meta.name, meta.uid)]

    async def usage():
        return await asyncio.to_thread(
            pod_usages, list(agent.loop.desired().values()), agent.runtime.pod_cgroup, dirs_of
        )

    async def evict(uid: str, reason: str, message: str, grace: float | None) -> None:
        agent.syncer.evict(uid, reason, message, grace)
        agent.loop.emit_probe_result(uid)  # sync it now: the sync kills it

    def readmit(uid: str) -> None:
        agent.syncer.readmit(uid)
        agent.loop.emit_probe_result(uid)

    async def reclaim(signal: str) -> None:
        await agent.image_gc.collect(force=True)

    return EvictionManager(
        thresholds,
        clock=agent.clock,
        observe=signals.observe,
        usage=usage,
        evict=evict,
        readmit=readmit,
        reclaim=reclaim,
        interval=s.eviction_monitoring_interval,
        transition_period=s.eviction_pressure_transition_period,
        max_pod_grace=s.eviction_max_pod_grace_period,
    )


def _build_rollout(agent: Agent):
    """The rollout manager (issue 21): between the merged config and the pod workers; --rollout=false (or a
    pod's annotation) gives kubelet's kill-and-start."""
    from edgelet.rollout.decide import Policy
    from edgelet.rollout.store import RolloutStore
    from edgelet.sync.rollout import RolloutManager

    s = agent.settings

    def status_of(uid: str):
        entry = agent.publisher.get(uid)
        return entry.status if entry is not None else None

    manager = RolloutManager(
        RolloutStore(agent.paths.root_dir),
        clock=agent.clock,
        events=agent.events,
        enabled=s.rollout,
        policy=Policy(
            deadline=s.rollout_deadline,
            window=s.rollout_stability_window,
            strategy="Surge" if s.rollout_strategy == "Surge" else "Replace",
        ),
        images=agent.image_manager,
        backoff=agent.backoff,
        runtime_pods=agent.pleg.pods,
        status_of=status_of,
    )
    agent.publisher.rollout_note = manager.note
    agent.workers.may_run_beside = manager.is_surging  # Surge: the new version starts beside the old one
    return manager


def _build_node_shutdown(agent: Agent):
    """Graceful node shutdown over this agent's pods, or None when --shutdown-grace-period is 0."""
    from edgelet.api.pod import spec
    from edgelet.eviction.decide import pod_priority
    from edgelet.sync.shutdown import MESSAGE, REASON, NodeShutdown

    s = agent.settings
    if s.shutdown_grace_period <= 0:
        return None

    def priorities() -> dict[str, int]:
        return {
            uid: pod_priority(spec(p).priority_class_name, spec(p).priority) for uid, p in agent.loop.desired().items()
        }

    def stop(uid: str, cap: float) -> None:
        pod = agent.loop.desired().get(uid)
        own = spec(pod).termination_grace_period_seconds if pod is not None else None
        agent.syncer.evict(uid, REASON, MESSAGE, min(float(30 if own is None else own), cap))
        agent.loop.emit_probe_result(uid)

    async def running(uid: str) -> bool:
        rt = await agent.runtime.pod_status(uid)
        return any(c.state in ("running", "created") for c in rt.containers) or any(
            sb.state in ("running", "created") for sb in rt.sandboxes
        )

    def restart(uid: str) -> None:
        agent.syncer.readmit(uid)
        agent.loop.emit_probe_result(uid)

    return NodeShutdown(
        clock=agent.clock,
        total=s.shutdown_grace_period,
        critical=s.shutdown_grace_period_critical_pods,
        priorities=priorities,
        stop=stop,
        running=running,
        restart=restart,
    )


def _build_tunnel(agent: Agent):
    """The WireGuard tunnel of --wireguard-config: the file is read (and the key generated) now, so a bad one
    stops the start with its file:line; bringing the interface up waits for the run and never stops the agent."""
    from edgelet.tunnel import keys
    from edgelet.tunnel.device import Tunnel
    from edgelet.tunnel.errors import TunnelError

    s = agent.settings
    assert s.wireguard_config is not None
    try:
        loaded = keys.load(s.wireguard_config, s.root_dir)
    except TunnelError as exc:
        raise ConfigurationError(str(exc)) from exc
    assert loaded is not None
    return Tunnel(loaded.config, agent.clock)


def _build_mirror(agent: Agent):
    """The apiserver reporting of --kubeconfig; every import of it happens here, so standalone pays nothing."""
    from edgelet import __version__
    from edgelet.mirror.client import KubeClient
    from edgelet.mirror.errors import MirrorError
    from edgelet.mirror.kubeconfig import load_kubeconfig
    from edgelet.mirror.manager import MirrorManager
    from edgelet.mirror.node import Taint, validate_node_labels

    s = agent.settings
    assert s.kubeconfig is not None
    try:
        validate_node_labels(dict(s.node_labels))
        cfg = load_kubeconfig(s.kubeconfig)
        client = KubeClient(cfg, version=__version__)
    except MirrorError as exc:
        raise ConfigurationError(str(exc)) from exc
    agent._taints = tuple(Taint(k, v, e) for k, v, e in s.register_with_taints)
    mirror = MirrorManager(
        client,
        node=s.node_name,
        server=cfg.server,
        facts=agent._node_facts,
        publisher=agent.publisher,
        events=agent.events,
        clock=agent.clock,
        is_ready=agent._is_ready,
        register_node=s.register_node,
        status_frequency=s.node_status_update_frequency,
        report_frequency=s.node_status_report_frequency,
        lease_duration=s.node_lease_duration_seconds,
        lease_renew_interval=s.node_lease_renew_interval,
    )
    log.info("Reporting to the apiserver", server=cfg.server, node=s.node_name)
    return mirror


class _NodeApiPlan:
    """The node API of this agent, checked at construction and opened at start (a self-signed pair may be made)."""

    def __init__(self, agent: Agent, api) -> None:
        from edgelet.server.auth import parse_grant

        s = agent.settings
        try:
            for g in s.node_api_grants:
                parse_grant(g)
        except ValueError as exc:
            raise ConfigurationError(f"--node-api-grants: {exc}") from exc
        self._agent = agent
        self._api = api
        self.server = None

    @property
    def port(self) -> int | None:
        """The port to advertise: the bound one, else the configured one."""
        if self.server is not None and self.server.port is not None:
            return self.server.port
        s = self._agent.settings
        return s.port if s.port else None

    async def start(self):
        from edgelet.server.auth import AuthConfigError
        from edgelet.server.nodeapi import DEFAULT_PORT, NodeApi, NodeApiServer, build_config
        from edgelet.server.tls import TlsError

        a, s = self._agent, self._agent.settings
        try:
            config = await build_config(
                node_name=s.node_name,
                root_dir=s.root_dir,
                addresses=[
                    x for x in (s.node_ip or a.tunnel_address or a.publisher.host_ip, s.address, a.tunnel_address) if x
                ],
                required=[a.tunnel_address] if a.tunnel_address else [],
                cert=s.tls_cert_file,
                key=s.tls_private_key_file,
                client_ca=s.client_ca_file,
                token_file=s.api_token_file,
                grants=s.node_api_grants,
            )
        except (TlsError, AuthConfigError) as exc:
            raise ConfigurationError(str(exc)) from exc
        from edgelet.server.spdy import Limits

        handler = NodeApi(
            self._api,
            config,
            stats=a.stats,
            runtime_pods=a.pleg.pods,
            metrics=a.metrics,
            cgroup_root=s.cgroup_root,
            spdy_limits=Limits(idle_timeout=s.streaming_connection_idle_timeout),
        )
        from edgelet.tunnel.device import on_tunnel

        after = a.tunnel.went_up if a.tunnel is not None and on_tunnel(s.address, a.tunnel.config) else None
        port = DEFAULT_PORT if s.port is None else s.port
        self.server = NodeApiServer(handler, config, s.address or "0.0.0.0", port, after=after)
        if after is None:
            await self.server.start()
        return self.server


def _small_executor() -> None:
    """Blocking work (unpacking, fsync, pulls) in at most 4 threads: Python's default of cores + 4
    threads, each with its stack and heap, is memory a small board does not have to spare."""
    from concurrent.futures import ThreadPoolExecutor

    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=4, thread_name_prefix="edgelet"))


def _node_cgroup(settings: Settings) -> PodResources | None:
    """The root pods cgroup's caps when --enforce-node-allocatable includes pods: capacity less the reservations."""
    if "pods" not in settings.enforce_node_allocatable:
        return None
    from edgelet.cgroups.allocatable import node_allocatable, pods_cgroup_resources, read_capacity, total_reserved

    allocatable = node_allocatable(read_capacity(), total_reserved(settings.system_reserved, settings.kube_reserved))
    return pods_cgroup_resources(allocatable)


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


def _set_process_name() -> None:
    try:
        import prctl

        prctl.set_name("edgelet")
    except (ImportError, OSError):
        pass


def _die_with_bootloader() -> None:
    """One-file build: never outlive the PyInstaller bootloader, our parent.

    systemd sees the bootloader as the unit's main process, and with
    KillMode=process its SIGKILL (stop timeout, watchdog) reaches only the
    bootloader: this agent would otherwise keep running beside the restarted
    one. The one-dir build and a source checkout run as one process.
    """
    meipass = getattr(sys, "_MEIPASS", None)
    if meipass is None or not os.path.basename(meipass).startswith("_MEI"):
        return
    try:
        import prctl

        prctl.set_pdeathsig(signal.SIGKILL)
    except (ImportError, OSError) as exc:
        log.warning("Cannot tie edgelet to its bootloader", err=str(exc))
        return
    if os.getppid() == 1:  # the bootloader died before the line above
        os.kill(os.getpid(), signal.SIGKILL)


async def _main(settings: Settings, notifier: Notifier | None = None) -> int:
    agent = Agent(settings)
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
                _exit_if_stuck(shutdown.total + SHUTDOWN_TIMEOUT)
                await shutdown.shutdown_pods()
        log.info("Stopping edgelet; pods keep running", signal=signame)
        _exit_if_stuck(SHUTDOWN_TIMEOUT)
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


def pods_summary(entries) -> str:
    """systemd's STATUS= line: `3 pods: 2 running, 1 waiting (CrashLoopBackOff)`."""
    running = waiting = failed = done = 0
    reasons: set[str] = set()
    for e in entries:
        phase, status = e.row.phase, e.row.status
        if phase == "Failed":
            failed += 1
        elif phase == "Succeeded":
            done += 1
        elif phase == "Running" and status == "Running":
            running += 1
        else:
            waiting += 1
            if status not in ("Running", "Pending", "ContainerCreating", "PodInitializing"):
                reasons.add(status)
    parts = [f"{running} running"]
    if waiting:
        parts.append(f"{waiting} waiting" + (f" ({', '.join(sorted(reasons))})" if reasons else ""))
    if failed:
        parts.append(f"{failed} failed")
    if done:
        parts.append(f"{done} completed")
    total = running + waiting + failed + done
    return f"{total} pod{'s' if total != 1 else ''}: " + ", ".join(parts)


def _exit_if_stuck(timeout: float) -> None:
    """Exit anyway when shutting down takes longer than `timeout` (a thread stuck in a syscall, say).

    Stopping edgelet never stops a pod and every state is rebuilt from runc at the next start,
    so a hard exit loses nothing; a stop that never finishes would make systemd SIGKILL us
    after TimeoutStopSec instead, and an upgrade wait for it.
    """
    import threading

    def expire() -> None:
        stuck = [t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
        log.warning("Shutdown is taking too long; exiting now", timeout=timeout, threads=",".join(stuck) or None)
        logging_flush()
        os._exit(0)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()


def logging_flush() -> None:
    import logging

    for handler in logging.getLogger().handlers:
        handler.flush()


def run_agent(settings: Settings) -> int:
    """Entry point for the CLI: run the agent, returning its exit status; --runonce ends the process instead."""
    from edgelet.sdnotify import Notifier

    configure(settings.verbosity)
    _set_process_name()
    _die_with_bootloader()
    # Before any subprocess: this also unsets NOTIFY_SOCKET, which runc must not inherit.
    notifier = Notifier.from_environ()
    # asyncio's own loop, not uvloop: uvloop imports ssl (OpenSSL, about 5 MB) at its own import and adds
    # 1.2 MB; edgelet's loop is mostly idle and its subprocesses are waited for through pidfds either way.
    _wait_children_by_pidfd()
    rc = asyncio.run(_main(settings, notifier))
    if settings.runonce:
        _exit_now(rc)
    return rc


def _exit_now(rc: int) -> None:
    """End --runonce without the interpreter's teardown (collecting every module's objects, a tenth of a second
    or more on a board): its work is done and written, its loop and threads have ended, its containers run
    under their own conmon. The boot waits for this exit (edgelet-runonce.service), so the process ends here."""
    logging_flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(rc)


def _wait_children_by_pidfd() -> None:
    """Python 3.11 waits for each subprocess in a thread of its own; a pidfd in the loop is what 3.12 does."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel before 5.3, or a seccomp filter that refuses it
        return
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
