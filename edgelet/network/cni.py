"""Runs a network's plugin chain: ADD in order threading prevResult, DEL in reverse, CHECK in order; 1.1.0's
STATUS and GC in order, network-wide (libcni).

Every plugin runs through `edgelet.util.proc` with a timeout; a failure names
the plugin, the command and the plugin's own error message.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgelet.network.conf import NetworkConfig, find_plugin, plugin_stdin
from edgelet.network.errors import PluginError
from edgelet.network.result import error_of
from edgelet.util import proc

PLUGIN_TIMEOUT = 60.0
DEFAULT_IFNAME = "eth0"


@dataclass(frozen=True)
class Attachment:
    """Who the network is for: CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME and kubelet's CNI_ARGS."""

    container_id: str
    netns: str
    pod_name: str
    pod_namespace: str
    pod_uid: str
    ifname: str = DEFAULT_IFNAME

    def args(self) -> str:
        return (
            f"IgnoreUnknown=1;K8S_POD_NAMESPACE={self.pod_namespace};K8S_POD_NAME={self.pod_name};"
            f"K8S_POD_INFRA_CONTAINER_ID={self.container_id};K8S_POD_UID={self.pod_uid}"
        )


class CNI:
    def __init__(self, bin_dirs: Sequence[str], timeout: float = PLUGIN_TIMEOUT) -> None:
        self.bin_dirs = list(bin_dirs)
        self.timeout = timeout

    async def _exec(self, plugin: Mapping[str, Any], command: str, att: Attachment | None, stdin: bytes) -> bytes:
        name = str(plugin["type"])
        path = find_plugin(name, self.bin_dirs)
        if path is None:
            raise PluginError(name, command, f"not found in {':'.join(self.bin_dirs)}")
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_COMMAND": command,
            "CNI_PATH": ":".join(self.bin_dirs),
        }
        if att is not None:  # STATUS and GC are about the network, not one attachment
            env.update(
                {
                    "CNI_CONTAINERID": att.container_id,
                    "CNI_NETNS": att.netns,
                    "CNI_IFNAME": att.ifname,
                    "CNI_ARGS": att.args(),
                }
            )
        try:
            p = await proc.spawn([path], stdin=proc.PIPE, env=env)
        except OSError as exc:
            raise PluginError(name, command, f"cannot start {path}: {exc.strerror or exc}") from exc
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await p.communicate(stdin)
        except TimeoutError as exc:
            p.kill()
            await p.wait()
            raise PluginError(name, command, f"no answer within {self.timeout:g}s") from exc
        except asyncio.CancelledError:
            if p.returncode is None:
                p.kill()
                await p.wait()
            raise
        if p.returncode != 0:
            code, msg = error_of(out)
            raise PluginError(name, command, msg, code, err.decode(errors="replace").strip())
        return out

    async def add(self, config: NetworkConfig, att: Attachment, runtime_config: Mapping[str, Any]) -> dict[str, Any]:
        """ADD through the chain; the last plugin's result."""
        result: dict[str, Any] | None = None
        for plugin in config.plugins:
            out = await self._exec(plugin, "ADD", att, plugin_stdin(config, plugin, result, runtime_config))
            if out.strip():
                try:
                    result = json.loads(out)
                except ValueError as exc:
                    raise PluginError(str(plugin["type"]), "ADD", f"answered no JSON: {out[:200]!r}") from exc
        return result or {}

    async def delete(
        self,
        config: NetworkConfig,
        att: Attachment,
        runtime_config: Mapping[str, Any],
        prev_result: Mapping[str, Any] | None,
    ) -> None:
        """DEL in reverse order; every plugin is asked even after one fails, then the first failure is raised.

        Without a saved result (the agent died between ADD and saving it) prevResult is left out, as the spec
        allows for DEL.
        """
        first: PluginError | None = None
        for plugin in reversed(config.plugins):
            try:
                await self._exec(plugin, "DEL", att, plugin_stdin(config, plugin, prev_result, runtime_config))
            except PluginError as exc:
                first = first or exc
        if first is not None:
            raise first

    async def check(
        self, config: NetworkConfig, att: Attachment, runtime_config: Mapping[str, Any], prev_result: Mapping[str, Any]
    ) -> None:
        """CHECK in order, stopping at the first failure; nothing before 0.4.0, which had no CHECK."""
        if not supports(config, "0.4.0"):
            return
        for plugin in config.plugins:
            try:
                await self._exec(plugin, "CHECK", att, plugin_stdin(config, plugin, prev_result, runtime_config))
            except PluginError as exc:
                if not false_check_failure(exc, prev_result):
                    raise

    async def status(self, config: NetworkConfig) -> None:
        """STATUS in order: raises the first plugin's refusal (code 50: not available, 51: cannot add now).
        Networks before 1.1.0 have no STATUS and are taken as ready, as libcni does."""
        if not supports(config, "1.1.0"):
            return
        for plugin in config.plugins:
            await self._exec(plugin, "STATUS", None, plugin_stdin(config, plugin, None, {}))

    async def gc(self, config: NetworkConfig, valid: Sequence[tuple[str, str]]) -> None:
        """GC with the attachments still in use ((container id, ifname)); every plugin is asked, then the
        first failure is raised. Nothing before 1.1.0."""
        if not supports(config, "1.1.0"):
            return
        attachments = [{"containerID": cid, "ifname": ifname} for cid, ifname in valid]
        first: PluginError | None = None
        for plugin in config.plugins:
            doc = json.loads(plugin_stdin(config, plugin, None, {}))
            doc["cni.dev/valid-attachments"] = attachments
            try:
                await self._exec(plugin, "GC", None, json.dumps(doc).encode())
            except PluginError as exc:
                first = first or exc
        if first is not None:
            raise first


def false_check_failure(exc: PluginError, result: Mapping[str, Any]) -> bool:
    """A CHECK failure that is the plugin's bug, not a broken network (pure); taken at its word, every such
    pod would get a new sandbox at every check.

    - No CNI error document (`code` None): the plugin crashed instead of answering. Debian bookworm's
      bandwidth 1.1.1 panics on CHECK for a pod that asked no bandwidth limit.
    - portmap before 1.2 (bookworm ships 1.1.1) looks for ip6tables chains it never made for a pod with
      IPv4 addresses only ("could not check ipv6 dnat": containernetworking/plugins#819).
    - bridge before 1.2 compares the host side's MACs (the pod's host veth, the bridge) with those its ADD
      returned, read before the kernel and udev had settled them: systemd-udevd's MACAddressPolicy=persistent
      gives every new veth another address just after (containernetworking/plugins#805). The pod's own
      interface ("... doesn't match container Mac") is still checked.
    """
    if exc.code is None:
        return True
    if exc.plugin == "bridge" and "Mac doesn't match" in str(exc):
        return "container Mac" not in str(exc)
    if exc.plugin != "portmap" or "ipv6" not in str(exc).lower():
        return False
    return not any(":" in str(ip.get("address", "")) for ip in result.get("ips") or [])


def supports(config: NetworkConfig, version: str) -> bool:
    """Whether the network's cniVersion is at least `version` (both dotted numbers)."""

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    return key(config.cni_version) >= key(version)
