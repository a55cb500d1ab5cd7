"""The kernel WireGuard backend: its generic netlink messages against bytes built by hand from the kernel's headers,
the family lookup against the real kernel, the backend choice, and a Tunnel kept up over netlink at its lowest
boundary (this machine has no wireguard module, so no kernel link is made here)."""

from __future__ import annotations

import asyncio
import struct
import sys

import pytest

from edgelet.tunnel import backend, netlink
from edgelet.tunnel.config import parse_config
from edgelet.tunnel.device import Tunnel
from edgelet.tunnel.errors import DeviceError
from edgelet.tunnel.uapi import DeviceState, PeerState
from edgelet.util.clock import FakeClock
from tests.unit.test_tunnel import GOOD, KEY

# netlink headers are in the host's byte order; the hand-built bytes below are little-endian (x86, arm64).
pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="the hand-built bytes are little-endian")

FAMILY = 0x15
HUB = bytes(range(32))


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


@pytest.mark.parametrize(
    "encoded, expected",
    [
        (netlink.u8(3, 24), h("0500 0300 18 000000")),  # padded to 4
        (netlink.u16(1, 2), h("0600 0100 0200 0000")),
        (netlink.u32(5, 1), h("0800 0500 01000000")),
        (netlink.string(2, "wg0"), h("0800 0200 77673000")),  # NUL-terminated
        (netlink.attr(1, b""), h("0400 0100")),
        (netlink.nested(9, [netlink.u8(3, 24)]), h("0c00 0980 0500030018000000")),  # NLA_F_NESTED
        (netlink.sockaddr("192.0.2.1:51820"), h("0200 ca6c c0000201 0000000000000000")),  # sockaddr_in, port BE
        (
            netlink.sockaddr("[2001:db8::1]:51820"),
            h("0a00 ca6c 00000000 20010db8000000000000000000000001 00000000"),  # sockaddr_in6
        ),
    ],
)
def test_attributes_follow_the_kernel_layout(encoded, expected):
    assert encoded == expected


@pytest.mark.parametrize("endpoint", ["192.0.2.1:51820", "[2001:db8::1]:51820"])
def test_sockaddr_round_trip(endpoint):
    assert netlink.parse_sockaddr(netlink.sockaddr(endpoint)) == endpoint


def test_getfamily_request():
    assert netlink.getfamily_request("nlctrl", 7) == h(
        "20000000 1000 0500 07000000 00000000"  # nlmsghdr: 32 bytes, GENL_ID_CTRL, REQUEST|ACK, seq 7, port 0
        "03 01 0000"  # genlmsghdr: CTRL_CMD_GETFAMILY, version 1
        "0b00 0200 6e6c6374726c00 00"  # CTRL_ATTR_FAMILY_NAME "nlctrl\0", padded
    )


def test_endpoint_request():
    assert (
        netlink.endpoint_request(FAMILY, 9, "wg0", HUB, "192.0.2.1:51820")
        == h(
            "64000000 1500 0500 09000000 00000000"  # 100 bytes, the family, REQUEST|ACK, seq 9
            "01 01 0000"  # WG_CMD_SET_DEVICE, WG_GENL_VERSION
            "0800 0200 77673000"  # WGDEVICE_A_IFNAME "wg0"
            "4800 0880"  # WGDEVICE_A_PEERS, nested, 72 bytes
            "4400 0080"  # peer 0, nested, 68 bytes
            "2400 0100" + HUB.hex() + "0800 0300 04000000"  # WGPEER_A_PUBLIC_KEY; WGPEER_A_FLAGS UPDATE_ONLY
            "1400 0400 0200ca6cc0000201 0000000000000000"  # WGPEER_A_ENDPOINT sockaddr_in
        )
    )


