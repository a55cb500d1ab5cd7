"""The sandboxes' CNI networks as the runtime sees them: attach, detach, which ones' links changed, their CHECK
and which sandboxes it found broken (reported not ready, so their pods get a new sandbox)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from edgelet.container.types import PodRuntimeStatus
from edgelet.network.errors import NetworkError
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod
    from edgelet.network.manager import Attached, Pending, PodNetwork

log = get_logger("edgelet.runtime")
Warn = Callable[["Pod", "str | None", str, str], None]


class SandboxNetworks:
    """The pod network (None: pods without hostNetwork get loopback only) and the sandboxes whose network
    failed a CNI CHECK."""

    def __init__(self, network: PodNetwork | None, on_warning: Warn | None) -> None:
        self.network = network
        self.on_warning = on_warning
        self.broken: set[str] = set()

    async def begin(self, pod: Pod, sid: str) -> Pending | None:
        """The network of a sandbox to create, its ADD left for `attach` (None: loopback only)."""
        if self.network is None:
            return None
        pending = await self.network.begin(pod, sid)
        if pending is None:
            self.warn_loopback_only(pod)
        return pending

    async def setup(self, pod: Pod, sid: str) -> Attached | None:
        """The whole network of a sandbox in one step, its ADD included (None: loopback only)."""
        if self.network is None:
            return None
        attached = await self.network.setup(pod, sid)
        if attached is None:
            self.warn_loopback_only(pod)
        return attached

    def warn_loopback_only(self, pod: Pod) -> None:
        """A pod that wanted a network and got none (no CNI config yet): NetworkNotReady, and why."""
        if self.network is not None and self.on_warning is not None:
            _, why = self.network.readiness()
            self.on_warning(pod, None, "NetworkNotReady", f"{why}; the pod has loopback only")

    async def detach(self, sid: str) -> None:
        """Release the sandbox's network; a failure is logged, the next start retries."""
        if self.network is None:
            return
        try:
            await self.network.teardown(sid, broken=sid in self.broken)
            self.broken.discard(sid)
        except (NetworkError, OSError) as exc:
            log.warning("Pod network teardown failed; the next start retries", sandbox=sid[:12], err=str(exc))

    def mark(self, statuses: dict[str, PodRuntimeStatus]) -> dict[str, PodRuntimeStatus]:
        """`statuses` with the sandboxes whose network is broken marked not network-ready."""
        if not self.broken:
            return statuses
        out = {}
        for uid, status in statuses.items():
            if any(sandbox.id in self.broken for sandbox in status.sandboxes):
                status = dataclasses.replace(
                    status,
                    sandboxes=tuple(
                        dataclasses.replace(sandbox, network_ready=sandbox.id not in self.broken)
                        for sandbox in status.sandboxes
                    ),
                )
            out[uid] = status
        return out

    async def check(
        self,
        pods: Mapping[str, PodRuntimeStatus] | None,
        list_pods: Callable[[], Awaitable[dict[str, PodRuntimeStatus]]],
        only: set[str] | None = None,
    ) -> dict[str, str]:
        """CNI CHECK of every running sandbox's network (of those in `only` when given); {pod uid: why} for the pods whose sandbox network is
        broken. Those sandboxes are reported not ready from now on (their pods get a new sandbox with a new
        network at their next sync).

        `pods` is what the runtime held at PLEG's last relist (the agent passes it): an idle agent then runs
        no `runc list` of its own for the check. A sandbox started since is checked next time; one gone since
        fails its CHECK as it would anyway."""
        if self.network is None:
            return {}
        if pods is None:
            pods = await list_pods()
        running = {s.id: uid for uid, p in pods.items() for s in p.sandboxes if s.state == "running"}
        if not running:
            self.broken = set()
            return {}
        failed = await self.network.check(set(running) - self.broken, only)
        self.broken = {sid for sid in self.broken if sid in running} | set(failed)
        return {running[sid]: why for sid, why in failed.items()}

    async def changed(self, pods: Mapping[str, PodRuntimeStatus]) -> set[str]:
        """The running sandboxes whose links or addresses changed since the last call in a way that may have
        broken their network (empty without CNI)."""
        if self.network is None:
            return set()
        return await self.network.changed({s.id for p in pods.values() for s in p.sandboxes if s.state == "running"})

    async def cleanup(self, list_pods: Callable[[], Awaitable[dict[str, PodRuntimeStatus]]]) -> int:
        """At start: release the network of every sandbox that no longer runs (a crash, a power cut)."""
        if self.network is None:
            return 0
        live = {s.id for p in (await list_pods()).values() for s in p.sandboxes if s.state == "running"}
        return await self.network.cleanup(live)
