"""When a peer's Endpoint name is looked up again, and where the peer is pointed after (pure), and the lookup itself.

WireGuard resolves a name once, when it is configured, and keeps the address.
A hub that moves (a new address behind the same name) would be lost until the
device next starts, so the keep-up loop looks each name up again: every
`RESOLVE_PERIOD` while the lookups succeed, at every check while the peer's
handshake is stale, and backing off from `RESOLVE_PERIOD` doubling to
`RESOLVE_CAP` while the name does not resolve. A lookup re-points the peer only
when its current address is not among the answer's (a round-robin name's
addresses are never flipped between), and then only when the answer changed
since the last one or the peer is silent: an address the answer never gave,
with a fresh handshake, is the hub's own roaming (it answered from another
address), which WireGuard got right.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

from edgelet.tunnel.config import Endpoint, parse_endpoint
from edgelet.util.log import get_logger

log = get_logger(__name__)

RESOLVE_PERIOD = 30.0  # a DNS change is followed within this (plus a check period), at one lookup per name
RESOLVE_CAP = 300.0  # the longest wait between lookups of a name that does not resolve
# A lookup that takes longer is a failure: glibc's own timeouts (5 s a try, per server) could otherwise hold a
# round of the keep-up loop (and a device to make again) for half a minute.
RESOLVE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Lookups:
    """What the keep-up loop remembers of one peer's name: its last answer and when to ask again."""

    answer: frozenset[str] | None  # the addresses (ip:port) of the last lookup that succeeded; None: none yet
    next_at: float  # monotonic seconds
    failures: int = 0  # lookups that failed in a row


def is_lookup_due(lookups: Lookups, now: float, stale: bool) -> bool:
    """Whether to look the name up at this check (pure): its time has come, or the peer is silent and the name
    is not failing (a silent peer's name is asked at every check, a failing one only as its back-off allows)."""
    return now >= lookups.next_at or (stale and lookups.failures == 0)


def after_lookup(lookups: Lookups, answer: tuple[str, ...], now: float, period: float = RESOLVE_PERIOD) -> Lookups:
    """The memory after a lookup at `now` (pure): an empty answer is a failure and backs off, doubling to the cap."""
    if answer:
        return Lookups(frozenset(answer), now + period, 0)
    wait = min(period * 2**lookups.failures, max(RESOLVE_CAP, period))
    return Lookups(lookups.answer, now + wait, lookups.failures + 1)


def _normal(endpoint: str) -> str:
    """`ip:port` written one way (an IPv6 address compressed, in brackets) so the device's and DNS's compare."""
    try:
        parsed = parse_endpoint(endpoint)
        return format_endpoint(str(ipaddress.ip_address(parsed.host)), parsed.port)
    except ValueError:
        return endpoint


def choose_endpoint(
    current: str | None, answer: tuple[str, ...], previous: frozenset[str] | None, stale: bool
) -> str | None:
    """The address to point the peer at after a lookup, or None to leave it where it is (pure).

    `current` is the device's endpoint now (WireGuard's roaming may have moved it), `answer` the lookup's
    addresses in the resolver's order, `previous` the last successful answer, `stale` whether the peer's
    handshake is older than the staleness bound.
    """
    if not answer:
        return None  # the name does not resolve now: the address we have is the best there is
    if current is None:
        return answer[0]
    normal = {_normal(a) for a in answer}
    if _normal(current) in normal:
        return None  # still one of the name's: a round-robin answer's order never moves the peer
    moved = previous is None or normal != {_normal(a) for a in previous}
    return answer[0] if moved or stale else None


def format_endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ipaddress.ip_address(address).version == 6 else f"{address}:{port}"


async def resolve(endpoint: Endpoint, timeout: float = RESOLVE_TIMEOUT) -> tuple[str, ...]:
    """The endpoint's addresses as ip:port, IPv4 first (the usual NAT'd uplink has it), each once, looking a DNS
    name up now; empty when the name does not resolve (yet) or not within `timeout`."""
    if not endpoint.is_name:
        return (str(endpoint),)
    lookup = asyncio.get_running_loop().getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_DGRAM)
    try:
        infos = await asyncio.wait_for(lookup, timeout)
    except (OSError, TimeoutError) as exc:
        log.warning("Tunnel endpoint does not resolve", endpoint=str(endpoint), err=str(exc) or "timed out")
        return ()
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # stable: the resolver's order within a family
    found = (format_endpoint(str(info[4][0]), endpoint.port) for info in infos)
    return tuple(dict.fromkeys(found))
