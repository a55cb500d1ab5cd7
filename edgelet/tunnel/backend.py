"""The two ways a WireGuard interface exists, behind one interface: wireguard-go with its UAPI socket, or the kernel's.

`Tunnel` (device.py) keeps either up the same way: it creates the device,
configures it, reads its state and points a peer at a new endpoint through a
`Backend`. Which one is a pure choice made at bring-up (`choose`); a restarted
agent finds the kind already running from the device itself (wireguard-go's
UAPI socket answers, or the kernel answers WG_CMD_GET_DEVICE for the name), so
it adopts the same kind without a record of its own that could go stale.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from edgelet.tunnel import netlink, uapi
from edgelet.tunnel.config import TunnelConfig
from edgelet.tunnel.errors import DeviceError
from edgelet.util.netlink import Message

WIREGUARD_GO = "wireguard-go"
KERNEL = "kernel"
AUTO = "auto"

Runner = Callable[[Sequence[str]], Awaitable[None]]
Ask = Callable[[str], Awaitable[str]]
NetlinkTransact = Callable[[bytes, str], Awaitable[list[Message]]]


def choose(kernel_family: bool, wireguard_go_found: bool, wanted: str = AUTO) -> str:
    """The backend a new interface gets (pure).

    `wanted` (the wireguard_backend setting) other than AUTO is taken as it is. Else the kernel's where its generic
    netlink family resolves (CTRL_CMD_GETFAMILY loads an installed module by its family alias, so this is "the
    kernel has WireGuard"): it runs in the kernel, with no daemon to die and no copy of each packet to userspace.
    Else wireguard-go when it is installed. With neither, the kernel's still: `ip link add ... type wireguard`
    says "Unknown device type", which is the error to show.
    """
    if wanted != AUTO:
        return wanted
    if kernel_family:
        return KERNEL
    return WIREGUARD_GO if wireguard_go_found else KERNEL


class Backend(Protocol):
    kind: str

    async def answering(self) -> bool:
        """Whether a device of this kind with the interface's name runs (and answers) now."""

    async def create(self) -> None:
        """Make the device (the caller removed any leftover link of that name first)."""

    async def configure(
        self, config: TunnelConfig, endpoints: Mapping[bytes, str], present: frozenset[bytes] | None
    ) -> None: ...

    async def state(self) -> uapi.DeviceState: ...

    async def set_endpoint(self, public_key: bytes, endpoint: str) -> None: ...

    def cleanup(self) -> None:
        """Remove what the device leaves behind once its link is gone."""


class WireguardGo:
    """wireguard-go, configured over its UAPI socket (wireguard.com/xplatform)."""

    kind = WIREGUARD_GO

    def __init__(self, interface: str, socket: str, ask: Ask, runner: Runner, binary: str = "wireguard-go") -> None:
        self.interface = interface
        self.socket = socket
        self.ask = ask
        self.runner = runner
        self.binary = binary

    async def answering(self) -> bool:
        try:
            await self.ask("get=1\n\n")
        except DeviceError:
            return False
        return True

    async def create(self) -> None:
        self.cleanup()  # a dead wireguard-go's socket: the new one cannot bind over it
        # wireguard-go daemonizes once the TUN device and the socket exist: its exit means ready (or failed).
        await self.runner([self.binary, self.interface])

    async def configure(
        self, config: TunnelConfig, endpoints: Mapping[bytes, str], present: frozenset[bytes] | None
    ) -> None:
        await self.ask(uapi.set_request(config, dict(endpoints), present))

    async def state(self) -> uapi.DeviceState:
        return uapi.parse_get(await self.ask("get=1\n\n"))

    async def set_endpoint(self, public_key: bytes, endpoint: str) -> None:
        await self.ask(uapi.endpoint_request(public_key, endpoint))

    def cleanup(self) -> None:
        if os.path.exists(self.socket):
            os.unlink(self.socket)


async def _netlink_transact(request: bytes, interface: str) -> list[Message]:
    return await netlink.transact(request, interface=interface, what=_command(request))


def _command(request: bytes) -> str:
    cmd = request[16] if len(request) > 16 else -1
    return {netlink.WG_CMD_GET_DEVICE: "WG_CMD_GET_DEVICE", netlink.WG_CMD_SET_DEVICE: "WG_CMD_SET_DEVICE"}.get(
        cmd, f"command {cmd}"
    )


class Kernel:
    """The kernel's WireGuard: the link made with `ip link add ... type wireguard`, configured over generic netlink."""

    kind = KERNEL

    def __init__(
        self, interface: str, family: int | None, runner: Runner, transact: NetlinkTransact = _netlink_transact
    ) -> None:
        self.interface = interface
        self.family = family  # None: not registered yet (the module loads at the first `ip link add`)
        self.runner = runner
        self.transact = transact
        self._seq = 0

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        return self._seq

    async def _family(self) -> int:
        if self.family is None:
            self.family = await netlink.resolve_family()
            if self.family is None:
                raise DeviceError(self.interface, "the kernel has no WireGuard (no generic netlink family wireguard)")
        return self.family

    async def answering(self) -> bool:
        try:
            await self.state()
        except DeviceError:
            return False
        return True

    async def create(self) -> None:
        await self.runner(["ip", "link", "add", "dev", self.interface, "type", "wireguard"])

    async def configure(
        self, config: TunnelConfig, endpoints: Mapping[bytes, str], present: frozenset[bytes] | None
    ) -> None:
        family = await self._family()
        request = netlink.set_device_request(family, self._next_seq(), self.interface, config, endpoints, present)
        await self.transact(request, self.interface)

    async def state(self) -> uapi.DeviceState:
        family = await self._family()
        answer = await self.transact(
            netlink.get_device_request(family, self._next_seq(), self.interface), self.interface
        )
        return netlink.parse_device(answer, family)

    async def set_endpoint(self, public_key: bytes, endpoint: str) -> None:
        family = await self._family()
        request = netlink.endpoint_request(family, self._next_seq(), self.interface, public_key, endpoint)
        await self.transact(request, self.interface)

    def cleanup(self) -> None:
        pass  # the link is the whole device


async def kernel_family() -> int | None:
    """WireGuard's generic netlink family id, or None (no module loaded, or netlink refused: then wireguard-go)."""
    try:
        return await netlink.resolve_family()
    except DeviceError:
        return None


def wireguard_go_found(binary: str) -> bool:
    return shutil.which(binary) is not None
