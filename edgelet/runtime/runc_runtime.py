"""RuncRuntime: the `Runtime` protocol over runc and conmon, with state rebuilt from runc, annotations and exit files.

Every container is a runc container under a private root, created by a
daemonised conmon (which outlives edgelet, holds stdio, writes the CRI log
and the exit file). A pod's sandbox is of one of the kinds behind
`runtime.sandboxkind.SandboxKind`: its namespaces pinned as files
(`pinned_sandbox`), or a pause process (`infra_sandbox`). Nothing is kept
only in memory: `list_pods` rebuilds the whole actual state from `runc list`
(with annotations), the exit directory and the bundles on disk
(`runtime.observe`), so a fresh instance adopts what an earlier edgelet
started.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.api.configobjects import ConfigObjects
from edgelet.api.pod import full_name, meta
from edgelet.api.pod import spec as pod_spec
from edgelet.api.pod import uid as pod_uid
from edgelet.cgroups import qos as cg_qos
from edgelet.cgroups.controllers import Admission
from edgelet.cgroups.qos import PodResources
from edgelet.container.errors import (
    CreateContainerConfigError,
    CreateContainerError,
    ExecError,
    RuntimeError_,
    SandboxError,
    StartContainerError,
)
from edgelet.container.types import PodRuntimeStatus, PreparedContainer, SandboxRecord
from edgelet.ocispec import build as ocispec
from edgelet.ocispec.errors import SpecError
from edgelet.runtime import _exec, conmon, secretspec
from edgelet.runtime import bundle as bl
from edgelet.runtime.containerprep import (
    Prepared,
    SecurityFacts,
    prepare_container_dirs,
    remove_stale_bundle,
)
from edgelet.runtime.containerspecs import ContainerSpecs
from edgelet.runtime.execs import Execs
from edgelet.runtime.handlers import DEFAULT_HANDLER, HandlerConfig, RuntimeHandlers, admit_handler, pod_handler
from edgelet.runtime.host import (
    HostFacts,
    probe_host_facts,
)
from edgelet.runtime.infra_sandbox import InfraSandboxes
from edgelet.runtime.layout import (
    ANN_ATTEMPT,
    ANN_CONTAINER_NAME,
    ANN_CONTAINER_TYPE,
    ANN_CREATED,
    ANN_GRACE,
    ANN_HASH,
    ANN_IMAGE,
    ANN_IMAGE_ID,
    ANN_KIND,
    ANN_LOG_PATH,
    ANN_POD_NAME,
    ANN_POD_NAMESPACE,
    ANN_POD_UID,
    ANN_RUNTIME_HANDLER,
    ANN_SANDBOX_ID,
    KIND_CONTAINER,
    KIND_SANDBOX,
    RuntimePaths,
)
from edgelet.runtime.observe import Observer
from edgelet.runtime.pinned_sandbox import PinnedSandboxes
from edgelet.runtime.podcgroups import PodCgroups
from edgelet.runtime.removal import ContainerRemoval
from edgelet.runtime.runc import Runc
from edgelet.runtime.sandbox import needs_infra, sandbox_namespace_paths
from edgelet.runtime.sandboxkind import PodFiles, SandboxKind, SandboxOpening
from edgelet.runtime.sandboxnet import SandboxNetworks
from edgelet.runtime.state import build_pod_statuses
from edgelet.runtime.termination import termination_annotations
from edgelet.state import ensure_dir
from edgelet.util.clock import Clock, RealClock
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.images.types import ImageRecord
    from edgelet.network.manager import PodNetwork
    from edgelet.runtime.execsession import ExecSession

log = get_logger("edgelet.runtime")

MIN_STOP_GRACE = 2.0  # kubelet: at least 2 s between the stop signal and SIGKILL


def _new_id() -> str:
    return secrets.token_hex(32)


class RuncRuntime:
    """Implements `edgelet.runtime.Runtime` with runc and conmon; a pod's sandbox is its namespaces pinned as
    files (a catatonit pause process only where the pod shares its PID namespace, or with `infra_container`)."""

    def __init__(
        self,
        paths: RuntimePaths,
        *,
        runtime_bin: str = "runc",
        conmon_bin: str = "conmon",
        catatonit_bin: str = "catatonit",
        pause_image: ImageRecord | None = None,
        clock: Clock | None = None,
        node_hostname: str | None = None,
        host_facts: HostFacts | None = None,
        runner: _exec.Runner = _exec.run,
        pod_max_pids: int = 0,
        node_cgroup: PodResources | None = None,
        allow_missing_controllers: bool = False,
        cgroup_controllers: frozenset[str] | None = None,
        network: PodNetwork | None = None,
        cluster_dns: Sequence[str] = (),
        cluster_domain: str = "",
        allowed_unsafe_sysctls: tuple[str, ...] = (),
        seccomp_default: bool = True,
        on_warning: Callable[[Pod, str | None, str, str], None] | None = None,
        log_size_max: int | None = None,
        infra_container: bool = False,
        runtime_handlers: Mapping[str, HandlerConfig] | None = None,
        runtime_handler: str = DEFAULT_HANDLER,
        config_objects: ConfigObjects | None = None,
    ) -> None:
        """`seccomp_default` is kubelet's --seccomp-default; `on_warning(pod, container, reason, message)`
        hears what a container runs without although asked (an AppArmor default that is not loaded).
        `runtime_handlers` (default: runc alone, from `runtime_bin`) are the OCI runtimes pods pick with
        runtimeClassName; `runtime_handler` is the one of a pod without."""
        # True: every new sandbox runs a pause process, as before (--pod-infra-container); False: only the pods
        # that share their PID namespace get one.
        self.infra_container = infra_container
        # The accepted ConfigMaps and Secrets (podconfig replaces them): env and config volumes are made from them.
        self.config_objects = config_objects if config_objects is not None else ConfigObjects()
        # Every runc and conmon invocation goes through `runner`: unit tests script it.
        self.runner = runner
        # conmon's own cut (--log-size-max), the backstop when rotation falls behind or edgelet is down.
        self.log_size_max = log_size_max
        self.allowed_unsafe_sysctls = allowed_unsafe_sysctls
        self.paths = paths
        self.on_warning = on_warning
        self.handlers = RuntimeHandlers(
            runtime_handlers if runtime_handlers is not None else {DEFAULT_HANDLER: HandlerConfig(runtime_bin)},
            runtime_handler,
            paths,
            runner=runner,
        )
        self.conmon_bin = shutil.which(conmon_bin) or conmon_bin
        self.clock: Clock = clock or RealClock()
        self.node_hostname = node_hostname or socket.gethostname()
        self.runc = self.handlers.get(runtime_handler)  # the default handler's
        self.runtime_path = self.runc.binary
        self.host = host_facts or probe_host_facts()
        self.security = SecurityFacts(
            paths.seccomp_dir, self.host, seccomp_default=seccomp_default, on_warning=on_warning
        )
        self.cgroups = PodCgroups(
            paths.cgroup_root,
            pod_max_pids=pod_max_pids,
            node_cgroup=node_cgroup,
            allow_missing_controllers=allow_missing_controllers,
            controllers=cgroup_controllers,
        )
        self.networks = SandboxNetworks(network, on_warning)
        self.pod_files = PodFiles(
            paths.log_dir, cluster_dns=cluster_dns, cluster_domain=cluster_domain, on_warning=on_warning
        )
        self.pinned = PinnedSandboxes(self)
        self.infra = InfraSandboxes(self, catatonit_bin=catatonit_bin, pause_image=pause_image)
        # Asked in this order which kind an existing sandbox's record is; the infra kind last (see SandboxKind).
        self.sandbox_kinds: tuple[SandboxKind, ...] = (self.pinned, self.infra)
        self.observer = Observer(
            paths,
            [self.runc, *(r for r in self.handlers.all() if r is not self.runc)],  # the default first
            self.clock,
            pod_cgroups=self.pod_cgroups,
            kind_of=self.kind_of_record,
        )
        self.removal = ContainerRemoval(self)
        self.specs = ContainerSpecs(self.config_objects, paths, self.host, self.clock, self.layout, on_warning)
        self.execs = Execs(runner, paths.exec_dir, spec_dir=paths.run_dir / secretspec.SPECS)
        # The exit dir must exist before anything watches it (PLEG's inotify).
        self._ensure_dirs()

    @property
    def network(self) -> PodNetwork | None:
        """CNI; None: pods without hostNetwork get loopback only."""
        return self.networks.network

    @property
    def pod_max_pids(self) -> int:
        return self.cgroups.pod_max_pids

    def runc_for(self, pod: Pod | None) -> Runc:
        """The runtime handler a new sandbox of `pod` runs under: its runtimeClassName's, else the default."""
        return self.runc if pod is None else self.handlers.for_pod(pod)

    def handler_name(self, pod: Pod) -> str:
        """The name of the handler a new sandbox of `pod` gets (see handlers.pod_handler)."""
        return pod_handler(pod, self.handlers.default)

    async def runc_of(self, cid: str) -> Runc:
        """The handler container (or sandbox) `cid` runs under, by what holds it or what its record says; the
        default's for an id no handler and no bundle knows (asking it finds nothing, as for any gone id)."""
        name = self.observer.handler_of(cid)
        if name is None and len(self.handlers.runcs) == 1:
            return self.runc
        if name is None:
            await self.observer.observe()
            name = self.observer.handler_of(cid)
        return self.runc if name is None else self.handlers.get(name)

    # ------------------------------------------------------------ paths and cgroups

    def layout(self, uid: str) -> bl.PodLayout:
        return bl.PodLayout(self.paths.pod_dir(uid))

    def pod_cgroups(self, uid: str) -> list[str]:
        """Every place kubelet's cgroupfs layout may put the pod (see PodCgroups.candidates)."""
        return self.cgroups.candidates(uid)

    def pod_cgroup(self, uid: str, pod: Pod | None = None) -> str:
        """The pod's cgroup: from its QoS class when the pod is known, else the one that exists."""
        return self.cgroups.of(uid, pod)

    def cgroup_controllers(self) -> frozenset[str]:
        return self.cgroups.controllers()

    def admit(self, pod: Pod) -> Admission | None:
        """Whether the pod can run here: its runtime handler exists (see handlers.admit_handler), and its limits
        can be applied (see PodCgroups.admit)."""
        return admit_handler(pod, self.handlers.names, self.handlers.default) or self.cgroups.admit(pod)

    def cmdline_file(self) -> str | None:
        return self.cgroups.cmdline_file()

    def monitor_cgroup(self, uid: str, pod: Pod | None = None) -> str:
        """Where the pod's conmons live (see PodCgroups.monitor)."""
        return self.cgroups.monitor(uid, pod)

    def _ensure_dirs(self) -> None:
        # Private: bundles and checkpoints hold pod specs with their env values.
        for directory in (self.paths.root_dir, self.paths.run_dir):
            ensure_dir(directory, tighten_from=directory)
        for directory in (
            self.paths.runc_root,
            self.paths.exit_dir,
            self.paths.socket_dir,
            self.paths.pods_dir,
            self.paths.ns_dir,
        ):
            ensure_dir(directory, tighten_from=directory)

    # ------------------------------------------------------------ observation

    async def list_pods(self) -> dict[str, PodRuntimeStatus]:
        observed = await self.observer.observe()
        return self.networks.mark(build_pod_statuses(observed, await asyncio.to_thread(self._pod_dir_uids)))

    def _pod_dir_uids(self) -> list[str]:
        try:
            return [d.name for d in self.paths.pods_dir.iterdir() if d.is_dir()]
        except FileNotFoundError:
            return []

    async def pod_status(self, uid: str) -> PodRuntimeStatus:
        # Every sandbox and container of a pod has its bundle under the pod's dir: without
        # that dir there is nothing to ask runc about (a new pod's first sync skips `runc list`).
        # A copy: observation threads add to the map while this runs on the loop (list() copies under the GIL).
        known = any(uid in bundle.parts for bundle in list(self.observer.bundles.values()))  # seen by a relist
        if not known and not await asyncio.to_thread(self.paths.pod_dir(uid).is_dir):
            return PodRuntimeStatus(uid=uid)
        statuses = build_pod_statuses(await self.observer.observe(uid))
        return self.networks.mark(statuses).get(uid, PodRuntimeStatus(uid=uid))

    # ------------------------------------------------------------ sandbox

    def kind_of_record(self, annotations: Mapping[str, str]) -> SandboxKind | None:
        """The kind of the sandbox whose record holds `annotations`; None for a container."""
        if annotations.get(ANN_KIND) != KIND_SANDBOX:
            return None
        return self._sandbox_kind(annotations)

    def _sandbox_kind(self, annotations: Mapping[str, str]) -> SandboxKind:
        """The kind of a sandbox by its record's annotations (none readable: the infra kind's)."""
        return next(kind for kind in self.sandbox_kinds if kind.owns(annotations))

    def kind_for_pod(self, pod: Pod) -> SandboxKind:
        """The kind of a new sandbox for `pod`."""
        return self.infra if self.infra_container or needs_infra(pod) else self.pinned

    async def _open_sandbox(self, pod: Pod, attempt: int) -> SandboxOpening:
        """What every new sandbox starts from; a sandbox left in the bundle dir is removed first (a new
        sandbox means the old one is done)."""
        uid = pod_uid(pod)
        layout = self.layout(uid)
        self._ensure_dirs()
        old = await asyncio.to_thread(bl.read_id, layout.sandbox_dir)
        if old:
            await self.remove_container(old)
        return SandboxOpening(
            pod=pod,
            attempt=attempt,
            uid=uid,
            layout=layout,
            sid=_new_id(),
            handler=self.handler_name(pod),
            host_network=bool(pod.spec is not None and pod_spec(pod).host_network),
            hostname=bl.pod_hostname(pod, self.node_hostname, self.pod_files.cluster_domain),
            created=self.clock.now(),
            log_path=self.paths.pod_log_dir(meta(pod).namespace or "default", meta(pod).name or "", uid)
            / "sandbox.log",
        )

    async def create_sandbox(self, pod: Pod, attempt: int) -> SandboxRecord:
        """run_sandbox's first half where the pod has a CNI network: everything but the plugin chain's ADD."""
        kind = self.kind_for_pod(pod)
        opening = await self._open_sandbox(pod, attempt)
        self.observer.handlers[opening.sid] = opening.handler  # an undo of a half-made one asks it
        sandbox = await kind.create(opening)
        self.observer.bundles[sandbox.id] = opening.bundle
        return sandbox

    async def run_sandbox(self, pod: Pod, attempt: int) -> SandboxRecord:
        sandbox = await self.create_sandbox(pod, attempt)
        if sandbox.state == "running":
            return sandbox
        try:
            return await self.start_sandbox(pod, sandbox)
        except BaseException:
            # Whatever failed (or a cancellation), nothing half-made stays behind.
            await asyncio.shield(self._kind_of_sandbox(sandbox).undo(sandbox))
            raise

    def _kind_of_sandbox(self, sandbox: SandboxRecord) -> SandboxKind:
        return self.pinned if not sandbox.infra else self.infra

    async def start_sandbox(self, pod: Pod, sandbox: SandboxRecord) -> SandboxRecord:
        """The second half: ADD in the namespace made, then /etc/hosts with the pod IPs (rewritten in place:
        a container created meanwhile has it bind-mounted), the sysctls and the start time, the mark of a
        started sandbox. On failure (or a cancellation) the sandbox is left created, never started, for the
        caller to remove once what it created in it is gone."""
        if sandbox.state == "running":
            return sandbox
        return await self._kind_of_sandbox(sandbox).start(pod, sandbox)

    async def stop_sandbox(self, sandbox_id: str) -> None:
        bundle = await self.observer.bundle_of(sandbox_id)
        ann = await asyncio.to_thread(bl.read_annotations, bundle)
        await self._sandbox_kind(ann).stop(sandbox_id, bundle)

    def release_sandbox(self, sandbox_id: str) -> None:
        """What a removed sandbox held beyond its bundle, whatever its kind (blocking)."""
        for kind in self.sandbox_kinds:
            kind.release(sandbox_id)

    # ------------------------------------------------------------ networks

    async def check_networks(
        self, pods: Mapping[str, PodRuntimeStatus] | None = None, only: set[str] | None = None
    ) -> dict[str, str]:
        """Housekeeping: CNI CHECK of every running sandbox's network (of the sandboxes in `only` when given);
        {pod uid: why} for the pods whose sandbox network is broken (see SandboxNetworks.check)."""
        return await self.networks.check(pods, self.list_pods, only)

    async def network_changes(self, pods: Mapping[str, PodRuntimeStatus]) -> set[str]:
        """The running sandboxes whose links or addresses changed in a way that may have broken their network
        since the last call (see SandboxNetworks.changed)."""
        return await self.networks.changed(pods)

    async def cleanup_networks(self) -> int:
        """At start: release the network of every sandbox that no longer runs (a crash, a power cut)."""
        return await self.networks.cleanup(self.list_pods)

    def seccomp_host(self, pod: Pod) -> ocispec.SeccompHost:
        """The settings and host facts seccomp needs (see SecurityFacts.seccomp_host)."""
        return self.security.seccomp_host(pod)

    # ------------------------------------------------------------ containers

    def conmon_args(
        self,
        cid: str,
        name: str,
        bundle: Path,
        log_path: Path,
        *,
        runc: Runc,
        stdin: bool = False,
        stdin_once: bool = False,
        terminal: bool = False,
    ) -> conmon.ConmonArgs:
        """conmon's arguments for container (or pause process) `cid`, run by `runc`'s binary and root."""
        runtime, runtime_fd = runc.conmon_runtime()
        return conmon.ConmonArgs(
            conmon=self.conmon_bin,
            runtime=runtime,
            runtime_fd=runtime_fd,
            runtime_root=runc.root,
            container_id=cid,
            name=name,
            bundle=bundle,
            log_path=log_path,
            exit_dir=self.paths.exit_dir,
            socket_dir=self.paths.socket_dir,
            log_size_max=self.log_size_max,
            stdin=stdin,
            stdin_once=stdin_once,
            terminal=terminal,
        )

    async def create_container(
        self,
        pod: Pod,
        container: Container,
        sandbox: SandboxRecord,
        image: ImageRecord,
        attempt: int,
        container_type: str = "regular",
        prepared: PreparedContainer | None = None,
    ) -> str:
        uid = pod_uid(pod)
        ns, pod_name = meta(pod).namespace or "", meta(pod).name or ""
        prepared = await self._prepared_for(pod, container, sandbox, image, attempt, container_type, prepared)
        prepared_data: Prepared = prepared.data
        cid, bundle, layout = prepared.id, prepared_data.bundle, self.layout(uid)
        done = False
        try:
            annotations = _container_annotations(
                pod, container, sandbox, image, attempt, container_type, prepared_data.log_path, self.clock.now()
            )
            ctx_args = dict(
                rootfs=str(prepared_data.rootfs_dir),
                cgroups_path=f"{self.cgroups.of(uid, pod)}/{cid}",
                pids_limit=cg_qos.pod_pids_limit(pod, self.cgroups.pod_max_pids),
                without_controllers=self.cgroups.missing_controllers(),
                allowed_unsafe_sysctls=self.allowed_unsafe_sysctls,
                namespace_paths=sandbox_namespace_paths(
                    pod, sandbox.pid, sandbox.netns, None if sandbox.infra else dict(sandbox.namespaces)
                ),
                hostname=bl.pod_hostname(pod, self.node_hostname, self.pod_files.cluster_domain),
                annotations=annotations,
                passwd=prepared_data.passwd,
                groups=prepared_data.groups,
                group_members=prepared_data.members,
                memory_capacity=self.host.memory_capacity,
                swap_controller=self.host.swap_controller,
                min_oom_score_adj=self.host.min_oom_score_adj,
                **prepared_data.facts,
            )

            runc = self.handlers.get(sandbox.runtime_handler)  # its sandbox's, whatever the default is now
            self.observer.handlers[cid] = runc.name  # an undo of a half-made one asks it
            # conmon starts up meanwhile and waits on its start pipe for the config (conmon.create's `start`).
            configured = asyncio.ensure_future(
                asyncio.to_thread(self.specs.write_spec, pod, container, image, layout, bundle, cid, ctx_args)
            )
            monitor = self.cgroups.monitor(uid, pod)

            async def join_pod(conmon_pid: int) -> None:
                # Moved while it waits on its start pipe, as CRI-O does: conmon, the `runc create` it runs and
                # the monitor it forks start in the pod's cgroup, counted against its pids.max from their first
                # fork, and nothing stands between create and start. (A process moved into a cgroup is not held
                # to its pids.max: a conmon moved in later could exceed a pod that had forked up to its limit.)
                await asyncio.to_thread(self.cgroups.move_conmon, conmon_pid, monitor)

            name = f"k8s_{container.name}_{pod_name}_{ns}_{uid}_{attempt}"
            await conmon.create(
                self.conmon_args(
                    cid,
                    name,
                    bundle,
                    prepared_data.log_path,
                    runc=runc,
                    stdin=bool(container.stdin),
                    stdin_once=bool(container.stdin_once),
                    terminal=bool(container.tty),
                ),
                runner=self.runner,
                start=configured,
                on_spawn=join_pod,
            )
            ctx, redacted = configured.result()
            self.security.warn_apparmor(pod, container, ctx)
            if redacted is not None:
                await asyncio.to_thread(bl.write_file, bundle / bl.CONFIG, json.dumps(redacted, indent=1))
            self.specs.warn_env_skipped(pod, container)
            crash_point("container.create")
            done = True
        except CreateContainerError:
            raise
        except (SpecError, RuntimeError_, OSError) as exc:
            raise _create_error(pod, container, exc) from exc
        finally:
            if not done:
                # Whatever failed (or a cancellation), nothing half-made stays behind.
                await asyncio.shield(self.undo_container(cid, bundle, prepared_data.link))
        self.observer.bundles[cid] = bundle
        log.info("Container created", pod=full_name(pod), container=container.name, id=cid[:12], attempt=attempt)
        return cid

    async def refresh_config_volumes(self, pod: Pod) -> list[str]:
        return await self.specs.refresh_volumes(pod)

    async def _prepared_for(
        self,
        pod: Pod,
        container: Container,
        sandbox: SandboxRecord,
        image: ImageRecord,
        attempt: int,
        container_type: str,
        prepared: PreparedContainer | None,
    ) -> PreparedContainer:
        """What create_container finishes from: `prepared` when it is this instance's, else a new preparation.
        SandboxError when the sandbox cannot hold containers now; a preparation refused is discarded."""
        try:
            self._kind_of_sandbox(sandbox).check_running(pod, sandbox)
        except SandboxError:
            if prepared is not None:
                await self.discard_prepared(prepared)
            raise
        if prepared is None:
            return await self.prepare_container(pod, container, image, attempt, container_type)
        if (prepared.pod_uid, prepared.name, prepared.attempt, prepared.image_id) != (
            pod_uid(pod),
            container.name,
            attempt,
            image.id,
        ):
            await self.discard_prepared(prepared)
            raise CreateContainerError(
                f"pod {full_name(pod)} container {container.name}: prepared for another instance"
                f" ({prepared.name} attempt {prepared.attempt})"
            )
        return prepared

    async def prepare_container(
        self,
        pod: Pod,
        container: Container,
        image: ImageRecord,
        attempt: int,
        container_type: str = "regular",
    ) -> PreparedContainer:
        uid = pod_uid(pod)
        ns, pod_name = meta(pod).namespace or "", meta(pod).name or ""
        layout = self.layout(uid)
        self._ensure_dirs()
        bundle = layout.container_dir(container.name, attempt)
        cid = _new_id()
        log_path = self.paths.container_log_path(ns, pod_name, uid, container.name, attempt)
        link = self.paths.container_log_link(ns, pod_name, container.name, cid)
        done = False

        def make() -> tuple[str | None, Any]:
            # A leftover of the same instance (a crash between create and record) is replaced.
            old = bl.read_id(bundle)
            if old:
                return old, None
            if bundle.exists():
                # One without an id (a power cut before its directory entries reached storage) names no
                # container to remove, but its writable layer must not become the new instance's.
                remove_stale_bundle(bundle)
            return None, (
                prepare_container_dirs(self.paths.log_dir, image, bundle, cid, log_path, link),
                self.security.container_facts(pod, container),
            )

        try:
            # One trip to a worker thread in the usual case: on a busy machine each trip waits for a core.
            old, made = await asyncio.to_thread(make)
            if old:
                await self.remove_container(old)
                old, made = await asyncio.to_thread(make)
                if old:
                    raise CreateContainerError(
                        f"pod {full_name(pod)} container {container.name}: the previous"
                        f" instance {old[:12]} in {bundle} was not removed"
                    )
            (rootfs_dir, passwd, groups, members), facts = made
            done = True
        except CreateContainerError:
            raise
        except (SpecError, RuntimeError_, OSError) as exc:
            raise _create_error(pod, container, exc) from exc
        finally:
            if not done:
                await asyncio.shield(self._undo_prepared(cid, bundle, link))
        return PreparedContainer(
            id=cid,
            pod_uid=uid,
            name=container.name,
            attempt=attempt,
            image_id=image.id,
            data=Prepared(
                bundle=bundle,
                log_path=log_path,
                link=link,
                rootfs_dir=rootfs_dir,
                passwd=passwd,
                groups=groups,
                members=members,
                facts=facts,
            ),
        )

    async def discard_prepared(self, prepared: PreparedContainer) -> None:
        prepared_data: Prepared = prepared.data
        await asyncio.shield(self._undo_prepared(prepared.id, prepared_data.bundle, prepared_data.link))

    async def _undo_prepared(self, cid: str, bundle: Path, link: Path) -> None:
        """Remove what prepare_container made: no conmon and no runc state exist yet, only files and the mount."""

        def undo() -> None:
            if os.path.lexists(link):
                link.unlink()
            self.remove_files(cid, bundle)

        try:
            await asyncio.to_thread(undo)
        except (RuntimeError_, OSError) as exc:
            log.error("Cleanup after a failed create left things behind", exc, container=cid[:12], bundle=str(bundle))

    async def start_container(self, container_id: str) -> None:
        bundle = await self.observer.bundle_of(container_id)
        try:
            await (await self.runc_of(container_id)).start(container_id)
        except RuntimeError_ as exc:
            raise StartContainerError(f"container {container_id[:12]}: {exc}") from exc
        if bundle is not None:
            await asyncio.to_thread(bl.write_file, bundle / bl.STARTED_FILE, repr(self.clock.now()))

    async def stop_container(self, container_id: str, grace: float, signal: str = "SIGTERM") -> None:
        bundle = await self.observer.bundle_of(container_id)
        if await self.removal.has_exited(container_id, bundle):
            return
        try:
            await (await self.runc_of(container_id)).kill(container_id, signal)
        except ExecError:
            if await self.removal.has_exited(container_id, bundle):
                return
            log.warning("Stop signal failed, killing", container=container_id[:12], signal=signal)
        else:
            crash_point("container.stop")
            if await self.removal.wait_exit(container_id, bundle, max(grace, MIN_STOP_GRACE)):
                return
            log.info("Grace period over, killing", container=container_id[:12], grace=grace)
        await self.kill_and_wait(container_id, bundle)

    async def exec_sync(self, container_id: str, argv: Sequence[str], timeout: float | None) -> _exec.Completed:
        """`runc exec` `argv` in the container and wait for it (probes, hooks); never raises on a non-zero exit,
        ExecTimeout when `timeout` passes (the command killed, see Execs.run)."""
        return await self.execs.run(await self.runc_of(container_id), container_id, argv, timeout)

    async def start_exec(
        self, container_id: str, argv: Sequence[str], *, tty: bool, stdin: int, stdout: int, stderr: int
    ) -> ExecSession:
        """Start `argv` in the running container with its own process spec (`edgelet exec`), on the given
        descriptors; the caller waits for, signals or kills the returned session. ExecSessionError when the
        container is not running or has no bundle."""
        return await self.execs.start(
            await self.runc_of(container_id),
            container_id,
            self.observer.bundle_of,
            argv,
            tty=tty,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
        )

    async def kill_and_wait(self, cid: str, bundle: Path | None) -> None:
        await self.removal.kill_and_wait(cid, bundle)

    async def remove_container(self, container_id: str) -> None:
        await self.removal.remove_container(container_id)

    async def release_container(self, container_id: str) -> None:
        await self.removal.release_container(container_id)

    def remove_files(self, cid: str, bundle: Path | None, ann: Mapping[str, str] | None = None) -> None:
        self.removal.remove_files(cid, bundle, ann)

    async def remove_stray_files(self) -> int:
        return await self.removal.remove_stray_files()

    async def undo_container(self, cid: str, bundle: Path, link: Path | None = None) -> None:
        await self.removal.undo_container(cid, bundle, link)

    # ------------------------------------------------------------ pods

    async def remove_pod(self, uid: str) -> None:
        await self.removal.remove_pod(uid)


