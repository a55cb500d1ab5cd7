"""Builds each of an agent's long-lived components from Settings and the components it needs, as arguments.

`edgelet.app.Agent` calls these in dependency order; each returns what it
built and sets nothing on anyone. Every import of an optional part (trust,
the mirror, eviction, the node API) happens inside its builder, so an agent
that does not use it never loads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from edgelet.errors import EdgeletError
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.configobjects import ConfigObjects
    from edgelet.api.types import Pod, PodStatus
    from edgelet.cgroups.qos import PodResources
    from edgelet.container.types import PodRuntimeStatus
    from edgelet.events import EventRecorder
    from edgelet.eviction.manager import EvictionManager
    from edgelet.images.gc import ImageGC
    from edgelet.images.importdir import ImportDir
    from edgelet.images.manager import ImageManager
    from edgelet.images.puller import Puller
    from edgelet.images.store import ImageStore
    from edgelet.mirror.manager import MirrorManager
    from edgelet.pleg import Pleg
    from edgelet.runtime.layout import RuntimePaths
    from edgelet.runtime.runc_runtime import RuncRuntime
    from edgelet.server.api import ApiServer
    from edgelet.server.metrics import Metrics
    from edgelet.settings import Settings
    from edgelet.sources.file import FileSources
    from edgelet.sources.http import HttpSource
    from edgelet.stats.collector import StatsCollector
    from edgelet.status.publisher import StatusPublisher
    from edgelet.sync.loop import SyncLoop
    from edgelet.sync.rollout import RolloutManager
    from edgelet.sync.shutdown import NodeShutdown
    from edgelet.sync.syncpod import Syncer
    from edgelet.trust.verify import Trust
    from edgelet.tunnel.device import Tunnel
    from edgelet.util.backoff import Backoff
    from edgelet.util.clock import Clock

log = get_logger("edgelet")


class ConfigurationError(EdgeletError):
    """The settings ask for something this machine does not have (the CLI exits 1 with the message)."""


def prepare_state_dirs(settings: Settings, paths: RuntimePaths) -> None:
    """The agent's directories exist with their modes, and what a crash left half-written is gone."""
    from edgelet.logs import LOG_DIR_MODE
    from edgelet.state import ensure_dir, remove_temp_files

    # State and run dirs are edgelet's own and private; an existing log dir (/var/log) keeps its mode.
    for d in (paths.root_dir, paths.run_dir):
        ensure_dir(d, tighten_from=d)
    ensure_dir(paths.log_dir, LOG_DIR_MODE)
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


def load_trust(settings: Settings, paths: RuntimePaths, clock: Clock) -> Trust | None:
    """Trusted delivery's keys, or None when not asked for.

    Loaded (with the cryptography library) only when asked for; a key file that cannot be used stops the
    start (KeyFileError names the file and line).
    """
    if settings.trusted_keys is None:
        if settings.manifest_url_signature:
            log.warning("--manifest-url-signature is ignored without --trusted-keys")
        return None
    from edgelet.trust.verify import Trust

    trust = Trust.load(settings.trusted_keys, paths.root_dir / "trust", clock)
    log.info(
        "Trusted keys loaded: every manifest and imported archive needs a signature",
        path=str(settings.trusted_keys),
        keys=len(trust.keys),
    )
    return trust


def open_image_store(settings: Settings) -> ImageStore:
    from edgelet.images.store import ImageStore

    images = ImageStore(settings.images_dir)
    if images.corrupt_index is not None:
        # Its records are gone: let the archives in the import dir be imported again.
        (settings.images_dir / "imported.json").unlink(missing_ok=True)
        (settings.images_dir / "imported-card.json").unlink(missing_ok=True)
    return images


def build_import_dirs(
    settings: Settings, images: ImageStore, clock: Clock, trust: Trust | None, events: EventRecorder
) -> tuple[ImportDir, ImportDir | None]:
    """The node's import dir, and the card's images/ (a FAT partition a laptop wrote) when there is one:
    imported the same way, with its own cache because the cache is keyed by file name. Archives refused for
    their signature are reported as events."""
    from edgelet.images.importdir import ImportDir

    node = ImportDir(
        settings.import_dir, images, settings.images_dir / "imported.json", clock=clock, trust=trust, events=events
    )
    card = None
    if settings.card_import_dir is not None:
        card = ImportDir(
            settings.card_import_dir,
            images,
            settings.images_dir / "imported-card.json",
            clock=clock,
            trust=trust,
            events=events,
        )
    return node, card