def test_set_device_makes_the_whole_config():
    """A new device: REPLACE_PEERS, and each peer with REPLACE_ALLOWEDIPS, its endpoint, keepalive and networks."""
    cfg = parse_config(GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {KEY}"), "f")
    request = netlink.set_device_request(FAMILY, 4, "wg0", cfg, {HUB: "192.0.2.1:51820"})
    (msg,) = netlink.parse_messages(request)
    assert (msg.type, msg.flags, msg.seq, msg.payload[:2]) == (FAMILY, 5, 4, b"\x01\x01")
    attrs = netlink.genl_attrs(msg.payload)
    assert [k for k, _ in attrs] == [2, 3, 6, 5, 8]
    assert attrs[1][1] == bytes(range(1, 33)) and attrs[2][1] == struct.pack("<H", 51821)
    assert attrs[3][1] == struct.pack("<I", netlink.WGDEVICE_F_REPLACE_PEERS)
    ((_, peer),) = netlink.parse_attrs(attrs[4][1])
    fields = netlink.parse_attrs(peer)
    assert [k for k, _ in fields] == [1, 3, 4, 5, 9]
    assert fields[1][1] == struct.pack("<I", netlink.WGPEER_F_REPLACE_ALLOWEDIPS)
    assert netlink.parse_sockaddr(fields[2][1]) == "192.0.2.1:51820" and fields[3][1] == struct.pack("<H", 25)
    ips = [dict(netlink.parse_attrs(ip)) for _, ip in netlink.parse_attrs(fields[4][1])]
    assert ips == [
        {1: struct.pack("<H", 2), 2: bytes([10, 99, 0, 0]), 3: bytes([24])},
        {1: struct.pack("<H", 2), 2: bytes([192, 168, 50, 0]), 3: bytes([24])},
    ]
    # An adopted device: no REPLACE_PEERS; a peer the config dropped is removed, the others updated in place.
    gone = b"\x07" * 32
    (msg,) = netlink.parse_messages(netlink.set_device_request(FAMILY, 5, "wg0", cfg, {}, frozenset({gone, HUB})))
    attrs = netlink.genl_attrs(msg.payload)
    assert [k for k, _ in attrs] == [2, 3, 6, 8]
    first, second = (dict(netlink.parse_attrs(p)) for _, p in netlink.parse_attrs(attrs[3][1]))
    assert first == {1: gone, 3: struct.pack("<I", netlink.WGPEER_F_REMOVE_ME)}
    assert second[1] == HUB and 4 not in second  # no endpoint resolved yet: none set


def _peer(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return struct.pack("<HH", 4 + len(body), 0x8000) + body


def _a(kind: int, payload: bytes) -> bytes:
    pad = (-len(payload)) % 4
    return struct.pack("<HH", 4 + len(payload), kind) + payload + b"\0" * pad


def _dump(seq: int, *attrs: bytes) -> bytes:
    body = b"\x00\x01\x00\x00" + b"".join(attrs)
    return struct.pack("<IHHII", 16 + len(body), FAMILY, netlink.NLM_F_MULTI, seq, 1234) + body


def test_get_device_dump_is_read_across_messages():
    """A peer cut short in one message carries on in the next under the same key; DONE ends the dump."""
    other = b"\x09" * 32
    first = _dump(
        3,
        _a(6, struct.pack("<H", 51821)),
        _a(
            0x8008,
            _peer(
                _a(1, HUB),
                _a(4, h("0200 ca6c c0000201 0000000000000000")),
                _a(6, struct.pack("<qq", 1700000000, 500000000)),
                _a(7, struct.pack("<Q", 10)),
                _a(8, struct.pack("<Q", 20)),
            ),
        ),
    )
    second = _dump(3, _a(0x8008, _peer(_a(1, HUB), _a(0x8009, b"")) + _peer(_a(1, other))))
    done = struct.pack("<IHHIIi", 20, netlink.NLMSG_DONE, netlink.NLM_F_MULTI, 3, 1234, 0)
    messages = netlink.parse_messages(first + second + done)
    assert [m.type for m in messages] == [FAMILY, FAMILY, netlink.NLMSG_DONE]
    assert netlink.error_code(messages[2]) == 0
    assert netlink.parse_device(messages, FAMILY) == DeviceState(
        51821,
        (
            PeerState(HUB, "192.0.2.1:51820", 1700000000.5, rx_bytes=10, tx_bytes=20),
            PeerState(other, None, None, rx_bytes=0, tx_bytes=0),
        ),
    )


def test_errors_and_malformed_messages():
    error = struct.pack("<IHHIIi", 36, netlink.NLMSG_ERROR, 0, 1, 0, -19) + b"\0" * 16  # -ENODEV, the request's hdr
    (msg,) = netlink.parse_messages(error)
    assert netlink.error_code(msg) == 19
    with pytest.raises(ValueError, match="length 64"):
        netlink.parse_messages(struct.pack("<IHHII", 64, FAMILY, 0, 1, 0))
    with pytest.raises(ValueError, match="attribute of length 2"):
        netlink.parse_attrs(h("0200 0100"))


# A CTRL_CMD_GETFAMILY reply for "acpi_event", captured from this machine's kernel (family id 0x1a here).
CAPTURED_CTRL_REPLY = h(
    "680000001000000007000000c24e0000010200000f000200616370695f6576656e740000060001001a000000"
    "080003000100000008000400000000000800050001000000240007002000010008000200070000001200010061"
    "6370695f6d635f67726f7570000000"
)


def test_a_real_family_reply_is_read():
    messages = netlink.parse_messages(CAPTURED_CTRL_REPLY)
    assert [(m.type, m.seq) for m in messages] == [(netlink.GENL_ID_CTRL, 7)]
    assert netlink.parse_family(messages) == 0x1A
    with pytest.raises(ValueError, match="no family id"):
        netlink.parse_family([])


def test_family_lookup_against_the_real_kernel():
    """A real NETLINK_GENERIC transaction: the controller names itself; an unknown family is None, not an error."""
    assert asyncio.run(netlink.resolve_family("nlctrl")) == netlink.GENL_ID_CTRL
    assert asyncio.run(netlink.resolve_family("edgelet-none")) is None


@pytest.mark.parametrize(
    "kernel_family, wireguard_go_found, wanted, expected",
    [
        (True, True, backend.AUTO, backend.KERNEL),  # the kernel's wins: no daemon, no userspace copy
        (True, False, backend.AUTO, backend.KERNEL),
        (False, True, backend.AUTO, backend.WIREGUARD_GO),
        (False, False, backend.AUTO, backend.KERNEL),  # `ip link add` names what is missing
        (True, True, backend.WIREGUARD_GO, backend.WIREGUARD_GO),  # the wireguard_backend setting, as it is
        (False, True, backend.KERNEL, backend.KERNEL),
    ],
)
def test_backend_choice(kernel_family, wireguard_go_found, wanted, expected):
    assert backend.choose(kernel_family, wireguard_go_found, wanted) == expected


class FakeKernel:
    """The lowest boundary of the kernel backend: the netlink socket, answering as WireGuard's family does."""

    def __init__(self, device: bool, handshake: int = 0) -> None:
        self.device = device
        self.handshake = handshake
        self.requests: list[netlink.Message] = []

    async def transact(self, request: bytes, interface: str) -> list[netlink.Message]:
        (msg,) = netlink.parse_messages(request)
        self.requests.append(msg)
        cmd = msg.payload[0]
        if not self.device:
            raise DeviceError(interface, "netlink WG_CMD_GET_DEVICE failed: [Errno 19] No such device")
        if cmd == netlink.WG_CMD_GET_DEVICE:
            peer = _peer(_a(1, HUB), _a(6, struct.pack("<qq", self.handshake, 0)))
            return netlink.parse_messages(_dump(msg.seq, _a(0x8008, peer)))
        return []


def _kernel_tunnel(fake: FakeKernel, ran: list[list[str]], **kw):
    cfg = parse_config(GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {KEY}"), "f")

    async def runner(argv):
        ran.append(list(argv))
        if argv[:3] == ["ip", "link", "add"]:
            fake.device = True

    async def probe():
        return FAMILY

    addresses = kw.pop("addresses")

    async def resolver(endpoint):
        return (next(addresses),)

    return Tunnel(
        cfg,
        kw.pop("clock", FakeClock()),
        interface="wgtest",
        socket_dir=kw.pop("socket_dir"),
        runner=runner,
        resolver=resolver,
        kernel_probe=kw.pop("probe", probe),
        netlink_transact=fake.transact,
        **kw,
    )


def _commands(fake: FakeKernel) -> list[tuple[int, int]]:
    return [(m.payload[0], m.flags) for m in fake.requests]


GET, SET = (netlink.WG_CMD_GET_DEVICE, netlink.NLM_F_REQUEST | netlink.NLM_F_DUMP), (netlink.WG_CMD_SET_DEVICE, 5)


def test_a_new_kernel_device_is_made_and_configured_over_netlink(tmp_path):
    fake = FakeKernel(device=False)
    ran: list[list[str]] = []
    tunnel = _kernel_tunnel(fake, ran, socket_dir=str(tmp_path), addresses=iter(["192.0.2.1:51820"]))
    assert asyncio.run(tunnel.up()) is False
    assert tunnel.backend.kind == backend.KERNEL
    assert ran[0] == ["ip", "link", "add", "dev", "wgtest", "type", "wireguard"]
    assert ran[1:] == [
        ["ip", "address", "replace", "10.99.0.7/24", "dev", "wgtest"],
        ["ip", "link", "set", "dev", "wgtest", "up"],
        ["ip", "route", "replace", "192.168.50.0/24", "dev", "wgtest"],
    ]
    assert _commands(fake) == [GET, SET, GET]  # is one there; the whole config; the state for the metrics
    flags = dict(netlink.genl_attrs(fake.requests[1].payload))[netlink.WGDEVICE_A_FLAGS]
    assert flags == struct.pack("<I", netlink.WGDEVICE_F_REPLACE_PEERS)
    assert tunnel.status.up and tunnel.state_seen is not None and tunnel.state_seen.peers[0].public_key == HUB


def test_a_running_kernel_device_is_adopted_and_its_silent_peer_moved(tmp_path):
    """A restarted agent: the link answers, so nothing is made; the peers kept are updated in place; a peer silent
    past the bound has its name resolved again and only its endpoint set (UPDATE_ONLY)."""
    fake = FakeKernel(device=True, handshake=1700000000)
    ran: list[list[str]] = []
    clock = FakeClock(start=1700000000.0 + 3600)
    addresses = iter(["192.0.2.1:51820", "192.0.2.2:51820"])
    tunnel = _kernel_tunnel(fake, ran, socket_dir=str(tmp_path), addresses=addresses, clock=clock)
    assert asyncio.run(tunnel.up()) is True
    assert tunnel.backend.kind == backend.KERNEL and all(argv[:3] != ["ip", "link", "add"] for argv in ran)
    assert _commands(fake) == [GET, GET, SET, GET]
    assert netlink.WGDEVICE_A_FLAGS not in dict(netlink.genl_attrs(fake.requests[2].payload))  # peers kept
    asyncio.run(tunnel.check())
    assert _commands(fake)[-2:] == [GET, SET]
    (peer,) = netlink.parse_attrs(dict(netlink.genl_attrs(fake.requests[-1].payload))[netlink.WGDEVICE_A_PEERS])
    fields = dict(netlink.parse_attrs(peer[1]))
    assert fields[netlink.WGPEER_A_FLAGS] == struct.pack("<I", netlink.WGPEER_F_UPDATE_ONLY)
    assert netlink.parse_sockaddr(fields[netlink.WGPEER_A_ENDPOINT]) == "192.0.2.2:51820"
    assert tunnel.reconnects["endpoint"] == 1 and tunnel.status.last_handshake == 1700000000.0


def test_without_the_module_nor_wireguard_go_the_kernel_is_asked_and_its_refusal_shown(tmp_path):
    fake = FakeKernel(device=False)
    ran: list[list[str]] = []

    async def no_family():
        return None

    cfg = parse_config(GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {KEY}"), "f")

    async def runner(argv):
        ran.append(list(argv))
        raise DeviceError("", f"{' '.join(argv)} failed (2): Error: Unknown device type.")

    tunnel = Tunnel(
        cfg,
        FakeClock(),
        interface="wgtest",
        socket_dir=str(tmp_path),
        runner=runner,
        wireguard_go=str(tmp_path / "no-wireguard-go"),
        kernel_probe=no_family,
        netlink_transact=fake.transact,
    )
    with pytest.raises(DeviceError, match="Unknown device type"):
        asyncio.run(tunnel.up())
    assert ran == [["ip", "link", "add", "dev", "wgtest", "type", "wireguard"]]
    assert fake.requests == []  # no family: the kernel backend is not asked whether a device runs


def test_the_setting_makes_a_new_device_with_wireguard_go_where_the_kernel_has_wireguard(tmp_path):
    fake = FakeKernel(device=False)
    ran: list[list[str]] = []
    tunnel = _kernel_tunnel(
        fake, ran, socket_dir=str(tmp_path), addresses=iter(["192.0.2.1:51820"]), kind=backend.WIREGUARD_GO
    )
    asked: list[str] = []

    async def ask(request):
        if not any(argv[0] == "wireguard-go" for argv in ran):
            raise DeviceError("wgtest", "no socket")
        asked.append(request)
        return "errno=0\n\n"

    tunnel._ask = ask
    assert asyncio.run(tunnel.up()) is False
    assert tunnel.backend.kind == backend.WIREGUARD_GO
    assert ran[0] == ["wireguard-go", "wgtest"]
    assert fake.requests[1:] == []  # the kernel asked only whether it runs such a device
    assert asked[0].startswith("set=1\n")


def test_a_running_wireguard_go_is_adopted_as_such_where_the_kernel_has_wireguard(tmp_path):
    """The module loaded after the device was made: a restarted agent keeps the wireguard-go device it finds."""
    fake = FakeKernel(device=False)
    ran: list[list[str]] = []
    tunnel = _kernel_tunnel(fake, ran, socket_dir=str(tmp_path), addresses=iter(["192.0.2.1:51820"] * 2))
    asked: list[str] = []

    async def ask(request):
        asked.append(request)
        return "errno=0\n\n"

    tunnel._ask = ask  # wireguard-go's lowest boundary: its socket answers
    assert asyncio.run(tunnel.up()) is True
    assert tunnel.backend.kind == backend.WIREGUARD_GO
    assert fake.requests == []  # the kernel is not asked to configure a device it does not run
    assert [argv[:3] for argv in ran] == [
        ["ip", "address", "replace"],
        ["ip", "link", "set"],
        ["ip", "route", "replace"],
    ]
    assert asked[0] == "get=1\n\n" and asked[2].startswith("set=1\n")
