"""Bringing the WireGuard interface up (the kernel's or wireguard-go) and keeping it configured: the tunnel's side effects.

The interface outlives the agent: it is the kernel's link, or wireguard-go runs
as its own daemon with its UAPI socket under /var/run/wireguard, so an agent
that restarts finds the device answering and adopts the interface (its
configuration is applied again, which changes nothing when nothing changed).
`keep_up` checks the device every period: a device that stopped answering
(wireguard-go died, the link was deleted) brings the interface up again with back-off; a peer's endpoint
name is looked up again periodically (and at every check once its handshake is older than `STALE_AFTER`),
so a hub that moved is found without a restart (endpoints.py decides when and where).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from edgelet.tunnel import backend as backends
from edgelet.tunnel import endpoints as names
from edgelet.tunnel import uapi
from edgelet.tunnel.config import Endpoint, TunnelConfig
from edgelet.tunnel.errors import DeviceError
from edgelet.util import proc
from edgelet.util.backoff import Backoff
from edgelet.util.clock import Clock
from edgelet.util.log import get_logger

log = get_logger(__name__)

_INTERFACE_NAME = re.compile(r"^[a-zA-Z0-9_=+.-]{1,15}$")  # wg-quick's rule
# WireGuard rekeys every 2 minutes while traffic flows and a keepalive makes traffic: a handshake older than
# REJECT_AFTER_TIME (180 s) means the peer is not answering at the address we have.
STALE_AFTER = 180.0
CHECK_PERIOD = 10.0

Resolver = Callable[[Endpoint], Awaitable[tuple[str, ...]]]
Runner = Callable[[Sequence[str]], Awaitable[None]]


def interface_name(config_path: str) -> str:
    """The interface a config file makes, as wg-quick names it: the file's name without `.conf` (wg0.conf: wg0)."""
    name = os.path.basename(config_path)
    name = name[:-5] if name.endswith(".conf") else name
    if not _INTERFACE_NAME.match(name):
        raise DeviceError(
            name,
            f"the interface is named after the file {config_path} (as wg-quick does): "
            "it must be 1-15 letters, digits or _=+.- before .conf",
        )
    return name


def ip_commands(interface: str, config: TunnelConfig) -> list[list[str]]:
    """The `ip` commands that give the interface its addresses and routes the peers' AllowedIPs (pure).

    `replace` makes each one idempotent, so an adopted interface is set up again with the same commands.
    Only AllowedIPs are routed into the tunnel: the device's other traffic keeps its own routes.
    """
    cmds = [["ip", "address", "replace", str(a), "dev", interface] for a in config.addresses]
    link = ["ip", "link", "set", "dev", interface]
    if config.mtu is not None:
        link += ["mtu", str(config.mtu)]
    cmds.append(link + ["up"])
    on_link = {a.network for a in config.addresses}
    for peer in config.peers:
        for net in peer.allowed_ips:
            if net.prefixlen == 0:
                continue  # a default route through the hub would take the device's own traffic with it
            if net not in on_link:
                cmds.append(["ip", "route", "replace", str(net), "dev", interface])
    return cmds


