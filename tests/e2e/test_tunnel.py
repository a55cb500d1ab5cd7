"""The WireGuard tunnel with the real wireguard-go: a hub and a device ("site") in network namespaces the test makes.

The two namespaces share only a veth pair on a test-random private /24; the
tunnel's addresses are another random /24. Nothing is routed outside them.
The hub is configured with `wg` (WireGuard's own tool), the device by
edgelet's tunnel package over the UAPI socket, so each side checks the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from edgelet.testing.dnsstub import move_hub, named_hub
from edgelet.testing.wglab import reaches_hub, sh, start_hub, wireguard_gos, wireguard_lab
from edgelet.tunnel import keys, uapi
from edgelet.tunnel.config import encode_key
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.privileged

NEEDS = ("wireguard-go", "wg", "ip")
if os.geteuid() != 0 or any(shutil.which(b) is None for b in NEEDS) or not os.path.exists("/dev/net/tun"):
    pytest.skip("needs root, /dev/net/tun, wireguard-go, wg and ip", allow_module_level=True)

# Run in the site namespace: what the agent does at start (load the config, bring the tunnel up or adopt it).
DEVICE = """
import asyncio, json, sys
from pathlib import Path
from edgelet.tunnel import keys
from edgelet.tunnel.device import Tunnel
from edgelet.util.clock import REAL_CLOCK

loaded = keys.load(Path(sys.argv[1]), Path(sys.argv[2]))
tunnel = Tunnel(loaded.config, REAL_CLOCK)  # named after the file, as wg-quick does
adopted = asyncio.run(tunnel.up())
print(json.dumps({"adopted": adopted}))
"""


@pytest.fixture
def lab(tmp_path):
    with wireguard_lab(tmp_path) as net:
        yield net


def device_up(lab) -> dict:
    out = sh(sys.executable, "-c", DEVICE, str(lab["conf"]), str(lab["root"]), netns=lab["site_ns"])
    return json.loads(out.strip().splitlines()[-1])


def handshake(lab) -> float | None:
    state = uapi.parse_get(
        asyncio.run(uapi.transact(uapi.socket_path(lab["site_if"]), "get=1\n\n", interface=lab["site_if"]))
    )
    return state.peers[0].last_handshake


def tcp_through(lab) -> str:
    """A TCP connection from the hub to the device's tunnel address (what the apiserver does for kubectl logs)."""
    port = random.randrange(20000, 30000)
    server = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            lab["site_ns"],
            sys.executable,
            "-c",
            "import socket,sys; s=socket.create_server((sys.argv[1], int(sys.argv[2]))); c,_=s.accept(); "
            "c.sendall(b'node api via ' + c.recv(64)); c.close()",
            f"{lab['tun']}.2",
            str(port),
        ]
    )
    try:
        client = (
            "import socket,sys,time\n"
            "for _ in range(100):\n"
            "    try: c=socket.create_connection((sys.argv[1], int(sys.argv[2])), 2); break\n"
            "    except OSError: time.sleep(0.1)\n"
            "c.sendall(b'tunnel'); print(c.recv(64).decode())"
        )
        return sh(sys.executable, "-c", client, f"{lab['tun']}.2", str(port), netns=lab["hub_ns"]).strip()
    finally:
        server.kill()
        server.wait()


def test_device_dials_the_hub_and_the_hub_reaches_it(lab):
    assert device_up(lab) == {"adopted": False}
    wait_for(lambda: reaches_hub(lab), what="a packet through the tunnel", timeout=30)
    assert handshake(lab) is not None
    assert tcp_through(lab) == "node api via tunnel"
    # The key generated at first start is the one the device uses: the hub knows it by it.
    assert (lab["root"] / keys.KEY_FILE).stat().st_mode & 0o777 == 0o600
    hub_peers = sh("wg", "show", lab["hub_if"], "peers", netns=lab["hub_ns"]).split()
    assert hub_peers == [encode_key(lab["public_key"])]


