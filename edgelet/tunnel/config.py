"""wg-quick's config file format, parsed into what edgelet configures (pure: text in, `TunnelConfig` or an error out).

The file is the one WireGuard users already write::

    [Interface]
    PrivateKey = <base64>      # optional: edgelet generates and keeps one
    Address = 10.99.0.7/32
    ListenPort = 51820         # optional

    [Peer]
    PublicKey = <base64>
    Endpoint = hub.example.net:51820
    AllowedIPs = 10.99.0.0/24
    PersistentKeepalive = 25   # the default: the device is behind NAT

wg-quick's shell hooks (PreUp, PostUp...) and its DNS and routing-table keys
are refused rather than ignored: edgelet runs no hooks and touches no
resolver, and a silently ignored line is a surprise at the worst moment.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass

from edgelet.tunnel.errors import TunnelConfigError

DEFAULT_KEEPALIVE = 25  # seconds: under the 30 s UDP timeout of most NAT mappings
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)
_UNSUPPORTED = {
    "preup": "edgelet runs no shell hooks",
    "postup": "edgelet runs no shell hooks",
    "predown": "edgelet runs no shell hooks",
    "postdown": "edgelet runs no shell hooks",
    "dns": "edgelet does not change the device's resolver",
    "table": "edgelet routes only the peers' AllowedIPs",
    "saveconfig": "edgelet never writes the file back",
}

Address = ipaddress.IPv4Interface | ipaddress.IPv6Interface
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Endpoint:
    """A peer's UDP endpoint as written: an IP address or a DNS name (looked up again while the agent runs)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def is_name(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return True
        return False


@dataclass(frozen=True)
class Peer:
    public_key: bytes
    endpoint: Endpoint
    allowed_ips: tuple[Network, ...]
    persistent_keepalive: int = DEFAULT_KEEPALIVE  # 0: off
    preshared_key: bytes | None = None


@dataclass(frozen=True)
class TunnelConfig:
    """One WireGuard interface and its peers; `private_key` is None until the agent has generated one."""

    path: str
    private_key: bytes | None
    addresses: tuple[Address, ...]
    peers: tuple[Peer, ...]
    listen_port: int | None = None
    mtu: int | None = None


