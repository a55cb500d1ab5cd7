"""The tunnel's pure parts: wg-quick parsing (errors name file:line), the key file, UAPI requests and answers."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import os
import shutil
import subprocess
import sys

import pytest

from edgelet.trust import crypto
from edgelet.tunnel import keys, uapi
from edgelet.tunnel.config import DEFAULT_KEEPALIVE, Endpoint, encode_key, parse_config, parse_endpoint, peer_block
from edgelet.tunnel.device import Status, Tunnel, interface_name, ip_commands, on_tunnel, readiness
from edgelet.tunnel.errors import DeviceError, TunnelConfigError
from edgelet.util.clock import FakeClock

HUB = encode_key(bytes(range(32)))
KEY = encode_key(bytes(range(1, 33)))

GOOD = f"""# the device
[Interface]
Address = 10.99.0.7/24
ListenPort = 51821

[Peer]
PublicKey = {HUB}
Endpoint = hub.example.net:51820
AllowedIPs = 10.99.0.0/24, 192.168.50.0/24
"""


def test_a_good_config():
    cfg = parse_config(GOOD, "/etc/edgelet/wireguard.conf")
    assert cfg.private_key is None
    assert cfg.addresses == (ipaddress.ip_interface("10.99.0.7/24"),)
    assert cfg.listen_port == 51821
    (peer,) = cfg.peers
    assert peer.public_key == bytes(range(32))
    assert peer.endpoint == Endpoint("hub.example.net", 51820) and peer.endpoint.is_name
    assert peer.allowed_ips == (ipaddress.ip_network("10.99.0.0/24"), ipaddress.ip_network("192.168.50.0/24"))
    assert peer.persistent_keepalive == DEFAULT_KEEPALIVE == 25


@pytest.mark.parametrize(
    "text, where, reason",
    [
        (GOOD.replace(f"PublicKey = {HUB}", "PublicKey = no!pe"), ":7", "PublicKey: not base64"),
        (GOOD.replace(f"PublicKey = {HUB}", "PublicKey = AAAA"), ":7", "a key is 32 bytes, this is 3"),
        (GOOD.replace("Address = 10.99.0.7/24", "Address = 10.99.0.300/24"), ":3", "10.99.0.300/24"),
        (GOOD.replace("hub.example.net:51820", "hub.example.net"), ":8", "Endpoint: an endpoint is host:port"),
        (GOOD.replace("hub.example.net:51820", "hub.example.net:70000"), ":8", "port '70000' is not 1-65535"),
        (GOOD.replace("hub.example.net:51820", "hub_1:51820"), ":8", "neither an IP address nor a DNS name"),
        (GOOD.replace("hub.example.net:51820", "fd00::1:51820"), ":8", "[address]:port"),
        (GOOD.replace("AllowedIPs = 10.99.0.0/24", "AllowedIPs = 10.99.0.0/40"), ":9", "10.99.0.0/40"),
        (GOOD + "PersistentKeepalive = soon\n", ":10", "interval 'soon' is not 0-65535"),
        (GOOD + "PostUp = iptables -F\n", ":10", "PostUp is not supported: edgelet runs no shell hooks"),
        (GOOD + "Colour = blue\n", ":10", "unknown [Peer] key Colour"),
        (GOOD.replace("ListenPort = 51821", "ListenPort = 51821\nListenPort = 1"), ":5", "ListenPort given twice"),
        (GOOD.replace("[Peer]", "[Hub]"), ":6", "unknown section [Hub]"),
        ("Address = 10.0.0.1/32\n", ":1", "a key before any [Interface] or [Peer] section"),
        (GOOD.replace("Address = 10.99.0.7/24\n", ""), "", "[Interface] has no Address"),
        (GOOD.split("[Peer]")[0], "", "no [Peer] section"),
        (GOOD.replace("Endpoint = hub.example.net:51820\n", ""), "", "a [Peer] has no Endpoint (the device dials out"),
        (GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {HUB}"), ":3", "PrivateKey is a peer's PublicKey"),
    ],
)
def test_a_bad_config_names_file_line_and_reason(text, where, reason):
    with pytest.raises(TunnelConfigError) as err:
        parse_config(text, "/etc/edgelet/wireguard.conf")
    assert str(err.value).startswith(f"WireGuard config /etc/edgelet/wireguard.conf{where}: ")
    assert reason in str(err.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("192.0.2.1:51820", Endpoint("192.0.2.1", 51820)),
        ("[2001:db8::1]:51820", Endpoint("2001:db8::1", 51820)),
        ("hub:1", Endpoint("hub", 1)),
    ],
)
def test_endpoints(text, expected):
    assert parse_endpoint(text) == expected
    assert str(expected) == text
    assert not expected.is_name or expected.host == "hub"


def test_keepalive_off_and_a_preshared_key():
    cfg = parse_config(GOOD + f"PersistentKeepalive = off\nPresharedKey = {KEY}\n", "f")
    assert cfg.peers[0].persistent_keepalive == 0
    assert cfg.peers[0].preshared_key == bytes(range(1, 33))


def test_the_public_key_is_derived_as_wg_does(tmp_path):
    private = crypto.x25519_generate()
    public = crypto.x25519_public(private)
    if shutil.which("wg"):
        out = subprocess.run(["wg", "pubkey"], input=encode_key(private), capture_output=True, text=True, check=True)
        assert out.stdout.strip() == encode_key(public)
    assert len(private) == len(public) == 32 and private != public


def write(path, text, mode=0o600):
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_key_is_generated_once_and_kept(tmp_path):
    conf = write(tmp_path / "wg.conf", GOOD)
    root = tmp_path / "root"
    assert keys.load(conf, root, create=False) is None  # `edgelet check` generates nothing
    first = keys.load(conf, root)
    assert first is not None and first.generated
    key_file = root / keys.KEY_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert (root / "tunnel").stat().st_mode & 0o777 == 0o700
    again = keys.load(conf, root)
    assert again is not None and again.public_key == first.public_key
    assert again.config.private_key == base64.b64decode(key_file.read_text())


def test_the_files_key_wins(tmp_path):
    private = crypto.x25519_generate()
    conf = write(tmp_path / "wg.conf", GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {encode_key(private)}"))
    loaded = keys.load(conf, tmp_path / "root")
    assert loaded is not None and not loaded.generated
    assert loaded.public_key == crypto.x25519_public(private)
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o602])
def test_a_config_others_may_read_or_write_is_refused(tmp_path, mode):
    conf = write(tmp_path / "wg.conf", GOOD, mode)
    with pytest.raises(TunnelConfigError, match=f"wg.conf: mode {mode:04o} lets other users read it"):
        keys.load(conf, tmp_path / "root")


def test_a_config_in_a_world_writable_directory_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    conf = write(shared / "wg.conf", GOOD)
    shared.chmod(0o777)
    with pytest.raises(TunnelConfigError, match="world-writable"):
        keys.load(conf, tmp_path / "root")


def test_a_kept_key_others_may_read_is_refused(tmp_path):
    conf = write(tmp_path / "wg.conf", GOOD)
    keys.load(conf, tmp_path / "root")
    (tmp_path / "root" / keys.KEY_FILE).chmod(0o644)
    with pytest.raises(TunnelConfigError, match="private.key: mode 0644"):
        keys.load(conf, tmp_path / "root")


def test_peer_block_is_what_the_hub_adds():
    cfg = parse_config(GOOD, "/etc/edgelet/wireguard.conf")
    assert peer_block(bytes(range(32)), cfg, "pi-7") == (
        f"[Peer]\n# node pi-7\nPublicKey = {HUB}\nAllowedIPs = 10.99.0.7/32\n"
    )


def test_set_request():
    cfg = parse_config(GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {KEY}"), "f")
    text = uapi.set_request(cfg, {bytes(range(32)): "192.0.2.9:51820"})
    assert text == (
        f"set=1\nprivate_key={bytes(range(1, 33)).hex()}\nlisten_port=51821\nreplace_peers=true\n"
        f"public_key={bytes(range(32)).hex()}\nendpoint=192.0.2.9:51820\npersistent_keepalive_interval=25\n"
        "replace_allowed_ips=true\nallowed_ip=10.99.0.0/24\nallowed_ip=192.168.50.0/24\n\n"
    )
    assert "endpoint=" not in uapi.set_request(cfg, {})  # a name that does not resolve yet: no endpoint
    # An adopted device: the peers the config keeps are updated in place (their sessions survive), others go.
    adopted = uapi.set_request(cfg, {}, frozenset({bytes(range(32)), b"\x07" * 32}))
    assert "replace_peers" not in adopted
    assert f"public_key={'07' * 32}\nremove=true\npublic_key={bytes(range(32)).hex()}\n" in adopted


def test_parse_get():
    answer = (
        f"private_key={'11' * 32}\nlisten_port=51821\npublic_key={'22' * 32}\nendpoint=192.0.2.9:51820\n"
        "last_handshake_time_sec=1700000000\nlast_handshake_time_nsec=500000000\nrx_bytes=10\ntx_bytes=20\n"
        "allowed_ip=10.99.0.0/24\nallowed_ip=192.168.50.0/24\n"
        f"public_key={'33' * 32}\nlast_handshake_time_sec=0\nlast_handshake_time_nsec=0\nerrno=0\n\n"
    )
    state = uapi.parse_get(answer)
    assert state.listen_port == 51821
    first, second = state.peers
    assert (first.public_key, first.endpoint, first.last_handshake, first.rx_bytes, first.tx_bytes) == (
        b"\x22" * 32,
        "192.0.2.9:51820",
        1700000000.5,
        10,
        20,
    )
    assert second.last_handshake is None and second.endpoint is None
    with pytest.raises(ValueError, match="errno=22"):
        uapi.parse_answer("errno=22\n\n")


def test_ip_commands_route_only_the_allowed_ips():
    cfg = parse_config(GOOD.replace("10.99.0.0/24, 192.168.50.0/24", "10.99.0.0/24, 192.168.50.0/24, 0.0.0.0/0"), "f")
    assert ip_commands("wg0", cfg) == [
        ["ip", "address", "replace", "10.99.0.7/24", "dev", "wg0"],
        ["ip", "link", "set", "dev", "wg0", "up"],
        ["ip", "route", "replace", "192.168.50.0/24", "dev", "wg0"],  # 10.99.0.0/24 is on the link already
    ]


def test_a_silent_peer_s_name_is_resolved_again(tmp_path):
    """keep_up's check: a handshake older than STALE_AFTER and a name now resolving elsewhere moves the endpoint."""
    cfg = parse_config(GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {KEY}"), "f")
    clock = FakeClock(start=1700000000.0 + 3600)
    asked: list[str] = []
    addresses = iter(["192.0.2.1:51820", "192.0.2.2:51820"])

    async def resolver(endpoint):
        return (next(addresses),)

    async def scenario():
        tunnel = Tunnel(cfg, clock, interface="wgtest", socket_dir=str(tmp_path), resolver=resolver)

        async def ask(request):
            asked.append(request)
            return (
                f"public_key={bytes(range(32)).hex()}\nlast_handshake_time_sec=1700000000\nerrno=0\n\n"
                if request.startswith("get")
                else "errno=0\n\n"
            )

        tunnel._ask = ask  # the lowest boundary: the socket
        await tunnel.configure()
        await tunnel.check()
        return tunnel

    tunnel = asyncio.run(scenario())
    assert "endpoint=192.0.2.1:51820" in asked[0]
    assert asked[-1] == f"set=1\npublic_key={bytes(range(32)).hex()}\nupdate_only=true\nendpoint=192.0.2.2:51820\n\n"
    assert tunnel.status.up and tunnel.status.last_handshake == 1700000000.0


def test_interface_names_fit_the_kernel():
    cfg = parse_config(GOOD, "f")
    with pytest.raises(DeviceError, match="1-15 letters"):
        Tunnel(cfg, FakeClock(), interface="a-much-too-long-name")
    assert Tunnel(parse_config(GOOD, "/etc/edgelet/wg0.conf"), FakeClock()).interface == "wg0"
    assert interface_name("/etc/edgelet/wireguard.conf") == "wireguard"
    with pytest.raises(DeviceError, match="named after the file /etc/edgelet/my tunnel.conf"):
        interface_name("/etc/edgelet/my tunnel.conf")
    assert os.path.basename(uapi.socket_path("wg0")) == "wg0.sock"


# --- the command line: `edgelet check --wireguard-config` and `edgelet tunnel peer-line` ------------------------


def cli(*argv):
    import io

    from edgelet.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_check_reads_the_config_as_the_agent_does(tmp_path):
    from edgelet.cli.check import tunnel_status

    conf = write(tmp_path / "wg.conf", GOOD)
    verdict, detail = tunnel_status(conf, tmp_path / "root")
    assert verdict == "OK" and "no PrivateKey; the agent generates one at first start" in detail
    assert not (tmp_path / "root").exists()  # checking writes nothing
    loaded = keys.load(conf, tmp_path / "root")
    assert tunnel_status(conf, tmp_path / "root") == (
        "OK",
        f"{conf}: interface wg, address 10.99.0.7/24, hub hub.example.net:51820, public key {encode_key(loaded.public_key)}",
    )
    write(conf, GOOD.replace("hub.example.net:51820", "hub.example.net:0"))
    assert tunnel_status(conf, tmp_path / "root") == (
        "FAIL",
        f"WireGuard config {conf}:8: Endpoint: port '0' is not 1-65535",
    )


def test_check_command_names_the_bad_line(tmp_path):
    conf = write(tmp_path / "wg.conf", GOOD.replace("Address = 10.99.0.7/24", "Address = ten"))
    code, out, _ = cli("check", "--root-dir", str(tmp_path / "root"), "--wireguard-config", str(conf))
    assert code == 1
    [line] = [line for line in out.splitlines() if line.startswith("FAIL  tunnel: ")]
    assert f"WireGuard config {conf}:3: " in line and "'ten'" in line


def test_peer_line_prints_the_hubs_peer_block_with_the_key_the_agent_will_use(tmp_path):
    conf = write(tmp_path / "wg.conf", GOOD)
    root = tmp_path / "root"
    code, out, err = cli(
        "tunnel", "--wireguard-config", str(conf), "--root-dir", str(root), "--hostname-override", "pi-7", "peer-line"
    )
    assert (code, err) == (0, "")
    loaded = keys.load(conf, root, create=False)
    assert loaded is not None
    assert out == f"[Peer]\n# node pi-7\nPublicKey = {encode_key(loaded.public_key)}\nAllowedIPs = 10.99.0.7/32\n"


def test_peer_line_refuses_what_the_agent_refuses(tmp_path):
    conf = write(tmp_path / "wg.conf", GOOD, 0o644)
    code, out, err = cli("tunnel", "--wireguard-config", str(conf), "--root-dir", str(tmp_path), "peer-line")
    assert (code, out) == (1, "")
    assert "mode 0644 lets other users read it" in err
    code, _, err = cli("tunnel", "--root-dir", str(tmp_path), "peer-line")
    assert code == 1 and "no tunnel configured" in err


def test_keep_up_backs_off_while_the_interface_cannot_come_up_and_never_raises(tmp_path):
    """No wireguard-go (or `ip` refusing): the agent runs on, the tries space out 1, 2, 4... s, status says why."""
    cfg = parse_config(GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {KEY}"), "f")
    clock = FakeClock()
    stop = asyncio.Event()
    tries: list[float] = []

    async def runner(argv):
        tries.append(clock.monotonic())
        if len(tries) == 5:
            stop.set()
        raise DeviceError("wgtest", f"{argv[0]}: No such file or directory")

    tunnel = Tunnel(cfg, clock, interface="wgtest", socket_dir=str(tmp_path), runner=runner)
    asyncio.run(tunnel.keep_up(stop))
    assert [b - a for a, b in zip(tries, tries[1:])] == [1.0, 2.0, 4.0, 8.0]
    assert not tunnel.status.up and "No such file or directory" in (tunnel.status.error or "")


# --- TunnelReady: a pure function of the tunnel's status, a condition of the Node ------------------------------


@pytest.mark.parametrize(
    "status, expected",
    [
        (
            Status(up=False, last_handshake=None, error="wireguard-go: not found"),
            (False, "TunnelDown", "the WireGuard interface is not up: wireguard-go: not found"),
        ),
        (Status(up=True, last_handshake=None), (False, "NoHandshake", "no handshake with the hub yet")),
        (
            Status(up=True, last_handshake=1700000000.0 - 60),
            (True, "HandshakeRecent", "a handshake with the hub within the last 180s"),
        ),
        (
            Status(up=True, last_handshake=1700000000.0 - 181),
            (False, "HandshakeStale", "no handshake with the hub for over 180s (last at 2023-11-14T22:10:19Z)"),
        ),
    ],
)
def test_readiness(status, expected):
    assert readiness(status, 1700000000.0) == expected


def test_the_node_reports_tunnel_ready_only_with_a_tunnel():
    from edgelet.mirror.node import NodeFacts, build_node_status, node_conditions

    assert [c["type"] for c in node_conditions(frozenset(), ready=True, ready_message="ok")] == [
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "Ready",
    ]
    facts = NodeFacts(name="pi-7", node_ip="10.99.0.7", tunnel=(False, "NoHandshake", "no handshake with the hub yet"))
    status = build_node_status(facts, ready=True, ready_message="ok", now=1700000000.0)
    assert status["conditions"][-1] | {"lastHeartbeatTime": "", "lastTransitionTime": ""} == {
        "type": "TunnelReady",
        "status": "False",
        "reason": "NoHandshake",
        "message": "no handshake with the hub yet",
        "lastHeartbeatTime": "",
        "lastTransitionTime": "",
    }
    assert status["addresses"][0] == {"type": "InternalIP", "address": "10.99.0.7"}


def test_a_config_another_user_owns_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file away")
    conf = write(tmp_path / "wg.conf", GOOD)
    os.chown(conf, 1000, 1000)
    with pytest.raises(TunnelConfigError, match="wg.conf: it belongs to uid 1000, who may read and change it"):
        keys.load(conf, tmp_path / "root")
    assert keys.readable_by_others(0o100600, 1000, 1000) is None  # an agent run by that user may use its own


def test_a_command_that_cannot_start_is_named():
    from edgelet.tunnel.device import run

    with pytest.raises(DeviceError) as err:
        asyncio.run(run(["/nonexistent/wireguard-go", "wg0"]))
    assert str(err.value).startswith("WireGuard: /nonexistent/wireguard-go wg0: [Errno 2]")


# --- The node API on the tunnel's address (--node-api-address) --------------------------------------------------


@pytest.mark.parametrize(
    "address, expected",
    [
        ("10.99.0.7", True),
        ("10.99.0.8", False),  # in the tunnel's network, not the device's address
        ("0.0.0.0", False),
        (None, False),
        ("", False),
        ("node.example", False),  # not an IP: the listener reports it as ever
    ],
)
def test_on_tunnel(address, expected):
    assert on_tunnel(address, parse_config(GOOD, "f")) is expected


def test_a_freebind_listener_binds_an_address_no_interface_has_yet():
    """The tunnel's address exists only once the interface is up (and goes while wireguard-go is re-created):
    the listener binds it anyway and answers on it whenever it is there."""
    from edgelet.server.http import HttpServer, ServerError

    async def main():
        server = HttpServer(lambda request: None)  # type: ignore[arg-type,return-value]
        try:
            with pytest.raises(ServerError, match="192.0.2.77"):
                await server.listen_tcp("192.0.2.77", 0)  # TEST-NET-1: on no interface here
            port = await server.listen_tcp("192.0.2.77", 0, freebind=True)
            assert port > 0
        finally:
            await server.close()

    asyncio.run(main())


def test_the_node_api_on_a_tunnel_address_listens_once_the_tunnel_is_up():
    from types import SimpleNamespace

    from edgelet.server.nodeapi import NodeApiServer

    async def main():
        went_up = asyncio.Event()
        api = SimpleNamespace(handle=None, clock=FakeClock())
        server = NodeApiServer(api, SimpleNamespace(ssl=None), "192.0.2.78", 0, after=went_up)  # type: ignore[arg-type]
        task = asyncio.create_task(server.run())
        for _ in range(5):
            await asyncio.sleep(0)
        assert server.port is None  # not even tried: the address is not there yet
        went_up.set()
        for _ in range(50):
            if server.port is not None:
                break
            await asyncio.sleep(0.01)
        assert server.port is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_the_self_signed_certificate_is_made_again_when_it_does_not_name_the_tunnel_address(tmp_path):
    """A device that had its node API before its tunnel: the apiserver dials the tunnel address and checks the
    certificate names it, so the kept pair is made again then (and only then: clients may pin it)."""
    from edgelet.server.tls import ensure_self_signed, names_ips

    pki = tmp_path / "pki"
    cert, _ = asyncio.run(ensure_self_signed(pki, "n1", ["192.168.1.20"]))
    first = cert.read_bytes()
    assert names_ips(cert) == {"127.0.0.1", "192.168.1.20"}
    asyncio.run(ensure_self_signed(pki, "n1", ["192.168.1.20"], required=["192.168.1.20"]))
    assert cert.read_bytes() == first  # named already: kept
    asyncio.run(ensure_self_signed(pki, "n1", ["10.99.0.7", "192.168.1.20"], required=["10.99.0.7"]))
    assert names_ips(cert) == {"127.0.0.1", "10.99.0.7", "192.168.1.20"}
    asyncio.run(ensure_self_signed(pki, "n1", ["10.99.0.7"], required=["10.99.0.7"]))
    assert names_ips(cert) == {"127.0.0.1", "10.99.0.7", "192.168.1.20"}  # kept again


# --- Metrics: the tunnel in /metrics -----------------------------------------------------------------------------


def test_the_tunnel_in_metrics(tmp_path):
    """Up, each peer's handshake age and bytes as of the last check, and the times the tunnel was mended."""
    from edgelet.server.metrics import Metrics

    cfg = parse_config(GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {KEY}"), "f")
    clock = FakeClock()
    tunnel = Tunnel(cfg, clock, interface="wgtest", socket_dir=str(tmp_path))
    metrics = Metrics(clock)
    metrics.watch_tunnel(tunnel)
    body = metrics.render().decode()
    assert 'edgelet_tunnel_up{interface="wgtest"} 0.0' in body
    assert "edgelet_tunnel_last_handshake_age_seconds{" not in body  # no check yet: no peer to speak of
    tunnel.status = Status(up=True, last_handshake=clock.now() - 42)
    tunnel.state_seen = uapi.DeviceState(
        None, (uapi.PeerState(bytes(range(32)), "192.0.2.1:51820", clock.now() - 42, rx_bytes=1234, tx_bytes=5678),)
    )
    tunnel.reconnects["device"] += 2
    body = metrics.render(prefix="kubelet").decode()
    peer = f'interface="wgtest",peer="{HUB}"'
    assert 'kubelet_tunnel_up{interface="wgtest"} 1.0' in body
    assert f"kubelet_tunnel_last_handshake_age_seconds{{{peer}}} 42.0" in body
    assert f"kubelet_tunnel_receive_bytes_total{{{peer}}} 1234.0" in body
    assert f"kubelet_tunnel_transmit_bytes_total{{{peer}}} 5678.0" in body
    assert 'kubelet_tunnel_reconnects_total{interface="wgtest",reason="device"} 2.0' in body
    assert 'kubelet_tunnel_reconnects_total{interface="wgtest",reason="endpoint"} 0.0' in body


def test_a_mended_tunnel_is_counted(tmp_path):
    """wireguard-go died: the check finds its socket silent, brings the interface up again and counts it."""
    cfg = parse_config(GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {KEY}"), "f")
    ran: list[list[str]] = []

    async def runner(argv):
        ran.append(list(argv))
        raise DeviceError("wgtest", "wireguard-go: gone for good")

    tunnel = Tunnel(cfg, FakeClock(), interface="wgtest", socket_dir=str(tmp_path), runner=runner)
    with pytest.raises(DeviceError):
        asyncio.run(tunnel.check())
    assert tunnel.reconnects["device"] == 0  # tried, not mended
    assert ran and ran[0][0] == "wireguard-go"


# --- `edgelet node` and `edgelet check`: the running interface in words ------------------------------------------


@pytest.mark.parametrize(
    "state, error, expected",
    [
        (None, "cannot reach its UAPI socket", (False, "wgtest not up (cannot reach its UAPI socket)")),
        (uapi.DeviceState(None, ()), None, (False, "wgtest up; no peer")),
        (
            uapi.DeviceState(None, (uapi.PeerState(bytes(range(32)), None, None, 0, 92),)),
            None,
            (False, "wgtest up; peer AAECAwQF… at no endpoint yet, last handshake never, 0 B in, 92 B out"),
        ),
        (
            uapi.DeviceState(None, (uapi.PeerState(bytes(range(32)), "192.0.2.1:51820", 1000.0 - 12, 148, 92),)),
            None,
            (True, "wgtest up; peer AAECAwQF… at 192.0.2.1:51820, last handshake 12s ago, 148 B in, 92 B out"),
        ),
        (
            uapi.DeviceState(None, (uapi.PeerState(bytes(range(32)), "192.0.2.1:51820", 1000.0 - 600, 148, 92),)),
            None,
            (False, "wgtest up; peer AAECAwQF… at 192.0.2.1:51820, last handshake 600s ago, 148 B in, 92 B out"),
        ),
    ],
)
def test_describe(state, error, expected):
    from edgelet.tunnel.show import describe

    assert describe("wgtest", state, error, 1000.0) == expected


def test_check_asks_the_interface(tmp_path):
    """`edgelet check` says what the running interface answers: here none is up (a WARN, not a FAIL)."""
    conf = write(tmp_path / "wgnotup0.conf", GOOD)
    code, out, _ = cli("check", "--root-dir", str(tmp_path / "root"), "--wireguard-config", str(conf))
    [line] = [line for line in out.splitlines() if "tunnel link" in line]
    assert line.startswith("WARN  tunnel link: wgnotup0 not up (")


def test_node_shows_the_tunnel_even_with_the_agent_down(tmp_path):
    """The interface outlives the agent: `edgelet node` asks it, not the agent."""
    conf = write(tmp_path / "wgnotup1.conf", GOOD)
    root, run = tmp_path / "root", tmp_path / "run"
    code, out, err = cli("node", "--root-dir", str(root), "--run-dir", str(run), "--wireguard-config", str(conf))
    assert code == 1 and "edgelet is not running" in err
    [line] = [line for line in out.splitlines() if line.startswith("Tunnel:")]
    assert "wgnotup1 not up (" in line


def test_the_agent_loads_its_key_without_the_cryptography_package(tmp_path):
    """The agent needs only the private key: deriving the public one (check, peer-line) is what loads the
    `cryptography` package, about 9 MB more RSS in the agent (bench/tunnel.py --path)."""
    conf = write(tmp_path / "wg0.conf", GOOD.replace("[Interface]", f"[Interface]\nPrivateKey = {KEY}"))
    code = (
        "import sys\nfrom pathlib import Path\nfrom edgelet.tunnel import keys\n"
        "loaded = keys.load(Path(sys.argv[1]), Path(sys.argv[2]))\n"
        "print('cryptography' in sys.modules, loaded.config.private_key is not None)\n"
        "loaded.public_key\nprint('cryptography' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(conf), str(tmp_path)], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "True", "True"], done.stderr