def build_config_objects(paths: RuntimePaths) -> ConfigObjects:
    """The store of accepted ConfigMaps and Secrets, with the node's key for the digests that pin a pod's config."""
    from edgelet.api.configobjects import ConfigObjects
    from edgelet.state import node_key

    return ConfigObjects(key=node_key(paths.root_dir / "state" / "config-pin.key"))


def build_runtime(
    settings: Settings,
    paths: RuntimePaths,
    clock: Clock,
    images: ImageStore,
    metrics: Metrics | None,
    on_warning: Callable[[Pod, str | None, str, str], None],
    config_objects: ConfigObjects | None = None,
) -> RuncRuntime:
    """The OCI runtime (runc, crun: each pod on its handler) over the pod network, instrumented when the local API
    serves metrics."""
    from edgelet.network.manager import PodNetwork
    from edgelet.runtime.handlers import resolve_handlers
    from edgelet.runtime.logrotation import backstop_size
    from edgelet.runtime.runc_runtime import RuncRuntime

    pause = None
    if settings.pod_infra_container_image:
        pause = images.get(settings.pod_infra_container_image)
        if pause is None:
            raise ConfigurationError(
                f"--pod-infra-container-image {settings.pod_infra_container_image}: not in the image store "
                "(import it first)"
            )
    network = PodNetwork(
        settings.cni_conf_dir,
        [d for d in settings.cni_bin_dir.split(":") if d],
        paths.run_dir / "netns",
        paths.root_dir / "cni",
    )
    runtime = RuncRuntime(
        paths,
        runtime_bin=settings.runtime,
        conmon_bin=settings.conmon,
        pause_image=pause,
        clock=clock,
        pod_max_pids=settings.pod_max_pids,
        node_cgroup=node_cgroup(settings),
        allow_missing_controllers=settings.allow_missing_cgroup_controllers,
        network=network,
        cluster_dns=settings.cluster_dns,
        cluster_domain=settings.cluster_domain or "",
        allowed_unsafe_sysctls=settings.allowed_unsafe_sysctls,
        seccomp_default=settings.seccomp_default,
        on_warning=on_warning,
        log_size_max=backstop_size(settings.container_log_max_size),
        infra_container=settings.pod_infra_container,
        runtime_handlers=resolve_handlers(settings.runtime_handlers, settings.runtime),
        runtime_handler=settings.runtime_handler,
        config_objects=config_objects,
    )
    if metrics is None:
        return runtime
    from edgelet.server.metrics import InstrumentedRuntime

    return InstrumentedRuntime(runtime, metrics)  # type: ignore[return-value]


def node_cgroup(settings: Settings) -> PodResources | None:
    """The root pods cgroup's caps when --enforce-node-allocatable includes pods: capacity less the reservations."""
    if "pods" not in settings.enforce_node_allocatable:
        return None
    from edgelet.cgroups.allocatable import node_allocatable, pods_cgroup_resources, read_capacity, total_reserved

    allocatable = node_allocatable(read_capacity(), total_reserved(settings.system_reserved, settings.kube_reserved))
    return pods_cgroup_resources(allocatable)


def build_puller(settings: Settings, images: ImageStore, clock: Clock) -> Puller:
    from edgelet.images.auth import credential_paths, load_credentials
    from edgelet.images.puller import Puller
    from edgelet.trust.policy import load_optional_policy

    return Puller(
        images,
        registries=dict(settings.registries),
        credentials=load_credentials(credential_paths(settings.image_credential_file)),
        clock=clock,
        signature_policy=load_optional_policy(settings.signature_policy),
    )


def build_image_gc(
    settings: Settings, images: ImageStore, in_use: Callable[[], Awaitable[set[str]]], clock: Clock
) -> ImageGC:
    from edgelet.images.gc import ImageGC

    return ImageGC(
        images,
        in_use,
        clock,
        high=settings.image_gc_high_threshold,
        low=settings.image_gc_low_threshold,
        min_age=settings.image_minimum_gc_age,
    )


