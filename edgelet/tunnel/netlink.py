"""The kernel WireGuard's generic netlink API: building and reading its messages (pure) and one socket transaction.

A generic netlink message is a `struct nlmsghdr` (length, type, flags,
sequence, port id), a `struct genlmsghdr` (command, version) and attributes
(`struct nlattr`: length, type, payload padded to 4 bytes; a nested one holds
attributes and carries NLA_F_NESTED). The family's id is resolved by name
with the controller's CTRL_CMD_GETFAMILY; WireGuard's ("wireguard", from
include/uapi/linux/wireguard.h) then takes WG_CMD_SET_DEVICE (with an ack)
and WG_CMD_GET_DEVICE (a dump, whose peers may run over several messages).
Only `transact` touches a socket; everything else is bytes in, bytes out.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import struct
from collections.abc import Iterable, Mapping

from edgelet.tunnel.config import TunnelConfig
from edgelet.tunnel.errors import DeviceError, NetlinkError
from edgelet.tunnel.uapi import DeviceState, PeerState
from edgelet.util.netlink import NLMSGHDR, Message, align, parse_messages

# <linux/netlink.h>
NETLINK_GENERIC = 16
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLMSG_ERROR = 0x2
NLMSG_DONE = 0x3
NLA_F_NESTED = 1 << 15
NLA_F_NET_BYTEORDER = 1 << 14
_NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xFFFF

# <linux/genetlink.h>
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2

# <linux/wireguard.h>
WG_GENL_NAME = "wireguard"
WG_GENL_VERSION = 1
WG_CMD_GET_DEVICE = 0
WG_CMD_SET_DEVICE = 1
WGDEVICE_F_REPLACE_PEERS = 1 << 0
WGDEVICE_A_IFINDEX = 1
WGDEVICE_A_IFNAME = 2
WGDEVICE_A_PRIVATE_KEY = 3
WGDEVICE_A_PUBLIC_KEY = 4
WGDEVICE_A_FLAGS = 5
WGDEVICE_A_LISTEN_PORT = 6
WGDEVICE_A_FWMARK = 7
WGDEVICE_A_PEERS = 8
WGPEER_F_REMOVE_ME = 1 << 0
WGPEER_F_REPLACE_ALLOWEDIPS = 1 << 1
WGPEER_F_UPDATE_ONLY = 1 << 2
WGPEER_A_PUBLIC_KEY = 1
WGPEER_A_PRESHARED_KEY = 2
WGPEER_A_FLAGS = 3
WGPEER_A_ENDPOINT = 4
WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL = 5
WGPEER_A_LAST_HANDSHAKE_TIME = 6
WGPEER_A_RX_BYTES = 7
WGPEER_A_TX_BYTES = 8
WGPEER_A_ALLOWEDIPS = 9
WGALLOWEDIP_A_FAMILY = 1
WGALLOWEDIP_A_IPADDR = 2
WGALLOWEDIP_A_CIDR_MASK = 3

_GENLMSGHDR = struct.Struct("=BBH")  # cmd, version, reserved
_NLATTR = struct.Struct("=HH")  # length (header included, padding not), type


# --- Encoding ------------------------------------------------------------------------------------------------


def attr(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    length = _NLATTR.size + len(payload)
    return _NLATTR.pack(length, kind) + payload + b"\0" * (align(length) - length)


def nested(kind: int, attrs: Iterable[bytes]) -> bytes:
    return attr(kind | NLA_F_NESTED, b"".join(attrs))


def u8(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=B", value))


def u16(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=H", value))


def u32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=I", value))


def string(kind: int, value: str) -> bytes:
    return attr(kind, value.encode() + b"\0")  # NLA_NUL_STRING


def message(family: int, flags: int, seq: int, cmd: int, version: int, attrs: Iterable[bytes]) -> bytes:
    """A whole generic netlink request; the port id is 0 (the kernel fills in the socket's)."""
    body = _GENLMSGHDR.pack(cmd, version, 0) + b"".join(attrs)
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), family, NLM_F_REQUEST | flags, seq, 0) + body


def sockaddr(endpoint: str) -> bytes:
    """`ip:port` or `[v6]:port` as the kernel's struct sockaddr_in / sockaddr_in6 (the port in network order)."""
    host, _, port = endpoint.rpartition(":")
    ip = ipaddress.ip_address(host.strip("[]"))
    if ip.version == 4:
        return struct.pack("=H", socket.AF_INET) + struct.pack("!H", int(port)) + ip.packed + b"\0" * 8
    return struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", int(port), 0) + ip.packed + b"\0" * 4


def getfamily_request(name: str, seq: int) -> bytes:
    return message(GENL_ID_CTRL, NLM_F_ACK, seq, CTRL_CMD_GETFAMILY, 1, [string(CTRL_ATTR_FAMILY_NAME, name)])


