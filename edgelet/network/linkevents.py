"""Which rtnetlink notifications (links and addresses, from the host's namespace or a pod's) say that a pod's
network may have broken, and so bring that pod's CNI CHECK (pure: bytes and tables in, answers out).

Only the headers are read: the `struct nlmsghdr` type, then the interface index (and, for a link, its flags)
of `struct ifinfomsg` or `struct ifaddrmsg`. What counts as breaking is what can take a working network down:
a link gone, a link that lost IFF_UP or its carrier (IFF_LOWER_UP), an address gone. A link coming up, an
address added (IPv6 brings its own right after an ADD) or a change of anything else does not.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from edgelet.util.netlink import parse_messages

# <linux/rtnetlink.h>
NETLINK_ROUTE = 0
RTMGRP_LINK = 0x1
RTMGRP_IPV4_IFADDR = 0x10
RTMGRP_IPV6_IFADDR = 0x100
GROUPS = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_NEWADDR = 20
RTM_DELADDR = 21
# <linux/if.h>
IFF_UP = 0x1
IFF_LOWER_UP = 0x10000
_UP = IFF_UP | IFF_LOWER_UP

_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, index


@dataclass(frozen=True)
class Event:
    type: int  # RTM_NEWLINK, RTM_DELLINK, RTM_NEWADDR or RTM_DELADDR
    index: int  # the interface's index in the namespace the message came from
    flags: int = 0  # a link's IFF_* flags (0 for an address)


def parse(data: bytes) -> list[Event]:
    """The link and address events of one datagram (others skipped); ValueError on a malformed one."""
    out = []
    for msg in parse_messages(data):
        if msg.type in (RTM_NEWLINK, RTM_DELLINK):
            if len(msg.payload) < _IFINFOMSG.size:
                raise ValueError(f"an rtnetlink link message of {len(msg.payload)} bytes")
            _, _, index, flags, _ = _IFINFOMSG.unpack_from(msg.payload)
            out.append(Event(msg.type, index, flags))
        elif msg.type in (RTM_NEWADDR, RTM_DELADDR):
            if len(msg.payload) < _IFADDRMSG.size:
                raise ValueError(f"an rtnetlink address message of {len(msg.payload)} bytes")
            out.append(Event(msg.type, _IFADDRMSG.unpack_from(msg.payload)[4]))
    return out


def breaking(event: Event, before: int | None) -> bool:
    """Whether `event` may have broken a network that uses its interface; `before` is the link's flags at its
    last event (None: none seen since the watch began, when it was taken for up: CNI's ADD had set it so)."""
    if event.type in (RTM_DELLINK, RTM_DELADDR):
        return True
    if event.type == RTM_NEWLINK:
        was = _UP if before is None else before & _UP
        return bool(was & ~event.flags)
    return False


def affected(
    events: Iterable[Event], users: Mapping[int, frozenset[str]], flags: dict[int, int], *, whole: frozenset[str]
) -> set[str]:
    """The sandboxes that `events` (of one namespace) may have broken. `users` maps an interface index to the
    sandboxes whose network uses it (a host's bridge: all of them); an index it does not name concerns no one,
    unless `whole` (a pod's own namespace: its every interface is its own) is given for it (`users` empty).
    `flags` holds each link's last flags, and is updated."""
    out: set[str] = set()
    for event in events:
        before = flags.get(event.index)
        if event.type == RTM_NEWLINK:
            flags[event.index] = event.flags
        elif event.type == RTM_DELLINK:
            flags.pop(event.index, None)
        if breaking(event, before):
            out |= users.get(event.index, whole)
    return out
