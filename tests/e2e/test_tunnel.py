"""The WireGuard tunnel with the real wireguard-go: a hub and a device ("site") in network namespaces the test makes.

The two namespaces share only a veth pair on a test-random private /24; the
tunnel's addresses are another random /24. Nothing is routed outside them.
The hub is configured with `wg` (WireGuard's own tool), the device by
edgelet's tunnel package over the UAPI socket, so each side checks the other.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

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


def sh(*argv: str, check: bool = True, netns: str | None = None, timeout: float = 30.0) -> str:
    if netns is not None:
        argv = ("ip", "netns", "exec", netns, *argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    return done.stdout


@pytest.fixture
def lab(tmp_path):
    tag = secrets.token_hex(3)
    hub, site = f"wgh-{tag}", f"wgs-{tag}"
    under, tun = random.sample(range(16, 250), 2)
    net = {"hub_ns": hub, "site_ns": site, "hub_if": f"wgh{tag}", "site_if": f"wgs{tag}",
           "hub_under": f"10.{under}.{random.randrange(256)}", "tun": f"10.{tun}.{random.randrange(256)}"}
    net["hub_ip"], net["site_ip"] = f"{net['hub_under']}.1", f"{net['hub_under']}.2"
    created: list[str] = []
    try:
        for ns in (hub, site):
            sh("ip", "netns", "add", ns)
            created.append(ns)
            sh("ip", "link", "set", "lo", "up", netns=ns)
        sh("ip", "link", "add", f"vh{tag}", "netns", hub, "type", "veth", "peer", "name", f"vs{tag}", "netns", site)
        sh("ip", "address", "add", f"{net['hub_ip']}/24", "dev", f"vh{tag}", netns=hub)
        sh("ip", "link", "set", f"vh{tag}", "up", netns=hub)
        sh("ip", "address", "add", f"{net['site_ip']}/24", "dev", f"vs{tag}", netns=site)
        sh("ip", "link", "set", f"vs{tag}", "up", netns=site)
        # The hub: wireguard-go configured by wg(8).
        hub_key = tmp_path / "hub.key"
        hub_key.write_text(sh("wg", "genkey"))
        hub_key.chmod(0o600)
        hub_pub = subprocess.run(["wg", "pubkey"], input=hub_key.read_text(), capture_output=True, text=True,
                                 check=True).stdout.strip()
        sh("wireguard-go", net["hub_if"], netns=hub)
        sh("wg", "set", net["hub_if"], "private-key", str(hub_key), "listen-port", "51820", netns=hub)
        sh("ip", "address", "add", f"{net['tun']}.1/24", "dev", net["hub_if"], netns=hub)
        sh("ip", "link", "set", net["hub_if"], "up", netns=hub)
        conf = tmp_path / f"{net['site_if']}.conf"
        conf.write_text(f"""[Interface]
Address = {net['tun']}.2/24

[Peer]
PublicKey = {hub_pub}
Endpoint = {net['hub_ip']}:51820
AllowedIPs = {net['tun']}.0/24
PersistentKeepalive = 1
""")
        conf.chmod(0o600)
        root = tmp_path / "root"
        loaded = keys.load(conf, root)  # the first start's key, kept under root
        assert loaded is not None
        sh("wg", "set", net["hub_if"], "peer", encode_key(loaded.public_key), "allowed-ips", f"{net['tun']}.2/32",
           netns=hub)
        yield {**net, "conf": conf, "root": root, "public_key": loaded.public_key}
    finally:
        for ns in reversed(created):
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            sh("ip", "netns", "delete", ns, check=False)
        for name in (net["hub_if"], net["site_if"]):
            try:
                os.unlink(uapi.socket_path(name))
            except FileNotFoundError:
                pass


def wireguard_gos(lab) -> list[str]:
    """The wireguard-go daemons in the site namespace (the agent runs there too)."""
    pids = sh("ip", "netns", "pids", lab["site_ns"]).split()
    return [p for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "wireguard-go"]


def device_up(lab) -> dict:
    out = sh(sys.executable, "-c", DEVICE, str(lab["conf"]), str(lab["root"]), netns=lab["site_ns"])
    return json.loads(out.strip().splitlines()[-1])


def handshake(lab) -> float | None:
    state = uapi.parse_get(asyncio.run(uapi.transact(uapi.socket_path(lab["site_if"]), "get=1\n\n",
                                                     interface=lab["site_if"])))
    return state.peers[0].last_handshake


# A connection refused by the hub's tunnel address proves the packet crossed the tunnel and the answer came back;
# a timeout proves it did not.
PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), 1).close()
except ConnectionRefusedError:
    print("reached")
except OSError as exc:
    print(exc)
"""


def reaches_hub(lab) -> bool:
    return sh(sys.executable, "-c", PROBE, f"{lab['tun']}.1", netns=lab["site_ns"]).strip() == "reached"


def tcp_through(lab) -> str:
    """A TCP connection from the hub to the device's tunnel address (what the apiserver does for kubectl logs)."""
    port = random.randrange(20000, 30000)
    server = subprocess.Popen(
        ["ip", "netns", "exec", lab["site_ns"], sys.executable, "-c",
         "import socket,sys; s=socket.create_server((sys.argv[1], int(sys.argv[2]))); c,_=s.accept(); "
         "c.sendall(b'node api via ' + c.recv(64)); c.close()", f"{lab['tun']}.2", str(port)])
    try:
        client = ("import socket,sys,time\n"
                  "for _ in range(100):\n"
                  "    try: c=socket.create_connection((sys.argv[1], int(sys.argv[2])), 2); break\n"
                  "    except OSError: time.sleep(0.1)\n"
                  "c.sendall(b'tunnel'); print(c.recv(64).decode())")
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
    daemons = wireguard_gos(lab)
    assert device_up(lab) == {"adopted": True}
    assert wireguard_gos(lab) == daemons  # no second wireguard-go
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
    wait_for(lambda: "TunnelReady" in agent.cli("node") and "HandshakeRecent" in agent.cli("node"),
             what="TunnelReady in `edgelet node`", timeout=60)
    daemons = wireguard_gos(lab)
    assert len(daemons) == 1
    agent.stop(signal.SIGKILL)
    assert reaches_hub(lab)  # the interface and its daemon outlive the agent
    agent.start("--wireguard-config", str(lab["conf"]), wrapper=wrapper)
    wait_for(lambda: f"interface={lab['site_if']} adopted=True" in agent.log(), what="the restarted agent to adopt it",
             timeout=60)
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