def test_a_restarted_agent_adopts_the_interface(lab):
    device_up(lab)
    wait_for(lambda: reaches_hub(lab), what="a packet through the tunnel", timeout=30)
    wait_for(lambda: handshake(lab), what="a handshake")
    before, daemons = handshake(lab), wireguard_gos(lab)
    assert device_up(lab) == {"adopted": True}
    assert wireguard_gos(lab) == daemons  # no second wireguard-go
    assert handshake(lab) == before  # the session survived: the peer was updated in place, not replaced
    assert reaches_hub(lab)


def test_the_tunnel_comes_back_after_wireguard_go_dies(lab):
    device_up(lab)
    wait_for(lambda: reaches_hub(lab), what="a packet through the tunnel", timeout=30)
    for pid in sh("ip", "netns", "pids", lab["site_ns"]).split():
        os.kill(int(pid), signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what="wireguard-go to die")
    assert not reaches_hub(lab)
    # The next start (or keep_up's next round) finds no socket answering and brings the interface up again.
    assert device_up(lab) == {"adopted": False}
    wait_for(lambda: reaches_hub(lab), what="a packet through the re-created tunnel", timeout=30)


def test_the_agent_keeps_the_tunnel_and_a_sigkilled_agent_adopts_it(agent, lab):
    """The real agent in the site namespace (nsenter: only the network namespace, so its cgroups stay the host's)
    brings the tunnel up; SIGKILLed, the tunnel stays up without it; started again, it adopts the interface."""
    assert agent.paths.root_dir == lab["root"]  # the key the hub knows is the one the lab generated there
    wrapper = ("nsenter", f"--net=/run/netns/{lab['site_ns']}")
    agent.start("--wireguard-config", str(lab["conf"]), wrapper=wrapper)
    wait_for(lambda: "Tunnel up" in agent.log(), what="the agent to bring the tunnel up", timeout=60)
    assert f"interface={lab['site_if']} adopted=False" in agent.log()
    wait_for(lambda: reaches_hub(lab), what="a packet through the agent's tunnel", timeout=30)
    assert tcp_through(lab) == "node api via tunnel"
    # `edgelet node` shows the condition the Node reports; its first check after the handshake makes it True.
    wait_for(
        lambda: "TunnelReady" in agent.cli("node") and "HandshakeRecent" in agent.cli("node"),
        what="TunnelReady in `edgelet node`",
        timeout=60,
    )
    # And the interface itself, read over UAPI: the hub's endpoint, a recent handshake, bytes both ways.
    [line] = [
        x for x in agent.cli("node", "--wireguard-config", str(lab["conf"])).splitlines() if x.startswith("Tunnel:")
    ]
    assert f"{lab['site_if']} up; peer " in line and f"at {lab['hub_ip']}:51820, last handshake " in line
    daemons = wireguard_gos(lab)
    assert len(daemons) == 1
    agent.stop(signal.SIGKILL)
    assert reaches_hub(lab)  # the interface and its daemon outlive the agent
    agent.start("--wireguard-config", str(lab["conf"]), wrapper=wrapper)
    wait_for(
        lambda: f"interface={lab['site_if']} adopted=True" in agent.log(),
        what="the restarted agent to adopt it",
        timeout=60,
    )
    assert wireguard_gos(lab) == daemons  # adopted, not a second daemon
    assert reaches_hub(lab)


def test_the_agent_brings_the_tunnel_back_when_wireguard_go_dies(agent, lab):
    wrapper = ("nsenter", f"--net=/run/netns/{lab['site_ns']}")
    agent.start("--wireguard-config", str(lab["conf"]), wrapper=wrapper)
    wait_for(lambda: reaches_hub(lab), what="a packet through the agent's tunnel", timeout=60)
    [daemon] = wireguard_gos(lab)
    os.kill(int(daemon), signal.SIGKILL)
    # The agent's next check (every 10 s) finds the socket silent and brings the interface up again.
    wait_for(lambda: [p for p in wireguard_gos(lab) if p != daemon], what="a new wireguard-go", timeout=60)
    wait_for(lambda: reaches_hub(lab), what="a packet through the re-created tunnel", timeout=30)
    assert "Tunnel device not answering: bringing it up" in agent.log()


