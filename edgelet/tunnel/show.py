"""The running tunnel as a person reads it: `edgelet node` and `edgelet check` ask the interface itself (UAPI or netlink).

Reading the device, not the agent, means the answer holds when the agent is
down (the interface outlives it) and needs no new agent endpoint; the words
are a pure function of what the device answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from edgelet.tunnel import backend, uapi
from edgelet.tunnel.config import encode_key
from edgelet.tunnel.device import Status, readiness
from edgelet.tunnel.errors import DeviceError


def read_state(interface: str, socket_dir: str = uapi.SOCKET_DIR) -> tuple[uapi.DeviceState | None, str | None]:
    """The device's state from wireguard-go's UAPI socket, else from the kernel's WireGuard; or None and why."""
    try:
        text = asyncio.run(uapi.transact(uapi.socket_path(interface, socket_dir), "get=1\n\n", interface=interface))
        return uapi.parse_get(text), None
    except (DeviceError, ValueError) as exc:
        why = str(exc)
    family = asyncio.run(backend.kernel_family())
    if family is None:
        return None, why  # no kernel WireGuard: wireguard-go's is the answer that matters
    try:
        return asyncio.run(backend.Kernel(interface, family, _no_runner).state()), None
    except (DeviceError, ValueError) as exc:
        return None, f"{why}; nor a kernel device: {exc}"


async def _no_runner(argv: Sequence[str]) -> None:
    raise AssertionError("reading the state runs no command")


def describe(interface: str, state: uapi.DeviceState | None, error: str | None, now: float) -> tuple[bool, str]:
    """(ready, one line): up or not, and per peer its endpoint, last handshake and bytes (pure)."""
    if state is None:
        return False, f"{interface} not up ({error or 'no answer'})"
    newest = max((p.last_handshake for p in state.peers if p.last_handshake), default=None)
    ready, _, _ = readiness(Status(up=True, last_handshake=newest), now)
    peers = []
    for p in state.peers:
        seen = "never" if p.last_handshake is None else f"{max(0.0, now - p.last_handshake):.0f}s ago"
        peers.append(
            f"peer {encode_key(p.public_key)[:8]}… at {p.endpoint or 'no endpoint yet'}, last handshake {seen}, "
            f"{p.rx_bytes} B in, {p.tx_bytes} B out"
        )
    return ready, f"{interface} up; " + ("; ".join(peers) if peers else "no peer")