def get_device_request(family: int, seq: int, interface: str) -> bytes:
    return message(family, NLM_F_DUMP, seq, WG_CMD_GET_DEVICE, WG_GENL_VERSION, [string(WGDEVICE_A_IFNAME, interface)])


def set_device_request(
    family: int,
    seq: int,
    interface: str,
    config: TunnelConfig,
    endpoints: Mapping[bytes, str],
    present: frozenset[bytes] | None = None,
) -> bytes:
    """WG_CMD_SET_DEVICE making the device exactly `config`: the same meaning as uapi.set_request.

    `present` None (a new device) replaces every peer; else the peers the config dropped are removed and the
    others updated in place, so their sessions survive an agent restart.
    """
    assert config.private_key is not None, "load the key first (tunnel.keys.load)"
    attrs = [string(WGDEVICE_A_IFNAME, interface), attr(WGDEVICE_A_PRIVATE_KEY, config.private_key)]
    if config.listen_port is not None:
        attrs.append(u16(WGDEVICE_A_LISTEN_PORT, config.listen_port))
    peers = []
    if present is None:
        attrs.append(u32(WGDEVICE_A_FLAGS, WGDEVICE_F_REPLACE_PEERS))
    else:
        wanted = {peer.public_key for peer in config.peers}
        for gone in sorted(present - wanted):
            peers.append(nested(0, [attr(WGPEER_A_PUBLIC_KEY, gone), u32(WGPEER_A_FLAGS, WGPEER_F_REMOVE_ME)]))
    for peer in config.peers:
        p = [attr(WGPEER_A_PUBLIC_KEY, peer.public_key), u32(WGPEER_A_FLAGS, WGPEER_F_REPLACE_ALLOWEDIPS)]
        if peer.preshared_key is not None:
            p.append(attr(WGPEER_A_PRESHARED_KEY, peer.preshared_key))
        if peer.public_key in endpoints:
            p.append(attr(WGPEER_A_ENDPOINT, sockaddr(endpoints[peer.public_key])))
        p.append(u16(WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL, peer.persistent_keepalive))
        ips = []
        for net in peer.allowed_ips:
            ip_family = socket.AF_INET if net.version == 4 else socket.AF_INET6
            ips.append(
                nested(
                    0,
                    [
                        u16(WGALLOWEDIP_A_FAMILY, ip_family),
                        attr(WGALLOWEDIP_A_IPADDR, net.network_address.packed),
                        u8(WGALLOWEDIP_A_CIDR_MASK, net.prefixlen),
                    ],
                )
            )
        p.append(nested(WGPEER_A_ALLOWEDIPS, ips))
        peers.append(nested(0, p))
    attrs.append(nested(WGDEVICE_A_PEERS, peers))
    return message(family, NLM_F_ACK, seq, WG_CMD_SET_DEVICE, WG_GENL_VERSION, attrs)


def endpoint_request(family: int, seq: int, interface: str, public_key: bytes, endpoint: str) -> bytes:
    """Point one existing peer at a new address (UPDATE_ONLY never adds a peer the config dropped)."""
    peer = [
        attr(WGPEER_A_PUBLIC_KEY, public_key),
        u32(WGPEER_A_FLAGS, WGPEER_F_UPDATE_ONLY),
        attr(WGPEER_A_ENDPOINT, sockaddr(endpoint)),
    ]
    attrs = [string(WGDEVICE_A_IFNAME, interface), nested(WGDEVICE_A_PEERS, [nested(0, peer)])]
    return message(family, NLM_F_ACK, seq, WG_CMD_SET_DEVICE, WG_GENL_VERSION, attrs)


# --- Decoding ------------------------------------------------------------------------------------------------


def parse_attrs(data: bytes) -> list[tuple[int, bytes]]:
    """(type without its NESTED/NET_BYTEORDER bits, payload) of each attribute, in order; ValueError if malformed."""
    out = []
    offset = 0
    while offset + _NLATTR.size <= len(data):
        length, kind = _NLATTR.unpack_from(data, offset)
        if length < _NLATTR.size or offset + length > len(data):
            raise ValueError(f"a netlink attribute of length {length} at byte {offset} of {len(data)}")
        out.append((kind & _NLA_TYPE_MASK, data[offset + _NLATTR.size : offset + length]))
        offset += align(length)
    return out


def genl_attrs(payload: bytes) -> list[tuple[int, bytes]]:
    """The attributes of a generic netlink message's payload (after its genlmsghdr)."""
    return parse_attrs(payload[_GENLMSGHDR.size :])


def error_code(message: Message) -> int:
    """NLMSG_ERROR's errno (0: an ack) or a dump's NLMSG_DONE's (0 when it carries none), positive."""
    if len(message.payload) < 4:
        return 0
    (code,) = struct.unpack_from("=i", message.payload)
    return -code if code < 0 else 0


