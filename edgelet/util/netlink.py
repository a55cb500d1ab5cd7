"""Netlink's message framing, shared by every netlink user (WireGuard's generic netlink, rtnetlink's link and
address notifications): a datagram holds messages, each a `struct nlmsghdr` (length, type, flags, sequence,
port id) and its payload, padded to 4 bytes. Bytes in, bytes out."""

from __future__ import annotations

import struct
from dataclasses import dataclass

NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, seq, port id: host byte order


def align(n: int) -> int:
    """`n` rounded up to netlink's 4-byte alignment."""
    return (n + 3) & ~3


@dataclass(frozen=True)
class Message:
    type: int
    flags: int
    seq: int
    payload: bytes  # after the nlmsghdr


def parse_messages(data: bytes) -> list[Message]:
    """The netlink messages of one datagram; ValueError on a truncated or malformed one."""
    out = []
    offset = 0
    while offset + NLMSGHDR.size <= len(data):
        length, kind, flags, seq, _ = NLMSGHDR.unpack_from(data, offset)
        if length < NLMSGHDR.size or offset + length > len(data):
            raise ValueError(f"a netlink message of length {length} at byte {offset} of {len(data)}")
        out.append(Message(kind, flags, seq, data[offset + NLMSGHDR.size : offset + length]))
        offset += align(length)
    return out
