"""Following a hub's DNS name: when the keep-up loop looks it up again and where it points the peer (tables), and a
`Tunnel` doing so over a device faked at its socket, with a fake clock."""

from __future__ import annotations

import asyncio
import re
import socket

import pytest

from edgelet.tunnel import endpoints as names
from edgelet.tunnel.config import Endpoint, encode_key, parse_config
from edgelet.tunnel.device import Tunnel
from edgelet.tunnel.endpoints import Lookups, after_lookup, choose_endpoint, is_lookup_due
from edgelet.util.clock import FakeClock

HUB = bytes(range(32))
CONFIG = f"""[Interface]
PrivateKey = {encode_key(bytes(range(1, 33)))}
Address = 10.99.0.7/24

[Peer]
PublicKey = {encode_key(HUB)}
Endpoint = hub.example.net:51820
AllowedIPs = 10.99.0.0/24
"""
A, B, C = "192.0.2.1:51820", "192.0.2.2:51820", "192.0.2.3:51820"
V6 = "[2001:db8::1]:51820"


@pytest.mark.parametrize(
    "current, answer, previous, stale, expected",
    [
        (A, (A,), {A}, False, None),  # nothing changed
        (A, (A,), {A}, True, None),  # silent, but the name still says A: nothing a lookup can mend
        (A, (B,), {A}, False, B),  # the name moved while the tunnel still works: follow it now
        (A, (B,), {A}, True, B),
        (A, (B, A), {A, B}, False, None),  # round-robin: the order turned, A is still one of the name's
        (A, (B, C), {A, B}, False, B),  # A left the name's answer
        (A, (B, A), {A}, True, None),  # a silent peer is not flipped to another of the name's addresses either
        (C, (A,), {A}, False, None),  # the hub roamed us to an address of its own, the answer unchanged: keep it
        (C, (A,), {A}, True, A),  # ... until that address falls silent
        (C, (A,), None, False, A),  # no answer before this one (the name did not resolve at the start)
        (None, (A, B), {A}, False, A),  # the peer has no endpoint yet
        (A, (), {A}, True, None),  # the name does not resolve now: keep the address we have
        (None, (), None, True, None),
        ("[2001:db8:0::1]:51820", (V6,), {V6}, False, None),  # an IPv6 address written another way is the same
        ("[2001:db8::2]:51820", (V6,), {"[2001:db8::2]:51820"}, False, V6),
    ],
)
def test_choose_endpoint(current, answer, previous, stale, expected):
    assert choose_endpoint(current, answer, frozenset(previous) if previous else None, stale) == expected


@pytest.mark.parametrize(
    "lookups, now, stale, expected",
    [
        (Lookups(frozenset({A}), 130.0), 129.0, False, False),  # not yet
        (Lookups(frozenset({A}), 130.0), 130.0, False, True),  # its time
        (Lookups(frozenset({A}), 130.0), 110.0, True, True),  # silent: at every check
        (Lookups(None, 400.0, failures=2), 110.0, True, False),  # silent, but the name fails: as back-off allows
        (Lookups(None, 400.0, failures=2), 400.0, True, True),
    ],
)
def test_is_lookup_due(lookups, now, stale, expected):
    assert is_lookup_due(lookups, now, stale) is expected


def test_after_lookup_backs_off_while_the_name_fails_and_resets_when_it_resolves():
    lookups, waits = Lookups(frozenset({A}), 0.0), []
    for _ in range(6):
        lookups = after_lookup(lookups, (), 1000.0)
        waits.append(lookups.next_at - 1000.0)
    assert waits == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0]
    assert lookups.answer == frozenset({A})  # a failure forgets nothing it knew
    assert after_lookup(lookups, (B, A), 1000.0) == Lookups(frozenset({A, B}), 1030.0, 0)
    assert after_lookup(Lookups(None, 0.0), (A,), 5.0, period=2.0).next_at == 7.0


