"""The seam between the generic pod runtime and each kind of pod sandbox: the small `SandboxKind` interface
every kind implements, what the runtime lends them (`SandboxHost`), and what all kinds share: the opening of a
new sandbox (its id, bundle, hostname and first annotations) and the pod's files (/etc/hosts, resolv.conf).

As CRI-O keeps pinns apart from its sandbox code: `pinned_sandbox` pins the pod's namespaces as files,
`infra_sandbox` runs a pause process; a third kind is one more module implementing `SandboxKind`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from edgelet.api.pod import full_name, meta
from edgelet.container.types import SandboxRecord
from edgelet.logs import ensure_log_dir
from edgelet.runtime import bundle as bl
from edgelet.runtime.layout import (
    ANN_ATTEMPT,
    ANN_CREATED,
    ANN_HOST_NETWORK,
    ANN_KIND,
    ANN_POD_NAME,
    ANN_POD_NAMESPACE,
    ANN_POD_UID,
    ANN_RUNTIME_HANDLER,
    KIND_SANDBOX,
    RuntimePaths,
)
from edgelet.state import ensure_dir
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod
    from edgelet.ocispec import build as ocispec
    from edgelet.runtime import conmon
    from edgelet.runtime._exec import Runner
    from edgelet.runtime.host import HostFacts
    from edgelet.runtime.podcgroups import PodCgroups
    from edgelet.runtime.runc import Runc
    from edgelet.runtime.sandboxnet import SandboxNetworks
    from edgelet.util.clock import Clock

log = get_logger("edgelet.runtime")


@dataclasses.dataclass(frozen=True)
class SandboxOpening:
    """What every new sandbox starts from, whatever its kind: decided before anything is made."""

    pod: Pod
    attempt: int
    uid: str
    layout: bl.PodLayout
    sid: str
    host_network: bool
    hostname: str
    created: float
    log_path: Path
    handler: str = "runc"  # the runtime handler its pause process (if any) and its containers run under

    @property
    def bundle(self) -> Path:
        return self.layout.sandbox_dir

    @property
    def pod_name(self) -> str:
        return full_name(self.pod)

    def annotations(self) -> dict[str, str]:
        """The annotations every sandbox's record carries; a kind adds its own."""
        return {
            ANN_KIND: KIND_SANDBOX,
            ANN_POD_UID: self.uid,
            ANN_POD_NAME: meta(self.pod).name or "",
            ANN_POD_NAMESPACE: meta(self.pod).namespace or "",
            ANN_ATTEMPT: str(self.attempt),
            ANN_CREATED: repr(self.created),
            ANN_HOST_NETWORK: "true" if self.host_network else "false",
            ANN_RUNTIME_HANDLER: self.handler,
        }

    def record(self, **fields: object) -> SandboxRecord:
        """The sandbox's record; `fields` are the kind's (state, pid, ips, netns, infra, namespaces)."""
        return SandboxRecord(
            id=self.sid,
            pod_uid=self.uid,
            pod_name=meta(self.pod).name or "",
            pod_namespace=meta(self.pod).namespace or "",
            attempt=self.attempt,
            created_at=self.created,
            host_network=self.host_network,
            runtime_handler=self.handler,
            **fields,  # type: ignore[arg-type]
        )