# Run in another namespace: a TLS connection to ADDRESS:PORT, printing the IP addresses its certificate names (or
# the error's class: ConnectionRefusedError when nothing listens there).
NODE_API_CERT = """
import socket, ssl, sys
from cryptography import x509
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), 3) as raw, ctx.wrap_socket(raw) as tls:
        cert = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        print(" ".join(sorted(str(ip) for ip in sans.get_values_for_type(x509.IPAddress))))
except OSError as exc:
    print(type(exc).__name__)
"""


def node_api(lab, netns: str, address: str, port: int) -> str:
    return sh(sys.executable, "-c", NODE_API_CERT, address, str(port), netns=netns).strip()


def test_the_node_api_listens_on_the_tunnel_address_only(agent, lab):
    """--node-api-address on the tunnel's address: the node API answers there once the tunnel is up, with a
    certificate that names it, and nothing listens on the device's other addresses (its uplink, loopback). When
    wireguard-go dies and the agent makes the interface again, the same listener answers again."""
    port = random.randrange(20000, 30000)
    tunnel_ip = f"{lab['tun']}.2"
    wrapper = ("nsenter", f"--net=/run/netns/{lab['site_ns']}")
    agent.start(
        "--wireguard-config", str(lab["conf"]), "--node-api-address", tunnel_ip, "--port", str(port), wrapper=wrapper
    )
    wait_for(lambda: "Node API listening" in agent.log(), what="the node API to listen", timeout=60)
    assert agent.log().index("Tunnel up") < agent.log().index("Node API listening")
    wait_for(lambda: reaches_hub(lab), what="a packet through the agent's tunnel", timeout=30)
    assert tunnel_ip in node_api(lab, lab["hub_ns"], tunnel_ip, port).split()
    # The hub has a route to the device's uplink address: a refusal there is the device's kernel saying no one listens.
    assert node_api(lab, lab["hub_ns"], lab["site_ip"], port) == "ConnectionRefusedError"
    assert node_api(lab, lab["site_ns"], "127.0.0.1", port) == "ConnectionRefusedError"
    [daemon] = wireguard_gos(lab)
    os.kill(int(daemon), signal.SIGKILL)
    wait_for(lambda: [p for p in wireguard_gos(lab) if p != daemon], what="a new wireguard-go", timeout=60)
    wait_for(
        lambda: tunnel_ip in node_api(lab, lab["hub_ns"], tunnel_ip, port).split(),
        what="the node API through the re-created tunnel",
        timeout=30,
    )
    assert agent.log().count("Node API listening") == 1  # the same listener: it outlived the interface


# Run in the site namespace: the agent's keep-up loop, quickened (a 0.5 s period, a handshake stale after 2 s)
# and with the periodic lookup put off (an hour), so what finds the hub is the staleness rule alone.
KEEPER = """
import asyncio, sys
from pathlib import Path
from edgelet.tunnel import keys
from edgelet.tunnel.device import Tunnel
from edgelet.util.clock import REAL_CLOCK

loaded = keys.load(Path(sys.argv[1]), Path(sys.argv[2]))
asyncio.run(Tunnel(loaded.config, REAL_CLOCK, stale_after=2.0, resolve_period=3600).keep_up(period=0.5))
"""


