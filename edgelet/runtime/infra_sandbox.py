"""The sandbox with an infra process: a catatonit pause process under conmon and runc, whose namespaces the
containers join (pods that share their PID namespace, or every pod with --pod-infra-container).

Its network is attached before the pause process is created (runc joins the namespace CNI made), so it is
made and started in one step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.api.pod import full_name, meta
from edgelet.container.errors import RuntimeError_, SandboxError
from edgelet.container.types import SandboxRecord
from edgelet.network.errors import NetworkError
from edgelet.ocispec import build as ocispec
from edgelet.ocispec.errors import SpecError
from edgelet.runtime import bundle as bl
from edgelet.runtime import conmon, rootfs
from edgelet.runtime.layout import ANN_IMAGE_ID, ANN_INFRA, ANN_LOG_PATH, ANN_NETNS, ANN_POD_IPS
from edgelet.runtime.sandbox import PauseSpec, pause_spec
from edgelet.runtime.sandboxkind import SandboxHost, SandboxOpening
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod
    from edgelet.images.types import ImageRecord
    from edgelet.network.manager import Attached

log = get_logger("edgelet.runtime")


class InfraSandboxes:
    """Sandboxes that run a pause process: `catatonit_bin` copied into a rootfs of its own, or `pause_image`."""

    monitored = True

    def __init__(
        self, host: SandboxHost, *, catatonit_bin: str = "catatonit", pause_image: ImageRecord | None = None
    ) -> None:
        self.host = host
        self.catatonit_bin = catatonit_bin
        self.pause_image = pause_image
        self._pause: PauseSpec | None = None

    def owns(self, annotations: Mapping[str, str]) -> bool:
        # Records older than the pinned kind carry no infra annotation: they all ran a pause process.
        return annotations.get(ANN_INFRA) != "false"

    def _pause_spec(self) -> PauseSpec:
        if self._pause is None:
            self._pause = pause_spec(self.host.paths.root_dir, self.catatonit_bin, self.pause_image)
        return self._pause

    async def create(self, opening: SandboxOpening) -> SandboxRecord:
        """The pause process started, its network attached first: always "running"."""
        pod, sid, bundle = opening.pod, opening.sid, opening.bundle
        done = False
        try:
            pause = self._pause_spec()
            await asyncio.to_thread(self.host.pod_files.prepare_sandbox_dirs, opening)
            rootfs_dir = pause.rootfs
            if rootfs_dir is None:
                assert pause.image is not None
                rootfs_dir = await asyncio.to_thread(rootfs.mount_rootfs, pause.image.layers, bundle)
            attached = None
            if not opening.host_network:
                attached = await self.host.networks.setup(pod, sid)
                if attached is not None and attached.ips:
                    await asyncio.to_thread(
                        self.host.pod_files.write, pod, opening.layout, opening.hostname, attached.ips
                    )
            config = await self._spec(opening, pause, rootfs_dir, attached)
            await asyncio.to_thread(bl.write_file, bundle / bl.CONFIG, json.dumps(config, indent=1))
            pid = await self._start(opening)
            done = True
        except (RuntimeError_, OSError, SpecError, NetworkError) as exc:
            raise SandboxError(f"pod {opening.pod_name}: cannot create the sandbox: {exc}") from exc
        finally:
            if not done:
                # Whatever failed (or a cancellation), nothing half-made stays behind.
                await asyncio.shield(self.host.undo_container(sid, bundle))
                await asyncio.shield(self.host.networks.detach(sid))
        log.info("Sandbox started", pod=opening.pod_name, sandbox=sid[:12], pid=pid)
        return opening.record(
            state="running",
            pid=pid,
            ips=attached.ips if attached is not None else (),
            netns=attached.netns if attached is not None else "",
        )

    async def _spec(
        self, opening: SandboxOpening, pause: PauseSpec, rootfs_dir: Path, attached: Attached | None
    ) -> dict[str, Any]:
        """The pause process's OCI spec, its record's annotations in it."""
        annotations = {**opening.annotations(), ANN_LOG_PATH: str(opening.log_path)}
        if attached is not None:
            annotations[ANN_NETNS] = attached.netns
            annotations[ANN_POD_IPS] = ",".join(attached.ips)
        if pause.image is not None:
            annotations[ANN_IMAGE_ID] = pause.image.id
        ctx = ocispec.SandboxContext(
            rootfs=str(rootfs_dir),
            args=pause.args,
            cgroups_path=f"{self.host.cgroups.of(opening.uid, opening.pod)}/{opening.sid}",
            hostname=opening.hostname,
            annotations=annotations,
            min_oom_score_adj=self.host.host.min_oom_score_adj,
            seccomp=await asyncio.to_thread(self.host.seccomp_host, opening.pod),
            netns_path=attached.netns if attached is not None else None,
            allowed_unsafe_sysctls=self.host.allowed_unsafe_sysctls,
        )
        return ocispec.build_sandbox_spec(opening.pod, ctx)

    async def _start(self, opening: SandboxOpening) -> int:
        """The pod cgroup, then the pause process created under conmon and started; its pid."""
        pod, uid, sid, bundle = opening.pod, opening.uid, opening.sid, opening.bundle
        await asyncio.to_thread(self.host.cgroups.make, pod, uid, opening.pod_name)
        runc = self.host.runc_for(pod)
        name = f"k8s_POD_{meta(pod).name}_{meta(pod).namespace}_{uid}_{opening.attempt}"
        pid = await conmon.create(
            self.host.conmon_args(sid, name, bundle, opening.log_path, runc=runc), runner=self.host.runner
        )
        await asyncio.to_thread(self.host.cgroups.move_monitor, bundle, self.host.cgroups.monitor(uid, pod))
        crash_point("sandbox.create")
        await runc.start(sid)
        await asyncio.to_thread(bl.write_file, bundle / bl.STARTED_FILE, repr(self.host.clock.now()))
        return pid

    async def start(self, pod: Pod, sandbox: SandboxRecord) -> SandboxRecord:
        return sandbox  # created running

    async def undo(self, sandbox: SandboxRecord) -> None:
        """Nothing: a failed create already removed what it made, and a created one is running."""

    def is_live(self, annotations: Mapping[str, str]) -> bool:
        return False  # never asked: its pause process's conmon and runc say

    def check_running(self, pod: Pod, sandbox: SandboxRecord) -> None:
        if sandbox.pid is None or not conmon.is_alive(sandbox.pid):
            raise SandboxError(f"pod {full_name(pod)}: sandbox {sandbox.id[:12]} is not running")

    async def stop(self, sandbox_id: str, bundle: Path | None) -> None:
        # The pause process holds nothing worth a grace period.
        await self.host.kill_and_wait(sandbox_id, bundle)
        await self.host.networks.detach(sandbox_id)

    def release(self, sandbox_id: str) -> None:
        """Nothing beyond its bundle: its namespaces went with its pause process."""

    def sweep(self, known: set[str]) -> int:
        return 0
