"""A pod's network from sandbox creation to teardown, and the clean-up of what a crash or power cut left.

The runtime calls `setup` (or its three steps, `begin`, `make` and `attach`,
with a container created between the last two) before the pod's containers
start, `teardown` when the sandbox stops, and `cleanup` once at start with the
sandboxes that still run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.api.quantity import QuantityError, value
from edgelet.network import conf as netconf
from edgelet.network import netns
from edgelet.network.cache import Cache, Entry
from edgelet.network.cni import CNI, Attachment
from edgelet.network.errors import ConfigError, NetworkError, PluginError
from edgelet.network.linkwatch import LinkWatch, Target
from edgelet.network.result import pod_ips
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod

log = get_logger(__name__)

INGRESS = "kubernetes.io/ingress-bandwidth"
EGRESS = "kubernetes.io/egress-bandwidth"
MAX_BURST = 2**31 - 1  # kubelet: no burst annotation, so no burst limit
# New sandboxes of one pod whose first CHECK failed, after which its CHECK failures are taken for a plugin's
# bug (a new sandbox does not fare better) rather than re-creating the pod every period.
MAX_FRESH_FAILURES = 2


def runtime_config(pod: Pod) -> dict[str, Any]:
    """The CNI capabilities' runtimeConfig of a pod: portMappings from hostPorts, bandwidth from annotations."""
    out: dict[str, Any] = {}
    mappings = []
    spec = pod.spec
    for c in [*((spec.init_containers if spec else None) or []), *((spec.containers if spec else None) or [])]:
        for p in c.ports or []:
            if p.host_port:
                m: dict[str, Any] = {
                    "hostPort": p.host_port,
                    "containerPort": p.container_port,
                    "protocol": (p.protocol or "TCP").lower(),
                }
                if p.host_ip:
                    m["hostIP"] = p.host_ip
                mappings.append(m)
    if mappings:
        out["portMappings"] = mappings
    ann = (pod.metadata.annotations if pod.metadata else None) or {}
    bandwidth: dict[str, int] = {}
    for key, rate, burst in ((INGRESS, "ingressRate", "ingressBurst"), (EGRESS, "egressRate", "egressBurst")):
        if key in ann:
            try:
                bandwidth[rate] = value(ann[key])
                bandwidth[burst] = MAX_BURST
            except QuantityError:
                log.warning("Ignoring a bandwidth annotation that is no quantity", annotation=key, value=ann[key])
    if bandwidth:
        out["bandwidth"] = bandwidth
    return out


@dataclass(frozen=True)
class Attached:
    netns: str
    ips: tuple[str, ...]
    result: dict[str, Any] | None = field(default=None, compare=False, repr=False)  # ADD's, for the cache


@dataclass(frozen=True)
class Pending:
    """A pod's attachment between `PodNetwork.begin` and `attach`: the config read once, and the cache entry."""

    config: netconf.NetworkConfig
    attachment: Attachment
    runtime_config: dict[str, Any]
    entry: Entry