def build_rollout(
    settings: Settings,
    paths: RuntimePaths,
    clock: Clock,
    events: EventRecorder,
    images: ImageManager,
    backoff: Backoff,
    pleg: Pleg,
    status_of: Callable[[str], PodStatus | None],
) -> RolloutManager:
    """The rollout manager: between the merged config and the pod workers; --rollout=false (or a pod's
    annotation) gives kubelet's kill-and-start."""
    from edgelet.rollout.decide import Policy
    from edgelet.rollout.store import RolloutStore
    from edgelet.sync.rollout import RolloutManager

    return RolloutManager(
        RolloutStore(paths.root_dir),
        clock=clock,
        events=events,
        enabled=settings.rollout,
        policy=Policy(
            deadline=settings.rollout_deadline,
            window=settings.rollout_stability_window,
            strategy="Surge" if settings.rollout_strategy == "Surge" else "Replace",
        ),
        images=images,
        backoff=backoff,
        runtime_pods=pleg.pods,
        status_of=status_of,
    )


def build_file_sources(settings: Settings, clock: Clock, trust: Trust | None) -> FileSources:
    """The manifest directory, and the card's when there is one."""
    from edgelet.sources.file import FileSource, FileSources

    return FileSources(
        [
            FileSource(path, settings.node_name, settings.file_check_frequency, clock, trust=trust)
            for path in (settings.pod_manifest_path, settings.card_manifest_path)
            if path is not None
        ]
    )


def warn_about_card(settings: Settings) -> None:
    """What is wrong with the card's configuration is reported, never fatal: a device must boot whatever a
    laptop wrote onto its card."""
    if settings.card_config_error is not None:
        log.error("Card configuration ignored", err=settings.card_config_error)
    if settings.card_dir is not None:
        from edgelet.cardpolicy import CARD_SECRETS

        for name in CARD_SECRETS:
            if (settings.card_dir / name).exists():
                log.warning(
                    "Secret on the card's FAT partition, readable by every local user; "
                    "edgelet-card-setup moves it to /etc/edgelet at boot",
                    path=str(settings.card_dir / name),
                )


def build_http_source(settings: Settings, paths: RuntimePaths, clock: Clock, trust: Trust | None) -> HttpSource | None:
    """The manifest URL's source, or None without --manifest-url."""
    if not settings.manifest_url:
        return None
    from edgelet.sources.http import HttpSource

    return HttpSource(
        settings.manifest_url,
        settings.node_name,
        headers=settings.manifest_url_header,
        check_frequency=settings.http_check_frequency,
        clock=clock,
        cache_dir=paths.root_dir / "sources",
        ca_file=settings.manifest_url_ca,
        header_file=settings.manifest_url_header_file,
        trust=trust,
        signature_url=settings.manifest_url_signature,
    )


def build_tunnel(settings: Settings, clock: Clock) -> Tunnel | None:
    """The WireGuard tunnel of --wireguard-config: the file is read (and the key generated) now, so a bad one
    stops the start with its file:line; bringing the interface up waits for the run and never stops the agent."""
    if settings.wireguard_config is None:
        return None
    from edgelet.tunnel import keys
    from edgelet.tunnel.device import Tunnel
    from edgelet.tunnel.errors import TunnelError

    try:
        loaded = keys.load(settings.wireguard_config, settings.root_dir)
    except TunnelError as exc:
        raise ConfigurationError(str(exc)) from exc
    assert loaded is not None
    return Tunnel(loaded.config, clock, kind=settings.wireguard_backend)


def build_mirror(
    settings: Settings,
    *,
    publisher: StatusPublisher,
    events: EventRecorder,
    clock: Clock,
    facts: Callable[[], Any],
    is_ready: Callable[[], tuple[bool, str]],
) -> MirrorManager:
    """The apiserver reporting of --kubeconfig; every import of it happens here, so standalone pays nothing."""
    from edgelet import __version__
    from edgelet.mirror.client import KubeClient
    from edgelet.mirror.errors import MirrorError
    from edgelet.mirror.kubeconfig import load_kubeconfig
    from edgelet.mirror.manager import MirrorManager
    from edgelet.mirror.node import validate_node_labels

    assert settings.kubeconfig is not None
    try:
        validate_node_labels(dict(settings.node_labels))
        cfg = load_kubeconfig(settings.kubeconfig)
        client = KubeClient(cfg, version=__version__)
    except MirrorError as exc:
        raise ConfigurationError(str(exc)) from exc
    mirror = MirrorManager(
        client,
        node=settings.node_name,
        server=cfg.server,
        facts=facts,
        publisher=publisher,
        events=events,
        clock=clock,
        is_ready=is_ready,
        register_node=settings.register_node,
        status_frequency=settings.node_status_update_frequency,
        report_frequency=settings.node_status_report_frequency,
        lease_duration=settings.node_lease_duration_seconds,
        lease_renew_interval=settings.node_lease_renew_interval,
    )
    log.info("Reporting to the apiserver", server=cfg.server, node=settings.node_name)
    return mirror