def parse_family(messages: Iterable[Message]) -> int:
    """CTRL_ATTR_FAMILY_ID of a CTRL_CMD_GETFAMILY reply; ValueError when there is none."""
    for msg in messages:
        if msg.type == GENL_ID_CTRL:
            for kind, value in genl_attrs(msg.payload):
                if kind == CTRL_ATTR_FAMILY_ID:
                    return int(struct.unpack("=H", value[:2])[0])
    raise ValueError("the reply names no family id")


def parse_sockaddr(raw: bytes) -> str | None:
    """A struct sockaddr_in/in6 as `ip:port` / `[v6]:port`; None for an empty one (no endpoint yet)."""
    (family,) = struct.unpack_from("=H", raw)
    (port,) = struct.unpack_from("!H", raw, 2)
    if family == socket.AF_INET and len(raw) >= 8:
        return f"{ipaddress.IPv4Address(raw[4:8])}:{port}"
    if family == socket.AF_INET6 and len(raw) >= 24:
        return f"[{ipaddress.IPv6Address(raw[8:24])}]:{port}"
    return None


def parse_device(messages: Iterable[Message], family: int) -> DeviceState:
    """A WG_CMD_GET_DEVICE dump as a DeviceState (pure).

    A device with many peers (or allowed IPs) comes in several messages, and a peer cut short in one carries on
    in the next under the same public key: its figures are merged by key, keeping the order first seen.
    """
    listen_port = None
    peers: dict[bytes, dict[int, bytes]] = {}
    for msg in messages:
        if msg.type != family:
            continue
        for kind, value in genl_attrs(msg.payload):
            if kind == WGDEVICE_A_LISTEN_PORT:
                listen_port = int(struct.unpack("=H", value[:2])[0])
            elif kind == WGDEVICE_A_PEERS:
                for _, peer in parse_attrs(value):
                    fields = dict(parse_attrs(peer))
                    key = fields.get(WGPEER_A_PUBLIC_KEY)
                    if key is not None:
                        peers.setdefault(key, {}).update(fields)
    out = []
    for key, fields in peers.items():
        sec, nsec = (
            struct.unpack("=qq", fields[WGPEER_A_LAST_HANDSHAKE_TIME][:16])
            if (WGPEER_A_LAST_HANDSHAKE_TIME in fields)
            else (0, 0)
        )
        endpoint = fields.get(WGPEER_A_ENDPOINT)
        out.append(
            PeerState(
                public_key=key,
                endpoint=parse_sockaddr(endpoint) if endpoint else None,
                last_handshake=sec + nsec / 1e9 if sec or nsec else None,
                rx_bytes=int(struct.unpack("=Q", fields[WGPEER_A_RX_BYTES][:8])[0])
                if WGPEER_A_RX_BYTES in fields
                else 0,
                tx_bytes=int(struct.unpack("=Q", fields[WGPEER_A_TX_BYTES][:8])[0])
                if WGPEER_A_TX_BYTES in fields
                else 0,
            )
        )
    return DeviceState(listen_port, tuple(out))


# --- The socket ----------------------------------------------------------------------------------------------


def transact_sync(request: bytes, timeout: float = 5.0) -> list[Message]:
    """Send one request on a new NETLINK_GENERIC socket; every message of its answer up to the ack or the dump's
    end. NetlinkError with the kernel's errno when it refuses; OSError when the socket fails."""
    (seq,) = struct.unpack_from("=I", request, 8)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC) as sock:
        sock.settimeout(timeout)
        sock.bind((0, 0))
        sock.send(request)
        answer: list[Message] = []
        while True:
            for msg in parse_messages(sock.recv(1 << 16)):
                if msg.seq != seq:
                    continue
                if msg.type in (NLMSG_ERROR, NLMSG_DONE):
                    code = error_code(msg)
                    if code:
                        raise NetlinkError(code)
                    return answer
                answer.append(msg)


async def transact(request: bytes, *, interface: str, what: str, timeout: float = 5.0) -> list[Message]:
    """transact_sync off the event loop; DeviceError naming the interface and the request on any failure."""
    try:
        return await asyncio.to_thread(transact_sync, request, timeout)
    except (OSError, ValueError, NetlinkError) as exc:
        raise DeviceError(interface, f"netlink {what} failed: {exc or 'timed out'}") from exc


async def resolve_family(name: str = WG_GENL_NAME, *, timeout: float = 5.0) -> int | None:
    """The generic netlink family's id, or None when the kernel has no such family (the module is not loaded)."""
    try:
        return parse_family(await asyncio.to_thread(transact_sync, getfamily_request(name, 1), timeout))
    except NetlinkError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise DeviceError(name, f"netlink CTRL_CMD_GETFAMILY failed: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise DeviceError(name, f"netlink CTRL_CMD_GETFAMILY failed: {exc or 'timed out'}") from exc