class PodFiles:
    """The pod's /etc/hosts, resolv.conf and hostname files, bind-mounted into its containers."""

    def __init__(
        self,
        log_dir: Path,
        *,
        cluster_dns: Sequence[str] = (),
        cluster_domain: str = "",
        on_warning: Callable[[Pod, str | None, str, str], None] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.cluster_dns = tuple(cluster_dns)
        self.cluster_domain = cluster_domain
        self.on_warning = on_warning

    def hosts_text(self, pod: Pod, hostname: str, pod_ips: Sequence[str]) -> str:
        """The pod's /etc/hosts (blocking: with hostNetwork it starts from the node's)."""
        spec = pod.spec
        host_network = bool(spec is not None and spec.host_network)
        host_hosts = ""
        if host_network:
            try:
                host_hosts = bl.HOST_HOSTS.read_text()
            except OSError:
                host_hosts = ""
        aliases = [(alias.ip, tuple(alias.hostnames or ())) for alias in ((spec.host_aliases if spec else None) or [])]
        return bl.build_hosts_file(
            hostname,
            pod_ips=pod_ips,
            host_aliases=aliases,
            host_network=host_network,
            host_hosts=host_hosts,
            fqdn=bl.pod_fqdn(pod, hostname, self.cluster_domain),
        )

    def write(self, pod: Pod, layout: bl.PodLayout, hostname: str, pod_ips: Sequence[str] = ()) -> None:
        try:
            host_resolv = bl.HOST_RESOLV_CONF.read_text()
        except OSError:
            host_resolv = ""
        resolv, warnings = bl.pod_resolv_conf(pod, host_resolv, self.cluster_dns, self.cluster_domain)
        for warning in warnings:
            log.warning("DNS configuration", pod=full_name(pod), detail=warning)
            if "--cluster-dns" in warning and self.on_warning is not None:
                self.on_warning(pod, None, "MissingClusterDNS", warning)
        hosts = self.hosts_text(pod, hostname, pod_ips)
        # Bind-mounted into the containers, whose users (any uid) read them.
        # Not fsynced: every new sandbox writes them again, and a power cut leaves no sandbox to use them.
        bl.write_file(layout.hosts, hosts, 0o644, durable=False)
        bl.write_file(layout.resolv_conf, resolv, 0o644, durable=False)
        bl.write_file(layout.hostname, hostname + "\n", 0o644, durable=False)

    def prepare_sandbox_dirs(self, opening: SandboxOpening) -> None:
        """The pod dir with its files and volumes, and the sandbox's bundle holding its id (blocking)."""
        ensure_dir(opening.layout.dir)
        self.write(opening.pod, opening.layout, opening.hostname)
        # kubelet mounts volumes before it creates the sandbox.
        bl.prepare_volumes(bl.plan_volumes(opening.pod, opening.layout))
        ensure_dir(opening.bundle)
        bl.write_file(opening.bundle / bl.ID_FILE, opening.sid)
        ensure_log_dir(self.log_dir, opening.log_path.parent)


class SandboxHost(Protocol):
    """What the runtime lends its sandbox kinds: its paths and collaborators, and the steps a sandbox with a
    monitored process shares with containers."""

    paths: RuntimePaths
    clock: Clock
    host: HostFacts
    cgroups: PodCgroups
    networks: SandboxNetworks
    pod_files: PodFiles
    allowed_unsafe_sysctls: tuple[str, ...]
    node_hostname: str
    runner: Runner

    def runc_for(self, pod: Pod | None) -> Runc: ...

    def conmon_args(self, cid: str, name: str, bundle: Path, log_path: Path, *, runc: Runc) -> conmon.ConmonArgs: ...

    def seccomp_host(self, pod: Pod) -> ocispec.SeccompHost: ...

    async def kill_and_wait(self, cid: str, bundle: Path | None) -> None: ...

    async def undo_container(self, cid: str, bundle: Path) -> None: ...

    def remove_files(self, cid: str, bundle: Path | None) -> None: ...


class SandboxKind(Protocol):
    """One kind of pod sandbox. The runtime picks the kind of a new sandbox from the pod and its settings,
    that of an existing one by its record's annotations (`owns`, asked of each kind in turn, the infra kind
    last: records older than the other kinds are its), and asks the kind for what differs."""

    # Whether a process monitored by conmon stands for the sandbox (its liveness is conmon's and runc's).
    monitored: bool

    def owns(self, annotations: Mapping[str, str]) -> bool:
        """Whether a sandbox record with these annotations is of this kind."""
        ...

    async def create(self, opening: SandboxOpening) -> SandboxRecord:
        """Make the sandbox: "running" when nothing is left to do, "created" when its network is still to be
        attached by `start`. On failure (or a cancellation) nothing it made stays behind."""
        ...

    async def start(self, pod: Pod, sandbox: SandboxRecord) -> SandboxRecord:
        """Finish a sandbox `create` left "created" (its CNI ADD); on failure it stays created."""
        ...

    async def undo(self, sandbox: SandboxRecord) -> None:
        """Remove a sandbox `create` made and `start` did not finish, whatever is left of it."""
        ...

    def is_live(self, annotations: Mapping[str, str]) -> bool:
        """For a kind without a monitored process, started and without an exit: whether it still runs
        (blocking)."""
        ...

    def check_running(self, pod: Pod, sandbox: SandboxRecord) -> None:
        """Raise SandboxError unless containers can be created in the sandbox now."""
        ...

    async def stop(self, sandbox_id: str, bundle: Path | None) -> None:
        """Stop the sandbox, its network included (`bundle`: None when none is found any more)."""
        ...

    def release(self, sandbox_id: str) -> None:
        """Free what a removed sandbox of this kind held beyond its bundle (blocking, idempotent; called for
        every removed sandbox, whatever its kind)."""
        ...

    def sweep(self, known: set[str]) -> int:
        """At start: free what sandboxes no bundle knows left behind (a kill while one was made or removed);
        how many were freed (blocking)."""
        ...