def build_eviction(
    settings: Settings,
    paths: RuntimePaths,
    clock: Clock,
    *,
    loop: SyncLoop,
    syncer: Syncer,
    runtime: RuncRuntime,
    image_gc: ImageGC,
) -> EvictionManager | None:
    """The eviction manager over the agent's pods, or None when no threshold is configured.

    Its thresholds are checked for --runonce too, so a bad one is refused there as well, but nothing is
    built: runonce exits once its pods run.
    """
    from edgelet.eviction.errors import EvictionConfigError
    from edgelet.eviction.thresholds import configure

    try:
        thresholds = configure(
            settings.eviction_hard or "",
            settings.eviction_soft or "",
            settings.eviction_soft_grace_period or "",
            settings.eviction_minimum_reclaim or "",
        )
    except EvictionConfigError as exc:
        raise ConfigurationError(str(exc)) from exc
    if not thresholds or settings.runonce:
        return None
    from edgelet.eviction.manager import EvictionManager
    from edgelet.eviction.signals import HostSignals
    from edgelet.eviction.usage import pod_usages

    signals = HostSignals(settings.root_dir, settings.images_dir)

    def dirs_of(pod):
        meta = pod.metadata
        return [paths.pod_dir(meta.uid), paths.pod_log_dir(meta.namespace, meta.name, meta.uid)]

    async def usage():
        return await asyncio.to_thread(pod_usages, list(loop.desired().values()), runtime.pod_cgroup, dirs_of)

    async def evict(uid: str, reason: str, message: str, grace: float | None) -> None:
        syncer.evict(uid, reason, message, grace)
        loop.emit_probe_result(uid)  # sync it now: the sync kills it

    def readmit(uid: str) -> None:
        syncer.readmit(uid)
        loop.emit_probe_result(uid)

    async def reclaim(signal: str) -> None:
        await image_gc.collect(force=True)

    return EvictionManager(
        thresholds,
        clock=clock,
        observe=signals.observe,
        usage=usage,
        evict=evict,
        readmit=readmit,
        reclaim=reclaim,
        interval=settings.eviction_monitoring_interval,
        transition_period=settings.eviction_pressure_transition_period,
        max_pod_grace=settings.eviction_max_pod_grace_period,
    )


def build_node_shutdown(
    settings: Settings, clock: Clock, *, loop: SyncLoop, syncer: Syncer, runtime: RuncRuntime
) -> NodeShutdown | None:
    """Graceful node shutdown over the agent's pods, or None when --shutdown-grace-period is 0."""
    from edgelet.api.pod import spec
    from edgelet.eviction.decide import pod_priority
    from edgelet.sync.shutdown import MESSAGE, REASON, NodeShutdown

    if settings.shutdown_grace_period <= 0:
        return None

    def priorities() -> dict[str, int]:
        return {uid: pod_priority(spec(p).priority_class_name, spec(p).priority) for uid, p in loop.desired().items()}

    def stop(uid: str, cap: float) -> None:
        pod = loop.desired().get(uid)
        own = spec(pod).termination_grace_period_seconds if pod is not None else None
        syncer.evict(uid, REASON, MESSAGE, min(float(30 if own is None else own), cap))
        loop.emit_probe_result(uid)

    async def running(uid: str) -> bool:
        rt = await runtime.pod_status(uid)
        return any(c.state in ("running", "created") for c in rt.containers) or any(
            sb.state in ("running", "created") for sb in rt.sandboxes
        )

    def restart(uid: str) -> None:
        syncer.readmit(uid)
        loop.emit_probe_result(uid)

    return NodeShutdown(
        clock=clock,
        total=settings.shutdown_grace_period,
        critical=settings.shutdown_grace_period_critical_pods,
        priorities=priorities,
        stop=stop,
        running=running,
        restart=restart,
    )