class FakeDevice:
    """wireguard-go's UAPI socket, as far as the keep-up loop asks it: a peer with a handshake and an endpoint."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.endpoint: str | None = None
        self.handshake_age = 5.0
        self.sets: list[str] = []

    async def ask(self, request: str) -> str:
        if request.startswith("get"):
            end = f"endpoint={self.endpoint}\n" if self.endpoint else ""
            since = int(self.clock.now() - self.handshake_age)
            return f"public_key={HUB.hex()}\n{end}last_handshake_time_sec={since}\nerrno=0\n\n"
        self.sets.append(request)
        if found := re.search(r"^endpoint=(.*)$", request, re.M):
            self.endpoint = found[1]
        return "errno=0\n\n"


def _tunnel(clock: FakeClock, answers: list[tuple[str, ...]]) -> tuple[Tunnel, FakeDevice, list[float]]:
    device, asked = FakeDevice(clock), []

    async def resolver(endpoint):
        asked.append(clock.monotonic())
        return answers[0]

    tunnel = Tunnel(parse_config(CONFIG, "f"), clock, interface="wgtest", resolver=resolver)
    tunnel._ask = device.ask  # the lowest boundary: the socket
    return tunnel, device, asked


def test_a_hub_whose_name_moves_is_followed_while_the_tunnel_still_works():
    """The name is looked up every RESOLVE_PERIOD, not only once the peer has been silent for STALE_AFTER: the
    hub's new address is set within a period of the change, and a round-robin answer's order moves nothing."""
    clock = FakeClock()
    answers = [(A,)]
    tunnel, device, asked = _tunnel(clock, answers)

    async def checks(n: int) -> None:
        for _ in range(n):
            clock.advance(10.0)
            await tunnel.check()

    async def scenario() -> None:
        await tunnel.configure()
        assert device.endpoint == A and len(asked) == 1
        await checks(3)  # 30 s: one more lookup, the same answer
        assert len(asked) == 2 and len(device.sets) == 1
        answers[0] = (B,)  # the hub moved; its handshakes are still fresh
        await checks(3)
        assert device.endpoint == B and tunnel.reconnects["endpoint"] == 1
        assert device.sets[-1] == f"set=1\npublic_key={HUB.hex()}\nupdate_only=true\nendpoint={B}\n\n"
        answers[0] = (C, B)  # a second address, listed first
        await checks(6)
        assert device.endpoint == B and tunnel.reconnects["endpoint"] == 1

    asyncio.run(scenario())
    assert [t - asked[0] for t in asked] == [0.0, 30.0, 60.0, 90.0, 120.0]


def test_a_name_that_stops_resolving_is_asked_less_often_and_the_address_kept():
    clock = FakeClock()
    answers: list[tuple[str, ...]] = [(A,)]
    tunnel, device, asked = _tunnel(clock, answers)

    async def scenario() -> None:
        await tunnel.configure()
        answers[0] = ()
        device.handshake_age = names.RESOLVE_CAP + 1000  # silent too: without the failures, every check would ask
        for _ in range(100):  # 1000 s
            clock.advance(10.0)
            await tunnel.check()

    asyncio.run(scenario())
    assert [round(b - a) for a, b in zip(asked, asked[1:], strict=False)] == [10, 30, 60, 120, 240, 300]
    assert device.endpoint == A and tunnel.reconnects["endpoint"] == 0


def test_an_adopted_peer_keeps_its_address_when_it_is_still_one_of_the_names():
    """An agent that restarts configures the device again: a peer at one of a round-robin name's addresses stays
    there (its session with that hub goes on); one at an address the name no longer gives is moved."""
    for had, answer, expected in ((B, (A, B), B), (C, (A, B), A), (None, (A, B), A)):
        tunnel, device, _ = _tunnel(FakeClock(), [answer])
        asyncio.run(tunnel.configure(frozenset({HUB}), {HUB: had}))
        assert device.endpoint == expected, (had, answer)


def test_resolve_gives_every_address_once_ipv4_first_and_nothing_for_a_lookup_that_fails_or_hangs(monkeypatch):
    """The lookup itself, with the loop's getaddrinfo (the lowest boundary) answering as glibc would."""
    loop_answers: list = []

    async def getaddrinfo(host, port, type=0):
        answer = loop_answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if answer == "hang":
            await asyncio.Event().wait()
        return answer

    v6 = (socket.AF_INET6, socket.SOCK_DGRAM, 17, "", ("2001:db8::1", 51820, 0, 0))
    v4 = [(socket.AF_INET, socket.SOCK_DGRAM, 17, "", (ip, 51820)) for ip in ("192.0.2.1", "192.0.2.2", "192.0.2.1")]
    loop_answers += [[v6, *v4], socket.gaierror(-2, "Name or service not known"), "hang"]
    hub = Endpoint("hub.example.net", 51820)

    async def scenario():
        monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)
        return [await names.resolve(hub, timeout=0.05) for _ in range(3)]

    assert asyncio.run(scenario()) == [(A, B, V6), (), ()]
    assert asyncio.run(names.resolve(Endpoint("192.0.2.9", 51820))) == ("192.0.2.9:51820",)  # no lookup at all