def decode_key(text: str) -> bytes:
    """A WireGuard key: 32 bytes in base64 (44 characters); ValueError naming what is wrong."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64 (`wg genkey` and `wg pubkey` print a key)") from None
    if len(raw) != 32:
        raise ValueError(f"a key is 32 bytes, this is {len(raw)}")
    return raw


def encode_key(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def parse_endpoint(text: str) -> Endpoint:
    """`host:port`, `[v6]:port`; ValueError naming what is wrong."""
    text = text.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError("an IPv6 endpoint is written [address]:port")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    else:
        host, sep, port = text.rpartition(":")
        if not sep or not host:
            raise ValueError("an endpoint is host:port")
        if ":" in host:
            raise ValueError("an IPv6 endpoint is written [address]:port")
        if not _HOSTNAME.match(host):
            raise ValueError(f"{host!r} is neither an IP address nor a DNS name")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"port {port!r} is not 1-65535")
    return Endpoint(host, int(port))


def _int(text: str, what: str, low: int, high: int) -> int:
    if not text.strip().isdigit() or not low <= int(text) <= high:
        raise ValueError(f"{what} {text.strip()!r} is not {low}-{high}")
    return int(text)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_config(text: str, path: str) -> TunnelConfig:
    """Parse a wg-quick file; TunnelConfigError naming `path`, the line and the reason for anything wrong."""
    iface, addresses, peers, peer_ips = _read_sections(text, path)
    built = [_build_peer(path, entries, ips) for entries, ips in zip(peers, peer_ips)]
    keys = [p.public_key for p in built]
    if len(set(keys)) != len(keys):
        raise TunnelConfigError(path, "two [Peer] sections have the same PublicKey")
    private = _field(path, iface, "privatekey", decode_key) if "privatekey" in iface else None
    if private is not None and any(private == key for key in keys):  # a public key pasted as the private one
        raise TunnelConfigError(path, "PrivateKey is a peer's PublicKey", iface["privatekey"][0])
    return TunnelConfig(
        path=path,
        private_key=private,  # type: ignore[arg-type]
        addresses=tuple(addresses),
        peers=tuple(built),
        listen_port=_field(path, iface, "listenport", lambda v: _int(v, "port", 1, 65535))  # type: ignore[arg-type]
        if "listenport" in iface
        else None,
        mtu=_field(path, iface, "mtu", lambda v: _int(v, "MTU", 1280, 65535))  # type: ignore[arg-type]
        if "mtu" in iface
        else None,
    )


# A section's keys as written: lowercased key -> (line number, value).
_Entries = dict[str, tuple[int, str]]


def _read_sections(text: str, path: str) -> tuple[_Entries, list[Address], list[_Entries], list[list[Network]]]:
    """The file's lines sorted into sections: the [Interface]'s keys and addresses, and each [Peer]'s keys and
    AllowedIPs; every key checked for its section, values parsed later (`_field`)."""
    section = ""
    iface: _Entries = {}
    addresses: list[Address] = []
    peers: list[_Entries] = []
    peer_ips: list[list[Network]] = []
    seen_interface = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            section = line.lower()
            if section == "[interface]":
                if seen_interface:
                    raise TunnelConfigError(path, "a second [Interface] section", number)
                seen_interface = True
            elif section == "[peer]":
                peers.append({})
                peer_ips.append([])
            else:
                raise TunnelConfigError(path, f"unknown section {line} (only [Interface] and [Peer])", number)
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not key:
            raise TunnelConfigError(path, "expected `Key = Value`", number)
        if not section:
            raise TunnelConfigError(path, "a key before any [Interface] or [Peer] section", number)
        if key in _UNSUPPORTED:
            raise TunnelConfigError(path, f"{key_name(raw)} is not supported: {_UNSUPPORTED[key]}", number)
        try:
            if section == "[interface]":
                if key == "address":
                    addresses += [ipaddress.ip_interface(a) for a in _items(value)]
                elif key in ("privatekey", "listenport", "mtu", "fwmark"):
                    if key in iface:
                        raise ValueError(f"{key_name(raw)} given twice")
                    iface[key] = (number, value)
                else:
                    raise ValueError(f"unknown [Interface] key {key_name(raw)}")
            else:
                if key == "allowedips":
                    peer_ips[-1].extend(ipaddress.ip_network(a, strict=False) for a in _items(value))
                elif key in ("publickey", "endpoint", "persistentkeepalive", "presharedkey"):
                    if key in peers[-1]:
                        raise ValueError(f"{key_name(raw)} given twice")
                    peers[-1][key] = (number, value)
                else:
                    raise ValueError(f"unknown [Peer] key {key_name(raw)}")
        except ValueError as exc:
            raise TunnelConfigError(path, str(exc), number) from None
    if not seen_interface:
        raise TunnelConfigError(path, "no [Interface] section")
    if not addresses:
        raise TunnelConfigError(path, "[Interface] has no Address (the device's tunnel address, e.g. 10.99.0.7/32)")
    if not peers:
        raise TunnelConfigError(path, "no [Peer] section (the hub the device dials)")
    return iface, addresses, peers, peer_ips


def _field(path: str, entries: _Entries, key: str, parse: object) -> object:
    """The value of `key` parsed; a TunnelConfigError naming its line when `parse` refuses it."""
    number, value = entries[key]
    try:
        return parse(value)  # type: ignore[operator]
    except ValueError as exc:
        raise TunnelConfigError(path, f"{key_name_of(key)}: {exc}", number) from None


def _build_peer(path: str, entries: _Entries, ips: list[Network]) -> Peer:
    """One [Peer] from its keys: PublicKey and Endpoint required, the others defaulted."""
    for required in ("publickey", "endpoint"):
        if required not in entries:
            why = "" if required == "publickey" else " (the device dials out: the hub's host:port)"
            raise TunnelConfigError(path, f"a [Peer] has no {key_name_of(required)}{why}")
    return Peer(
        public_key=_field(path, entries, "publickey", decode_key),  # type: ignore[arg-type]
        endpoint=_field(path, entries, "endpoint", parse_endpoint),  # type: ignore[arg-type]
        allowed_ips=tuple(ips),
        persistent_keepalive=_field(  # type: ignore[arg-type]
            path, entries, "persistentkeepalive", lambda v: 0 if v.lower() == "off" else _int(v, "interval", 0, 65535)
        )
        if "persistentkeepalive" in entries
        else DEFAULT_KEEPALIVE,
        preshared_key=_field(path, entries, "presharedkey", decode_key)  # type: ignore[arg-type]
        if "presharedkey" in entries
        else None,
    )


_NAMES = {
    "privatekey": "PrivateKey",
    "listenport": "ListenPort",
    "mtu": "MTU",
    "fwmark": "FwMark",
    "publickey": "PublicKey",
    "endpoint": "Endpoint",
    "persistentkeepalive": "PersistentKeepalive",
    "presharedkey": "PresharedKey",
    "allowedips": "AllowedIPs",
    "address": "Address",
}


def key_name_of(key: str) -> str:
    return _NAMES.get(key, key)


def key_name(raw: str) -> str:
    return raw.split("=", 1)[0].strip()


def peer_block(public_key: bytes, config: TunnelConfig, node: str) -> str:
    """The hub's [Peer] section for node `node`: its public key and its tunnel addresses as AllowedIPs (hosts).

    No Endpoint: the device is behind NAT and dials the hub, which learns its address from the handshake.
    """
    hosts = ", ".join(str(ipaddress.ip_network(a.ip)) for a in config.addresses)
    return f"[Peer]\n# node {node}\nPublicKey = {encode_key(public_key)}\nAllowedIPs = {hosts}\n"