def _container_annotations(
    pod: Pod,
    container: Container,
    sandbox: SandboxRecord,
    image: ImageRecord,
    attempt: int,
    container_type: str,
    log_path: Path,
    created: float,
) -> dict[str, str]:
    """The container's record in its bundle's config.json: what a relist rebuilds its state from."""
    from edgelet.api.hash import container_hash

    return {
        ANN_KIND: KIND_CONTAINER,
        ANN_POD_UID: pod_uid(pod),
        ANN_POD_NAME: meta(pod).name or "",
        ANN_POD_NAMESPACE: meta(pod).namespace or "",
        ANN_CONTAINER_NAME: container.name,
        ANN_CONTAINER_TYPE: "init" if container_type == "init" else "regular",
        ANN_ATTEMPT: str(attempt),
        ANN_HASH: container_hash(container),
        ANN_SANDBOX_ID: sandbox.id,
        ANN_IMAGE: container.image or "",
        ANN_IMAGE_ID: image.id,
        ANN_LOG_PATH: str(log_path),
        ANN_CREATED: repr(created),
        ANN_GRACE: str(_pod_grace(pod)),
        ANN_RUNTIME_HANDLER: sandbox.runtime_handler,
        # kubelet reads the message by what the container's annotations say, not by today's spec.
        **termination_annotations(container),
    }


def _pod_grace(pod: Pod) -> int:
    grace = pod_spec(pod).termination_grace_period_seconds if pod.spec is not None else None
    return 30 if grace is None else int(grace)


def _create_error(pod: Pod, container: Container, exc: Exception) -> CreateContainerError:
    """What a failed create (or its preparation) reports: a spec the pod asks for that cannot be expressed is
    kubelet's CreateContainerConfigError with the message unchanged; anything else names pod and container."""
    if isinstance(exc, SpecError):
        return CreateContainerConfigError(str(exc))
    return CreateContainerError(f"pod {full_name(pod)} container {container.name}: {exc}")