def test_a_silent_hub_whose_name_moved_is_found_again(lab):
    """The Endpoint is a DNS name (answered in the site namespace by a server of the test's, at the machine's
    nameserver addresses: no file of the machine's changes): the hub moves to another address, the name follows,
    and the tunnel, silent since, looks the name up again and reconnects."""
    keeper = None
    with named_hub(lab) as dns:
        try:
            # The site answers only what it dialed (a stateful firewall, as its NAT would): a hub that moved cannot
            # reach it from its new address, so WireGuard's own roaming cannot find the hub; only a new lookup can.
            # (Its own loopback, where the name's server answers, excepted.)
            for rule in (
                ["-i", "lo", "-j", "ACCEPT"],
                ["-m", "conntrack", "--ctstate", "ESTABLISHED", "-j", "ACCEPT"],
                ["-j", "DROP"],
            ):
                sh("iptables", "-A", "INPUT", "-p", "udp", *rule, netns=lab["site_ns"])
            in_site = ("ip", "netns", "exec", lab["site_ns"])
            keeper = subprocess.Popen(
                [*in_site, sys.executable, "-c", KEEPER, str(lab["conf"]), str(lab["root"])],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_for(lambda: reaches_hub(lab), what="a packet through the tunnel", timeout=30)
            assert endpoint(lab) == f"{lab['hub_wg_ip']}:51820"
            moved = move_hub(lab, dns)
            wait_for(lambda: endpoint(lab) == f"{moved}:51820", what="the endpoint to follow the name", timeout=30)
            wait_for(lambda: reaches_hub(lab), what="a packet through the tunnel to the moved hub", timeout=30)
        finally:
            if keeper is not None:
                keeper.kill()
                keeper.wait()


def endpoint(lab) -> str | None:
    state = uapi.parse_get(
        asyncio.run(uapi.transact(uapi.socket_path(lab["site_if"]), "get=1\n\n", interface=lab["site_if"]))
    )
    return state.peers[0].endpoint


def test_through_a_nat_the_hub_reaches_the_device_only_by_the_tunnel(tmp_path):
    """A router namespace masquerades the site: the hub cannot dial the device's own address (the router drops
    what the site did not dial), and reaches it through the tunnel the device dialed out on."""
    with wireguard_lab(tmp_path, nat=True) as nat_lab:
        direct = (
            "import socket,sys\ntry:\n    socket.create_connection((sys.argv[1], 10250), 2)\n"
            "    print('connected')\nexcept OSError as exc:\n    print(type(exc).__name__)"
        )
        assert sh(sys.executable, "-c", direct, nat_lab["site_ip"], netns=nat_lab["hub_ns"]).strip() == "TimeoutError"
        assert device_up(nat_lab) == {"adopted": False}
        wait_for(lambda: reaches_hub(nat_lab), what="a packet through the tunnel, across the NAT", timeout=30)
        assert tcp_through(nat_lab) == "node api via tunnel"
        # The hub sees the device at the router's address: the masquerade, not the device's own.
        endpoint = sh("wg", "show", nat_lab["hub_if"], "endpoints", netns=nat_lab["hub_ns"]).split()[1]
        assert endpoint.startswith(f"{nat_lab['router_hub_ip']}:")


def test_a_restarted_hub_is_reached_again(lab):
    """The hub's wireguard-go dies and comes back (a hub reboot): the device's session is gone at the hub, and
    the device's next packets make a new handshake (WireGuard's own timers; the agent leaves the device be)."""
    device_up(lab)
    wait_for(lambda: reaches_hub(lab), what="a packet through the tunnel", timeout=30)
    hub_daemons = [
        p
        for p in sh("ip", "netns", "pids", lab["hub_ns"]).split()
        if Path(f"/proc/{p}/comm").read_text().strip() == "wireguard-go"
    ]
    for pid in hub_daemons:
        os.kill(int(pid), signal.SIGKILL)
    wait_for(lambda: not reaches_hub(lab), what="the tunnel to fail with the hub down", timeout=30)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(uapi.socket_path(lab["hub_if"]))
    start_hub(lab)
    wait_for(lambda: reaches_hub(lab), what="a packet through the tunnel to the restarted hub", timeout=60)


def test_a_real_hub_takes_the_peer_line_and_check_reads_the_running_link(lab):
    """The hub forgets the device, then takes the block `edgelet tunnel peer-line` prints with `wg addconf` (an
    operator enrolling the device); the tunnel comes up with it, and `edgelet check` reads the running link."""
    edgelet = (sys.executable, "-m", "edgelet", "--root-dir", str(lab["root"]), "--wireguard-config", str(lab["conf"]))
    sh("wg", "set", lab["hub_if"], "peer", encode_key(lab["public_key"]), "remove", netns=lab["hub_ns"])
    block = lab["root"].parent / "peer.conf"
    block.write_text(sh(*edgelet, "tunnel", "peer-line"))
    sh("wg", "addconf", lab["hub_if"], str(block), netns=lab["hub_ns"])
    assert device_up(lab) == {"adopted": False}
    wait_for(lambda: reaches_hub(lab), what="a packet through the tunnel to the hub that took the block", timeout=30)
    out = sh(*edgelet, "check", check=False, netns=lab["site_ns"])
    [line] = [x for x in out.splitlines() if "tunnel link" in x]
    assert line.startswith("OK") and f"{lab['site_if']} up; peer " in line, line
