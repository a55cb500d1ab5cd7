"""The sandbox without an infra process: the pod's namespaces pinned as files (`runtime.pinns`), its bundle's
config.json the only record, and, with a CNI network, a create/start split so that containers are prepared
while the plugins' ADD runs.

Created, it has its namespaces (the CNI network's one made, not yet attached) and containers may be created
in them; started, its sysctls are written and its start time recorded: it runs while its namespace files stay.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.api.pod import full_name
from edgelet.api.pod import uid as pod_uid
from edgelet.container.errors import RuntimeError_, SandboxError
from edgelet.container.types import SandboxRecord
from edgelet.network.errors import NetworkError
from edgelet.ocispec import build as ocispec
from edgelet.ocispec import defaults as oci_defaults
from edgelet.ocispec.errors import SpecError
from edgelet.runtime import bundle as bl
from edgelet.runtime import pinns
from edgelet.runtime.layout import ANN_INFRA, ANN_NAMESPACES, ANN_NETNS, ANN_POD_IPS
from edgelet.runtime.sandbox import pinned_kinds
from edgelet.runtime.sandboxkind import SandboxHost, SandboxOpening
from edgelet.runtime.state import format_namespaces, parse_namespaces
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod
    from edgelet.network.manager import Pending

log = get_logger("edgelet.runtime")


@dataclasses.dataclass(frozen=True)
class _PendingSandbox:
    """A created sandbox's part start needs: the attachment to make, its sysctls, the namespace files
    ({"ipc"|"uts"|...: path}) and the annotations its record is written again with."""

    pending: Pending
    sysctls: Mapping[str, str]
    pinned: Mapping[str, str]
    annotations: dict[str, str]


def write_config(bundle: Path, annotations: Mapping[str, str]) -> None:
    """No process: the bundle's config.json is the record, holding only what a relist rebuilds it from."""
    bl.write_file(
        bundle / bl.CONFIG,
        json.dumps({"ociVersion": oci_defaults.OCI_VERSION, "annotations": dict(annotations)}, indent=1),
    )