def on_tunnel(address: str | None, config: TunnelConfig) -> bool:
    """Whether a listen address is one of the tunnel's own (pure): such a listener waits for the interface."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(a.ip == ip for a in config.addresses)


async def run(argv: Sequence[str]) -> None:
    """Run one command to its end; DeviceError with its stderr when it fails."""
    try:
        child = await proc.spawn(argv)
        _, err = await asyncio.wait_for(child.communicate(), 30.0)
    except (TimeoutError, OSError) as exc:
        raise DeviceError("", f"{' '.join(argv)}: {exc or 'timed out'}") from exc
    if child.returncode != 0:
        raise DeviceError("", f"{' '.join(argv)} failed ({child.returncode}): {err.decode(errors='replace')[-300:]}")


@dataclass
class Status:
    up: bool
    last_handshake: float | None  # unix seconds of the newest handshake with any peer; None: never
    error: str | None = None


def readiness(status: Status, now: float) -> tuple[bool, str, str]:
    """TunnelReady's (status, reason, message) at `now` (pure).

    Ready means a handshake within STALE_AFTER. The message names that bound rather than the age itself, so
    the Node's status does not change (and is not patched) at every check while the tunnel is fine.
    """
    if not status.up:
        return False, "TunnelDown", f"the WireGuard interface is not up: {status.error or 'starting'}"
    if status.last_handshake is None:
        return False, "NoHandshake", "no handshake with the hub yet"
    if now - status.last_handshake > STALE_AFTER:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(status.last_handshake))
        return False, "HandshakeStale", f"no handshake with the hub for over {STALE_AFTER:.0f}s (last at {stamp})"
    return True, "HandshakeRecent", f"a handshake with the hub within the last {STALE_AFTER:.0f}s"


class Tunnel:
    """One WireGuard interface configured from a loaded TunnelConfig (with its private key), named after its file."""

    def __init__(
        self,
        config: TunnelConfig,
        clock: Clock,
        *,
        interface: str | None = None,
        socket_dir: str = uapi.SOCKET_DIR,
        wireguard_go: str = "wireguard-go",
        resolver: Resolver = names.resolve,
        runner: Runner = run,
        stale_after: float = STALE_AFTER,
        resolve_period: float = names.RESOLVE_PERIOD,
        kind: str | None = None,
        kernel_probe: Callable[[], Awaitable[int | None]] = backends.kernel_family,
        netlink_transact: backends.NetlinkTransact | None = None,
    ) -> None:
        interface = interface if interface is not None else interface_name(config.path)
        if not _INTERFACE_NAME.match(interface):
            raise DeviceError(interface, "an interface name is 1-15 letters, digits or _=+.-")
        self.config = config
        self.clock = clock
        self.interface = interface
        self.socket = uapi.socket_path(interface, socket_dir)
        self.wireguard_go = wireguard_go
        self.resolver = resolver
        self.runner = runner
        self.stale_after = stale_after
        self.resolve_period = resolve_period
        self.endpoints: dict[bytes, str] = {}
        self.lookups: dict[bytes, names.Lookups] = {}  # per peer whose endpoint is a name
        self.status = Status(up=False, last_handshake=None)
        self.went_up = asyncio.Event()  # set at the first up (or adoption): what waits for the address may go
        self.state_seen: uapi.DeviceState | None = None  # the last check's answer (bytes, handshakes) for metrics
        # Times the tunnel was mended: "device" (made again after its wireguard-go died), "endpoint" (a peer's
        # name resolved to a new address).
        self.reconnects: Counter[str] = Counter()
        self._backoff = Backoff(initial=1.0, cap=60.0, reset_after=300.0)
        # `kind` forces a backend for a new device (None or AUTO: backends.choose); a running one is adopted as it is.
        self.kind = kind
        self.kernel_probe = kernel_probe
        self._wireguard_go = backends.WireguardGo(
            interface, self.socket, lambda request: self._ask(request), runner, wireguard_go
        )
        self._kernel = (
            backends.Kernel(interface, None, runner)
            if netlink_transact is None
            else backends.Kernel(interface, None, runner, netlink_transact)
        )
        self.backend: backends.Backend = self._wireguard_go  # until up() finds or makes the device

    @property
    def address(self) -> str:
        """The device's own address on the tunnel (its first Address): the Node's InternalIP, in the node API's
        certificate."""
        return str(self.config.addresses[0].ip)

    async def _ask(self, request: str) -> str:
        return await uapi.transact(self.socket, request, interface=self.interface)

    async def answering(self) -> bool:
        return await self.backend.answering()

    async def up(self) -> bool:
        """Create the interface unless one of either kind answers already (adopted); configure it. Returns whether adopted."""
        family = await self.kernel_probe()
        self._kernel.family = family
        adopted = await self._adopt(family)
        if not adopted:
            self._wireguard_go.cleanup()  # a dead wireguard-go's socket
            if await self._link_exists():  # a TUN device left without its daemon: start from nothing
                await self.runner(["ip", "link", "delete", "dev", self.interface])
            kind = backends.choose(
                family is not None, backends.wireguard_go_found(self.wireguard_go), self.kind or backends.AUTO
            )
            self.backend = self._kernel if kind == backends.KERNEL else self._wireguard_go
            await self.backend.create()
        found = (await self.state()).peers if adopted else ()
        await self.configure(
            frozenset(p.public_key for p in found) if adopted else None, {p.public_key: p.endpoint for p in found}
        )
        for argv in ip_commands(self.interface, self.config):
            await self.runner(argv)
        self.state_seen = await self.state()  # its peers in the metrics from now, not from the first check
        self.status = Status(up=True, last_handshake=self.status.last_handshake)
        self.went_up.set()
        log.info("Tunnel up", interface=self.interface, adopted=adopted, backend=self.backend.kind)
        return adopted

    async def _adopt(self, family: int | None) -> bool:
        """Whether a device of either kind runs under the interface's name; it becomes the backend if so."""
        for candidate in (self._wireguard_go, self._kernel if family is not None else None):
            if candidate is not None and await candidate.answering():
                self.backend = candidate
                return True
        return False

    async def _link_exists(self) -> bool:
        try:
            socket.if_nametoindex(self.interface)  # this process's network namespace, whatever /sys shows
        except OSError:
            return False
        return True

    async def configure(
        self, present: frozenset[bytes] | None = None, current: dict[bytes, str | None] | None = None
    ) -> None:
        """Apply the whole config; `present`: the peers of an adopted device, updated in place (uapi.set_request),
        `current`: their endpoints, kept when still one of the name's addresses (a round-robin name's order
        never moves a peer)."""
        for peer in self.config.peers:
            answer = await self._look_up(peer.public_key, peer.endpoint)
            had = (current or {}).get(peer.public_key)
            if answer:
                # The answer's first, unless the device's address is still one of the answer's (then None: kept).
                self.endpoints[peer.public_key] = names.choose_endpoint(had, answer, None, True) or had or answer[0]
        await self.backend.configure(self.config, self.endpoints, present)

    async def _look_up(self, key: bytes, endpoint: Endpoint) -> tuple[str, ...]:
        answer = await self.resolver(endpoint)
        if endpoint.is_name:
            before = self.lookups.get(key, names.Lookups(None, 0.0))
            self.lookups[key] = names.after_lookup(before, answer, self.clock.monotonic(), self.resolve_period)
        return answer

    async def state(self) -> uapi.DeviceState:
        return await self.backend.state()

    async def check(self) -> None:
        """One round of keeping up: re-create a dead device, re-resolve a silent peer's name."""
        try:
            device = await self.state()
        except DeviceError as exc:
            self.status = Status(up=False, last_handshake=self.status.last_handshake, error=str(exc))
            log.info("Tunnel device not answering: bringing it up", interface=self.interface, err=str(exc))
            await self.up()
            self.reconnects["device"] += 1
            return
        self.state_seen = device
        newest = max((p.last_handshake for p in device.peers if p.last_handshake), default=None)
        self.status = Status(up=True, last_handshake=newest)
        await self._follow_names(device)

    async def _follow_names(self, device: uapi.DeviceState) -> None:
        """Look each name up that is due, and point its peer at the answer when it is no longer there."""
        now, mono = self.clock.now(), self.clock.monotonic()
        seen = {p.public_key: p for p in device.peers}
        for peer in self.config.peers:
            if not peer.endpoint.is_name:
                continue
            state = seen.get(peer.public_key)
            last = state.last_handshake if state is not None else None
            stale = last is None or now - last > self.stale_after
            lookups = self.lookups.get(peer.public_key, names.Lookups(None, mono))
            if not names.is_lookup_due(lookups, mono, stale):
                continue
            answer = await self._look_up(peer.public_key, peer.endpoint)
            current = state.endpoint if state is not None else self.endpoints.get(peer.public_key)
            chosen = names.choose_endpoint(current, answer, lookups.answer, stale)
            if chosen is not None:
                log.info("Tunnel endpoint moved", endpoint=str(peer.endpoint), address=chosen, was=current, stale=stale)
                self.endpoints[peer.public_key] = chosen
                await self.backend.set_endpoint(peer.public_key, chosen)
                self.reconnects["endpoint"] += 1

    async def keep_up(self, stop: asyncio.Event | None = None, period: float = CHECK_PERIOD) -> None:
        """Bring the interface up (or adopt it) now, then check it every `period` until `stop` (or cancelled).

        A failure (no wireguard-go, `ip` refused) backs off from 1 s doubling to 60 s: the agent and its pods
        run on without the tunnel meanwhile, and `status` says why it is down. Cancelling leaves the interface
        up: the pods' traffic through it survives the agent, which adopts it at its next start.
        """
        stop = stop if stop is not None else asyncio.Event()
        while not stop.is_set():
            delay = period
            try:
                # The first round (and the one after a failure) applies the whole config, to a device adopted
                # from the agent before too: the file may have changed while the agent was down.
                await (self.check() if self.status.up else self.up())
                self._backoff.reset("device")
            except DeviceError as exc:
                delay = self._backoff.next("device", self.clock.monotonic())
                self.status = Status(up=False, last_handshake=self.status.last_handshake, error=str(exc))
                log.warning("Tunnel not up", interface=self.interface, err=str(exc), retry_in=delay)
            await self.clock.sleep(delay)

    async def down(self) -> None:
        """Remove the interface (wireguard-go exits when its TUN device goes) and its socket."""
        if await self._link_exists():
            await self.runner(["ip", "link", "delete", "dev", self.interface])
        self._wireguard_go.cleanup()