def build_api(
    settings: Settings,
    paths: RuntimePaths,
    clock: Clock,
    *,
    metrics: Metrics,
    publisher: StatusPublisher,
    events: EventRecorder,
    pleg: Pleg,
    loop: SyncLoop,
    runtime: RuncRuntime,
    mirror: MirrorManager | None,
    rollout: RolloutManager,
    node_conditions: Callable[[], list[dict[str, str]]],
    object_reports: Callable[[], list] | None = None,
    tunnel: Tunnel | None = None,
) -> tuple[StatsCollector, ApiServer, NodeApiPlan | None]:
    """The local API (the CLI's unix socket, healthz, metrics) and, when enabled, the node API beside it."""
    from edgelet.server.api import Api, ApiServer, ApiSources
    from edgelet.stats.collector import StatsCollector

    metrics.watch_publisher(publisher)
    if tunnel is not None:
        metrics.watch_tunnel(tunnel)
    tunnel_address = tunnel.address if tunnel is not None else None
    stats = StatsCollector(
        paths,
        pleg.pods,
        clock,
        node_name=settings.node_name,
        pod_cgroup=runtime.pod_cgroup,
        images_dir=settings.images_dir,
    )
    api = Api(
        ApiSources(
            publisher=publisher,
            events=events,
            paths=paths,
            clock=clock,
            metrics=metrics,
            last_sync_iteration=lambda: loop.last_iteration,
            last_relist=lambda: pleg.last_relist,
            node_state=mirror.snapshot if mirror is not None else None,
            stats=stats,
            start_exec=runtime.start_exec,
            node_conditions=node_conditions,
            rollout_records=rollout.records,
            rollout_retry=rollout.retry,
            config_objects=object_reports,
        )
    )
    node_api = None
    if settings.node_api_enabled:
        node_api = NodeApiPlan(
            settings,
            api,
            # The tunnel's address, when there is one, is the node's own: the certificate names it.
            host_ip=lambda: tunnel_address or publisher.host_ip,
            stats=stats,
            runtime_pods=pleg.pods,
            metrics=metrics,
            tunnel=tunnel,
        )
    server = ApiServer(
        api, paths.run_dir, healthz_port=settings.healthz_port, healthz_bind_address=settings.healthz_bind_address
    )
    return stats, server, node_api


class NodeApiPlan:
    """The node API of an agent, checked at construction and opened at start (a self-signed pair may be made)."""

    def __init__(
        self,
        settings: Settings,
        api: Any,
        *,
        host_ip: Callable[[], str],
        stats: Any,
        runtime_pods: Callable[[], Mapping[str, PodRuntimeStatus]],
        metrics: Metrics,
        tunnel: Tunnel | None = None,
    ) -> None:
        from edgelet.server.auth import parse_grant

        try:
            for g in settings.node_api_grants:
                parse_grant(g)
        except ValueError as exc:
            raise ConfigurationError(f"--node-api-grants: {exc}") from exc
        self._settings = settings
        self._api = api
        self._host_ip = host_ip
        self._stats = stats
        self._runtime_pods = runtime_pods
        self._metrics = metrics
        self._tunnel = tunnel
        self.server = None

    @property
    def port(self) -> int | None:
        """The port to advertise: the bound one, else the configured one."""
        if self.server is not None and self.server.port is not None:
            return self.server.port
        settings = self._settings
        return settings.port if settings.port else None

    async def start(self):
        from edgelet.server.auth import AuthConfigError
        from edgelet.server.nodeapi import DEFAULT_PORT, NodeApi, NodeApiServer, build_config
        from edgelet.server.tls import TlsError
        from edgelet.tunnel.device import on_tunnel

        settings = self._settings
        tunnel = self._tunnel
        tunnel_address = tunnel.address if tunnel is not None else None
        try:
            config = await build_config(
                node_name=settings.node_name,
                root_dir=settings.root_dir,
                addresses=[x for x in (settings.node_ip or self._host_ip(), settings.address, tunnel_address) if x],
                # A kept certificate that does not name the tunnel address is made again.
                required=[tunnel_address] if tunnel_address else [],
                cert=settings.tls_cert_file,
                key=settings.tls_private_key_file,
                client_ca=settings.client_ca_file,
                token_file=settings.api_token_file,
                grants=settings.node_api_grants,
            )
        except (TlsError, AuthConfigError) as exc:
            raise ConfigurationError(str(exc)) from exc
        from edgelet.streaming.spdy import Limits

        handler = NodeApi(
            self._api,
            config,
            stats=self._stats,
            runtime_pods=self._runtime_pods,
            metrics=self._metrics,
            cgroup_root=settings.cgroup_root,
            spdy_limits=Limits(idle_timeout=settings.streaming_connection_idle_timeout),
        )
        # Listening on the tunnel's own address waits for the tunnel to be first up.
        after = tunnel.went_up if tunnel is not None and on_tunnel(settings.address, tunnel.config) else None
        port = DEFAULT_PORT if settings.port is None else settings.port
        self.server = NodeApiServer(handler, config, settings.address or "0.0.0.0", port, after=after)
        if after is None:
            await self.server.start()
        return self.server