class PinnedSandboxes:
    """Sandboxes whose namespaces are pinned files under the run dir's ns/<sandbox id>/."""

    monitored = False

    def __init__(self, host: SandboxHost) -> None:
        self.host = host
        # Sandboxes created and not yet started (their CNI ADD to run), with what start finishes from.
        self._pending: dict[str, _PendingSandbox] = {}

    def owns(self, annotations: Mapping[str, str]) -> bool:
        return annotations.get(ANN_INFRA) == "false"

    def _ns_dir(self, sandbox_id: str) -> Path:
        return self.host.paths.ns_dir / sandbox_id

    async def create(self, opening: SandboxOpening) -> SandboxRecord:
        """Its bundle (the record, written before anything it holds), the pod cgroup, the CNI network's
        namespace, then the other namespaces pinned as files under the run dir.

        Without a CNI network it is started here ("running"); with one it is "created": its namespaces exist
        and containers may be created in them, but nothing may start before `start` attached it."""
        annotations = {**opening.annotations(), ANN_INFRA: "false"}
        pending = None
        pinned: dict[str, str] = {}  # {OCI type: file}
        files: dict[str, str] = {}  # the same, {pinns kind: file}
        done = False
        try:
            sysctls = ocispec.build_sysctls(opening.pod, self.host.allowed_unsafe_sysctls)
            if not opening.host_network:
                pending = await self.host.networks.begin(opening.pod, opening.sid)

            def make() -> None:
                self._make(opening, annotations, pending, files, sysctls)
                pinned.update({pinns.OCI_TYPES[kind]: path for kind, path in files.items()})

            # One trip to a worker thread (the plugins' STATUS, if any, before it): on a busy machine each trip
            # waits for a core.
            await asyncio.to_thread(make)
            done = True
        except (RuntimeError_, OSError, SpecError, NetworkError) as exc:
            raise SandboxError(f"pod {opening.pod_name}: cannot create the sandbox: {exc}") from exc
        finally:
            if not done:
                # Whatever failed (or a cancellation), nothing half-made stays behind.
                await asyncio.shield(self._undo(opening.sid, opening.bundle))
        if pending is not None:
            self._pending[opening.sid] = _PendingSandbox(pending, sysctls, files, annotations)
        log.info(
            "Sandbox started" if pending is None else "Sandbox created, its network to attach",
            pod=opening.pod_name,
            sandbox=opening.sid[:12],
            namespaces=",".join(sorted(pinned)) or None,
        )
        return opening.record(
            state="running" if pending is None else "created",
            pid=None,
            ips=(),
            netns=pending.entry.netns if pending is not None else "",
            infra=False,
            namespaces=tuple(sorted(pinned.items())),
        )

    def _make(
        self,
        opening: SandboxOpening,
        annotations: dict[str, str],
        pending: Pending | None,
        files: dict[str, str],
        sysctls: Mapping[str, str],
    ) -> None:
        """create's blocking part; `annotations` and `files` grow as it goes, for the caller's record."""
        bundle = opening.bundle
        self.host.pod_files.prepare_sandbox_dirs(opening)
        # The record first: a kill from here on leaves a sandbox every relist finds (judged exited) and
        # the next sync removes, with whatever it pinned.
        write_config(bundle, annotations)
        # The pod cgroup is made beside the namespaces (in 12 v1 hierarchies a cgroup's mkdirs and limits take
        # tens of ms, as long as the rest of the sandbox), and exists before the sandbox counts as started.
        with ThreadPoolExecutor(1, thread_name_prefix="pod-cgroup") as beside:
            cgroup = beside.submit(self.host.cgroups.make, opening.pod, opening.uid, opening.pod_name)
            if pending is not None:
                network = self.host.networks.network
                assert network is not None
                network.make(pending)
                annotations[ANN_NETNS] = pending.entry.netns
                pinns.loopback_up(pending.entry.netns)
            kinds = pinned_kinds(opening.pod, own_netns=pending is None)
            files.update(pinns.pin(self._ns_dir(opening.sid), kinds, opening.hostname))
            annotations[ANN_NAMESPACES] = format_namespaces(
                {pinns.OCI_TYPES[kind]: path for kind, path in files.items()}
            )
            write_config(bundle, annotations)
            cgroup.result()
        if pending is None:
            self._finish(bundle, sysctls, files, None)

    def _finish(self, bundle: Path, sysctls: Mapping[str, str], files: Mapping[str, str], netns: str | None) -> None:
        """The last step (blocking): its sysctls inside its namespaces, then its start time, which makes it
        started (running while its namespace files stay)."""
        if sysctls:
            joined: dict[str, str] = {kind: files[kind] for kind in ("net", "ipc") if kind in files}
            if netns is not None:
                joined["net"] = netns
            pinns.apply_sysctls(sysctls, joined)
        crash_point("sandbox.create")
        bl.write_file(bundle / bl.STARTED_FILE, repr(self.host.clock.now()), durable=False)

    async def start(self, pod: Pod, sandbox: SandboxRecord) -> SandboxRecord:
        """ADD in the namespace made, then /etc/hosts with the pod IPs (rewritten in place: a container created
        meanwhile has it bind-mounted), the sysctls and the start time, the mark of a started sandbox."""
        held = self._pending.pop(sandbox.id, None)
        if held is None:
            raise SandboxError(f"pod {full_name(pod)}: sandbox {sandbox.id[:12]} was not created by this agent")
        layout = bl.PodLayout(self.host.paths.pod_dir(pod_uid(pod)))
        hostname = bl.pod_hostname(pod, self.host.node_hostname, self.host.pod_files.cluster_domain)
        try:
            network = self.host.networks.network
            assert network is not None
            attached = await network.attach(held.pending, record=False)

            def finish() -> None:
                # One trip to a worker thread after ADD: its result cached, then the sandbox finished.
                network.record(held.pending, attached)
                if attached.ips:
                    bl.rewrite_in_place(layout.hosts, self.host.pod_files.hosts_text(pod, hostname, attached.ips))
                held.annotations[ANN_POD_IPS] = ",".join(attached.ips)
                write_config(layout.sandbox_dir, held.annotations)
                self._finish(layout.sandbox_dir, held.sysctls, held.pinned, attached.netns)

            await asyncio.to_thread(finish)
        except (RuntimeError_, OSError, SpecError, NetworkError) as exc:
            raise SandboxError(f"pod {full_name(pod)}: cannot create the sandbox: {exc}") from exc
        log.info("Sandbox started", pod=full_name(pod), sandbox=sandbox.id[:12], ips=",".join(attached.ips) or None)
        return dataclasses.replace(sandbox, state="running", ips=attached.ips)

    async def undo(self, sandbox: SandboxRecord) -> None:
        await self._undo(sandbox.id, bl.PodLayout(self.host.paths.pod_dir(sandbox.pod_uid)).sandbox_dir)

    async def _undo(self, sandbox_id: str, bundle: Path) -> None:
        """Remove a half-made sandbox: namespaces, network, bundle."""
        self._pending.pop(sandbox_id, None)
        try:
            await asyncio.to_thread(pinns.unpin, self._ns_dir(sandbox_id))
            await self.host.networks.detach(sandbox_id)
            await asyncio.to_thread(self.host.remove_files, sandbox_id, bundle)
        except (RuntimeError_, OSError) as exc:
            log.error(
                "Cleanup after a failed sandbox left things behind", exc, sandbox=sandbox_id[:12], bundle=str(bundle)
            )

    def is_live(self, annotations: Mapping[str, str]) -> bool:
        """Runs from its start until its namespace files go (a stop, a reboot)."""
        files = [path for _, path in parse_namespaces(annotations.get(ANN_NAMESPACES, ""))]
        if annotations.get(ANN_NETNS):
            files.append(annotations[ANN_NETNS])
        return all(pinns.is_pinned(path) for path in files)

    def check_running(self, pod: Pod, sandbox: SandboxRecord) -> None:
        if not all(pinns.is_pinned(path) for _, path in sandbox.namespaces):
            raise SandboxError(
                f"pod {full_name(pod)}: sandbox {sandbox.id[:12]} is not running (its namespaces are gone)"
            )

    async def stop(self, sandbox_id: str, bundle: Path | None) -> None:
        assert bundle is not None  # its record is what named it pinned
        # Network first (DEL needs the namespace), then the other namespaces; the exit file makes it stopped
        # even where it pinned nothing (hostNetwork and hostIPC).
        await self.host.networks.detach(sandbox_id)
        await asyncio.to_thread(pinns.unpin, self._ns_dir(sandbox_id))
        if not (bundle / bl.EXIT_FILE).exists():
            await asyncio.to_thread(bl.write_file, bundle / bl.EXIT_FILE, "0")

    def release(self, sandbox_id: str) -> None:
        self._pending.pop(sandbox_id, None)
        pinns.unpin(self._ns_dir(sandbox_id))

    def sweep(self, known: set[str]) -> int:
        removed = 0
        ns_dir = self.host.paths.ns_dir
        for entry in list(ns_dir.iterdir()) if ns_dir.is_dir() else []:
            # Namespaces pinned for a sandbox whose bundle is gone (a kill while it was made or removed).
            if entry.name not in known and not entry.name.startswith("."):
                pinns.unpin(entry)
                removed += 1
        return removed
