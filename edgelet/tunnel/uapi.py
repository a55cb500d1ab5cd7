"""WireGuard's cross-platform configuration protocol (wireguard.com/xplatform) over a device's unix socket.

A request is `set=1` or `get=1`, then `key=value` lines, then an empty line;
keys are hex, interface keys come before the first `public_key`, and the
device ends its answer with `errno=N` and an empty line. Building requests and
reading answers are pure functions; `transact` is the only part that talks.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from edgelet.tunnel.config import TunnelConfig
from edgelet.tunnel.errors import DeviceError

SOCKET_DIR = "/var/run/wireguard"


def socket_path(interface: str, directory: str = SOCKET_DIR) -> str:
    return os.path.join(directory, f"{interface}.sock")


def set_request(config: TunnelConfig, endpoints: dict[bytes, str], present: frozenset[bytes] | None = None) -> str:
    """The `set=1` request that makes the device exactly `config` (each peer's allowed IPs replaced).

    `endpoints` maps a peer's public key to its resolved `ip:port` (`[v6]:port`); a peer missing from it
    keeps no endpoint until its name resolves. `present` is the peers a running (adopted) device has: those
    the config keeps are updated in place, so their sessions survive an agent restart, and only the others are
    removed (wg syncconf's way); None (a new device) replaces every peer.
    """
    assert config.private_key is not None, "load the key first (tunnel.keys.load)"
    lines = ["set=1", f"private_key={config.private_key.hex()}"]
    if config.listen_port is not None:
        lines.append(f"listen_port={config.listen_port}")
    if present is None:
        lines.append("replace_peers=true")
    else:
        wanted = {peer.public_key for peer in config.peers}
        for gone in sorted(present - wanted):
            lines += [f"public_key={gone.hex()}", "remove=true"]
    for peer in config.peers:
        lines.append(f"public_key={peer.public_key.hex()}")
        if peer.preshared_key is not None:
            lines.append(f"preshared_key={peer.preshared_key.hex()}")
        if peer.public_key in endpoints:
            lines.append(f"endpoint={endpoints[peer.public_key]}")
        lines.append(f"persistent_keepalive_interval={peer.persistent_keepalive}")
        lines.append("replace_allowed_ips=true")
        lines += [f"allowed_ip={net}" for net in peer.allowed_ips]
    return "\n".join(lines) + "\n\n"


def endpoint_request(public_key: bytes, endpoint: str) -> str:
    """Point one existing peer at a new address (`update_only` never adds a peer the config dropped)."""
    return f"set=1\npublic_key={public_key.hex()}\nupdate_only=true\nendpoint={endpoint}\n\n"


@dataclass(frozen=True)
class PeerState:
    public_key: bytes
    endpoint: str | None
    last_handshake: float | None  # unix seconds; None: never
    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True)
class DeviceState:
    listen_port: int | None
    peers: tuple[PeerState, ...]


def parse_answer(text: str) -> list[tuple[str, str]]:
    """The `key=value` pairs of an answer without its final `errno`; ValueError when errno is not 0."""
    pairs = []
    errno = None
    for line in text.splitlines():
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"not key=value: {line!r}")
        if key == "errno":
            errno = int(value)
            continue
        pairs.append((key, value))
    if errno is None:
        raise ValueError("the answer has no errno line")
    if errno != 0:
        raise ValueError(f"errno={errno} ({os.strerror(errno)})")
    return pairs


def parse_get(text: str) -> DeviceState:
    """A `get=1` answer as a DeviceState (pure)."""
    listen_port = None
    peers: list[PeerState] = []
    current: dict[str, str] = {}

    def close() -> None:
        if current:
            sec = int(current.get("last_handshake_time_sec", "0"))
            nsec = int(current.get("last_handshake_time_nsec", "0"))
            peers.append(
                PeerState(
                    public_key=bytes.fromhex(current["public_key"]),
                    endpoint=current.get("endpoint"),
                    last_handshake=sec + nsec / 1e9 if sec or nsec else None,
                    rx_bytes=int(current.get("rx_bytes", "0")),
                    tx_bytes=int(current.get("tx_bytes", "0")),
                )
            )
            current.clear()

    for key, value in parse_answer(text):
        if key == "public_key":
            close()
            current["public_key"] = value
        elif current:
            current.setdefault(key, value)  # allowed_ip repeats; only the peer's scalar keys are kept
        elif key == "listen_port":
            listen_port = int(value)
    close()
    return DeviceState(listen_port, tuple(peers))


async def transact(path: str, request: str, *, interface: str, timeout: float = 5.0) -> str:
    """Send one request on the device's socket and return its whole answer; DeviceError on any failure."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout)
    except (TimeoutError, OSError) as exc:
        raise DeviceError(interface, f"cannot reach its UAPI socket {path} ({exc or 'timed out'})") from exc
    try:
        writer.write(request.encode())
        await writer.drain()
        answer = []
        while True:  # the answer ends with an empty line after errno=N
            line = await asyncio.wait_for(reader.readline(), timeout)
            if not line:
                break
            answer.append(line.decode())
            if line == b"\n" and any(a.startswith("errno=") for a in answer):
                break
        text = "".join(answer)
        parse_answer(text)  # raises on errno != 0
        return text
    except (TimeoutError, OSError, ValueError) as exc:
        raise DeviceError(interface, f"UAPI {request.split(chr(10), 1)[0]} failed: {exc or 'timed out'}") from exc
    finally:
        writer.close()