class PodNetwork:
    def __init__(self, conf_dir: Path, bin_dirs: Sequence[str], netns_dir: Path, cache_dir: Path) -> None:
        self.conf_dir = conf_dir
        self.bin_dirs = list(bin_dirs)
        self.netns_dir = netns_dir
        self.cache = Cache(cache_dir)
        self.cni = CNI(self.bin_dirs)
        self._passed: set[str] = set()  # sandboxes whose network passed a CHECK at least once
        self._fresh_failures: dict[str, int] = {}  # pod uid -> new sandboxes in a row that failed at once
        self._ignored: set[str] = set()  # sandboxes whose failure was said to be ignored (said once)
        self.links = LinkWatch()
        self._watched: frozenset[str] | None = None  # the sandboxes `links` was last given

    def config(self) -> netconf.NetworkConfig | None:
        """The network config, read afresh (a conflist dropped in later takes effect for new pods)."""
        return netconf.load(self.conf_dir)

    def readiness(self) -> tuple[bool, str]:
        """(ready, why not): kubelet's NetworkReady runtime condition."""
        try:
            cfg = self.config()
        except ConfigError as exc:
            return False, str(exc)
        if cfg is None:
            return False, f"no CNI config in {self.conf_dir}: pods without hostNetwork get loopback only"
        missing = [t for t in cfg.plugin_types() if netconf.find_plugin(t, self.bin_dirs) is None]
        if missing:
            return False, f"CNI plugins not found in {':'.join(self.bin_dirs)}: {', '.join(missing)}"
        return True, ""

    async def setup(self, pod: Pod, sandbox_id: str) -> Attached | None:
        """The pod's network namespace, attached by the plugin chain; None when no network is configured.
        Whatever fails (or a cancellation), nothing of it stays."""
        pending = await self.begin(pod, sandbox_id)
        if pending is None:
            return None
        # A cancellation waits for the thread, then releases what it made (the runtime's undo could run first).
        making = asyncio.ensure_future(asyncio.to_thread(self.make, pending))
        try:
            await asyncio.shield(making)
        except asyncio.CancelledError:
            await asyncio.gather(making, return_exceptions=True)
            if not making.cancelled() and making.exception() is None:
                await asyncio.shield(self._release(pending.entry))
            raise
        try:
            return await self.attach(pending)
        except BaseException:
            await asyncio.shield(self._release(pending.entry))
            raise

    async def begin(self, pod: Pod, sandbox_id: str) -> Pending | None:
        """What attaching the pod will take (config, its namespace file's path, the cache entry), making
        nothing yet; None when no network is configured. Then `make`, then `attach`."""
        # On the loop: a small directory and one file (0.14 ms), less than a trip to a worker thread costs.
        cfg = self.config()
        if cfg is None:
            return None
        # A 1.1.0 network's plugins say whether they can add now (kubelet's NetworkReady); a refusal fails
        # the sandbox, which is tried again with back-off, before anything exists to release.
        await self.cni.status(cfg)
        path = self.netns_dir / sandbox_id
        meta = pod.metadata
        assert meta is not None
        att = Attachment(sandbox_id, str(path), meta.name or "", meta.namespace or "", meta.uid or "")
        rc = runtime_config(pod)
        entry = Entry(
            sandbox_id, str(path), att.ifname, att.pod_name, att.pod_namespace, att.pod_uid, dict(cfg.raw), rc, None
        )
        return Pending(cfg, att, rc, entry)

    def make(self, pending: Pending) -> None:
        """The namespace file and the cache entry (blocking: the runtime calls it in its own worker-thread trip).
        Containers may join the namespace from here on, before `attach` (a container is `runc create`d beside ADD)."""
        path = Path(pending.entry.netns)
        netns.create(path)
        try:
            # Saved before ADD: an agent killed during ADD still knows what to DEL at its next start.
            self.cache.write(pending.entry)
        except BaseException:
            netns.remove(path)
            raise

    async def attach(self, pending: Pending, *, record: bool = True) -> Attached:
        """ADD through the chain in the namespace `make` made, and its result cached (`record=False`: the
        caller calls `record` in a worker-thread trip of its own). A failure (or a cancellation) leaves the
        namespace and the entry for `teardown` (the sandbox's removal), since a container may be joining that
        namespace by its path right now."""
        cfg, att = pending.config, pending.attachment
        result = await self.cni.add(cfg, att, pending.runtime_config)
        crash_point("cni.add")
        attached = Attached(pending.entry.netns, pod_ips(result), result)
        if record:
            await asyncio.to_thread(self.record, pending, attached)
        log.info(
            "Pod network attached",
            pod=f"{att.pod_namespace}/{att.pod_name}",
            sandbox=att.container_id[:12],
            ips=",".join(attached.ips) or None,
            network=cfg.name,
        )
        return attached

    def record(self, pending: Pending, attached: Attached) -> None:
        """ADD's result into the cache entry (blocking), what a later DEL and CHECK are given."""
        self.cache.write(Entry(**{**pending.entry.__dict__, "result": attached.result}), replacing=True)

    async def teardown(self, sandbox_id: str, *, broken: bool = False) -> None:
        """DEL the sandbox's attachment; `broken` when its CHECK failed, so the plugins may not find inside
        the namespace what they made (the addresses whose masquerade rules bridge deletes): the rules
        tagged with its id are removed as after a lost namespace."""
        self.links.forget(sandbox_id)  # its socket would keep the namespace, and the veth in it, alive
        entry = await asyncio.to_thread(self.cache.read, sandbox_id)
        if entry is not None:
            await self._release(entry, broken=broken)
        else:
            await asyncio.to_thread(netns.remove, self.netns_dir / sandbox_id)

    async def _release(self, entry: Entry, *, broken: bool = False) -> None:
        """DEL with the cached config, then the namespace file and the cache entry; a failed DEL keeps the
        entry so the next start tries again."""
        namespace_gone = broken or not netns.is_live(Path(entry.netns))
        try:
            cfg = netconf.parse(json.dumps(entry.config), f"cache of {entry.container_id[:12]}")
            att = Attachment(
                entry.container_id, entry.netns, entry.pod_name, entry.pod_namespace, entry.pod_uid, entry.ifname
            )
            await self.cni.delete(cfg, att, entry.runtime_config, entry.result)
        except NetworkError as exc:
            log.warning("CNI DEL failed; will retry at the next start", sandbox=entry.container_id[:12], err=str(exc))
            await asyncio.to_thread(netns.remove, Path(entry.netns))
            return
        if namespace_gone:
            from edgelet.network.iptables import remove_tagged

            await remove_tagged(entry.container_id)
        await asyncio.to_thread(netns.remove, Path(entry.netns))
        await asyncio.to_thread(self.cache.remove, entry.container_id)

    async def cleanup(self, live: set[str]) -> int:
        """Tear down every cached attachment and namespace file whose sandbox no longer runs; then, on a 1.1.0
        network, GC with the attachments still in use, for what no cache entry remembers."""
        count = 0
        kept: list[tuple[str, str]] = []
        for entry in await asyncio.to_thread(self.cache.entries):
            if entry.container_id not in live:
                log.info(
                    "Releasing the network of a sandbox that is gone",
                    sandbox=entry.container_id[:12],
                    pod=f"{entry.pod_namespace}/{entry.pod_name}",
                )
                await self._release(entry)
                count += 1
            else:
                kept.append((entry.container_id, entry.ifname))
        if self.netns_dir.is_dir():
            for f in self.netns_dir.iterdir():
                if f.name not in live and self.cache.read(f.name) is None:
                    await asyncio.to_thread(netns.remove, f)
        try:
            cfg = await asyncio.to_thread(self.config)
            if cfg is not None:
                await self.cni.gc(cfg, kept)
        except NetworkError as exc:
            log.warning("CNI GC failed", err=str(exc))
        return count

    def _targets(self, live: frozenset[str]) -> dict[str, Target]:
        """Each sandbox in `live` with a recorded ADD: its namespace and its host-side links (the bridge, the
        veth: no `sandbox` in the ADD result), from the cache (blocking I/O)."""
        out = {}
        for entry in self.cache.entries():
            if entry.container_id not in live or not isinstance(entry.result, dict):
                continue
            names = frozenset(
                itf["name"]
                for itf in entry.result.get("interfaces") or []
                if isinstance(itf, dict) and not itf.get("sandbox") and isinstance(itf.get("name"), str)
            )
            out[entry.container_id] = Target(entry.netns, names)
        return out

    async def changed(self, live: set[str]) -> set[str]:
        """The sandboxes of `live` whose links or addresses changed in a way that may have broken their network
        since the last call (linkwatch); the watch follows `live`, read again only when it changes."""
        if self._watched != live:
            self._watched = frozenset(live)
            await self.links.update(await asyncio.to_thread(self._targets, self._watched))
        return self.links.take() & live

    async def check(self, live: set[str], only: set[str] | None = None) -> dict[str, str]:
        """CHECK the attachment of every running sandbox (housekeeping; of those in `only` when given): {sandbox
        id: why} for those whose network is broken (a bridge, veth, address or rule gone).

        Only a plugin's own error document counts: an attachment whose ADD never finished, whose network
        predates CHECK, or whose plugins cannot be found (a new sandbox would not fare better) gets no
        verdict, and neither does a plugin that does not answer in time or crashes (`cni.false_check_failure`).
        """
        failed: dict[str, str] = {}
        checked = 0
        wanted = live if only is None else live & only
        for entry in await asyncio.to_thread(self.cache.entries):
            if entry.container_id not in wanted or entry.result is None:
                continue
            try:
                cfg = netconf.parse(json.dumps(entry.config), f"cache of {entry.container_id[:12]}")
            except ConfigError as exc:
                log.warning("Cannot CHECK a pod network", sandbox=entry.container_id[:12], err=str(exc))
                continue
            if any(netconf.find_plugin(t, self.bin_dirs) is None for t in cfg.plugin_types()):
                continue
            att = Attachment(
                entry.container_id, entry.netns, entry.pod_name, entry.pod_namespace, entry.pod_uid, entry.ifname
            )
            sid, uid = entry.container_id, entry.pod_uid
            try:
                await self.cni.check(cfg, att, entry.runtime_config, entry.result)
            except PluginError as exc:
                if exc.code is None:  # no answer in time, or no error document: no verdict on the network
                    log.warning("CNI CHECK gave no answer", sandbox=sid[:12], err=str(exc))
                    continue
                if sid in self._passed:
                    failed[sid] = str(exc)  # it worked and broke: the network, not the plugin
                elif self._fresh_failures.get(uid, 0) < MAX_FRESH_FAILURES:
                    self._fresh_failures[uid] = self._fresh_failures.get(uid, 0) + 1
                    failed[sid] = str(exc)
                elif sid not in self._ignored:
                    self._ignored.add(sid)
                    log.warning(
                        "CNI CHECK fails on every new sandbox of this pod; taking it for the plugin's bug "
                        "and leaving the pod alone",
                        pod=f"{entry.pod_namespace}/{entry.pod_name}",
                        sandbox=sid[:12],
                        err=str(exc),
                    )
            else:
                self._passed.add(sid)
                self._fresh_failures.pop(uid, None)
            checked += 1
        self._passed &= live
        self._ignored &= live
        log.debug("Checked pod networks", checked=checked, failed=len(failed))
        return failed
