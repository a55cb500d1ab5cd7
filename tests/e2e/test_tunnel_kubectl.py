"""kubectl reaches a device behind NAT through its WireGuard tunnel: the whole path, with the real components.

A "site" namespace holds the device (the real agent and its pods), behind a
"router" namespace that masquerades it; a "hub" namespace holds the real
kube-apiserver v1.20.2 (with its etcd) and a wireguard-go hub. The apiserver
cannot dial the device's own address; it dials the Node's InternalIP, the
tunnel address, where the node API alone listens. kubectl runs in the hub
namespace: logs -f, exec (-i, -it), attach, port-forward and cp. The device
names its hub by DNS (a name a server of the test's answers in the site
namespace). The device starts while its hub is down: the Node, its Lease and
the mirror pods go on without the tunnel and the Node says TunnelReady False.
Then the tunnel is broken four ways (the hub restarted, a NAT
rebinding, the agent SIGKILLed, the hub moved to another address and its name
with it) and each heals with nothing restarted by the test; the time to heal is
printed (pytest -s), never asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import termios
import threading
import time
import urllib.request

import pytest

from edgelet.testing.apiserver import ADMIN_TOKEN, ApiServer, kube_bin_dir
from edgelet.testing.dnsstub import move_hub, named_hub
from edgelet.testing.wglab import (
    InNetns,
    kill_hub,
    reaches_hub,
    rebind_nat,
    sh,
    start_hub,
    wireguard_gos,
    wireguard_lab,
)
from edgelet.tunnel import uapi
from tests.e2e.conftest import wait_for
from tests.e2e.test_streaming import pod_yaml

pytestmark = [pytest.mark.privileged, pytest.mark.apiserver]

NEEDS = ("wireguard-go", "wg", "ip", "iptables", "etcd")
if os.geteuid() != 0 or any(shutil.which(b) is None for b in NEEDS) or not os.path.exists("/dev/net/tun"):
    pytest.skip("needs root, /dev/net/tun, wireguard-go, wg, ip, iptables and etcd", allow_module_level=True)

NODE = "testnode"
NODE_API_PORT = "10250"  # the site namespace's own: nothing else listens there
TALK = "i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.2; done"
WEB = "mkdir -p /www && echo hello-through-the-tunnel > /www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /www"


@pytest.fixture
def nat(tmp_path):
    with wireguard_lab(tmp_path, nat=True) as lab:
        yield lab


@pytest.fixture
def hub_dns(nat):
    with named_hub(nat) as dns:
        yield dns


@pytest.fixture
def hub_api(nat, tmp_path):
    in_hub = InNetns(nat["hub_ns"])
    api = ApiServer(tmp_path / "apiserver", kube_bin_dir(), netns=nat["hub_ns"], address=nat["hub_ip"], in_netns=in_hub)
    api.node_token(NODE)
    try:
        api.start()
        yield api
    finally:
        api.stop()
        in_hub.close()


def kubectl_argv(api: ApiServer, *args: str) -> list[str]:
    cfg = api.base / "kubeconfig-admin"
    if not cfg.exists():
        api.kubeconfig(cfg, token=ADMIN_TOKEN)
    return ["ip", "netns", "exec", str(api.netns), str(api.bin_dir / "kubectl"), f"--kubeconfig={cfg}", *args]


def kubectl(api: ApiServer, *args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(kubectl_argv(api, *args), input=input, capture_output=True, timeout=timeout)


def exec_works(api: ApiServer) -> bool:
    done = kubectl(api, "--request-timeout=10s", "exec", f"web-{NODE}", "--", "cat", "/www/index.html", timeout=30)
    return done.returncode == 0 and done.stdout == b"hello-through-the-tunnel\n"


def healed(api: ApiServer, what: str, timeout: float = 120) -> float:
    """Seconds until `kubectl exec` works through the tunnel again (printed: a figure, not asserted)."""
    start = time.monotonic()
    wait_for(lambda: exec_works(api), what=f"kubectl exec through the tunnel after {what}", timeout=timeout)
    took = time.monotonic() - start
    print(f"\nhealed after {what}: {took:.2f}s")
    return took


def test_kubectl_reaches_the_device_behind_nat_through_the_tunnel_and_each_break_heals(
    agent, nat, hub_api, hub_dns, tmp_path
):
    lab, api = nat, hub_api
    tunnel_ip = f"{lab['tun']}.2"
    # The apiserver dials the device's own address: the router drops it (nothing the site dialed).
    direct = kubectl_argv(api)[:4] + [
        "python3",
        "-c",
        "import socket,sys; socket.create_connection((sys.argv[1], 10250), 2)",
    ]
    assert b"TimeoutError" in subprocess.run([*direct, lab["site_ip"]], capture_output=True, timeout=30).stderr

    crt, key = api.kubelet_serving_cert(NODE, ip=tunnel_ip)
    agent.write_manifest("web.yaml", pod_yaml("web", WEB))
    agent.write_manifest("talk.yaml", pod_yaml("talk", TALK))
    node_cfg = api.kubeconfig(tmp_path / "node-kubeconfig", token=api.node_token(NODE))
    argv = (
        "--kubeconfig", str(node_cfg),
        "--node-lease-renew-interval", "1s",
        "--node-status-update-frequency", "1s",
        "--wireguard-config", str(lab["conf"]),
        "--node-api-address", tunnel_ip,
        "--port", NODE_API_PORT,
        "--client-ca-file", str(api.ca_file),
        "--tls-cert-file", str(crt),
        "--tls-private-key-file", str(key),
    )  # fmt: skip
    wrapper = ("nsenter", f"--net=/run/netns/{lab['site_ns']}")
    # The device starts while its hub is down: the rest of the node goes on without the tunnel (the Node, its
    # Lease and the mirror pods take the device's own routes), and the Node says the tunnel is not ready.
    kill_hub(lab)
    agent.start(*argv, wrapper=wrapper)
    wait_for(lambda: tunnel_ready(api) == ("False", "NoHandshake"), what="TunnelReady False on the Node", timeout=120)
    wait_for(lambda: node_ready(api) == "True", what="the Node Ready without its tunnel", timeout=60)
    wait_for(lambda: mirror_phase(api, f"web-{NODE}") == "Running", what="the mirror pod Running", timeout=60)
    assert not exec_works(api)  # the node API listens on the tunnel address alone
    # Only the hub's allowed IPs go into the tunnel: the apiserver (and whatever a pod dials) is reached on the
    # device's own routes, the tunnel network through the interface.
    assert f"dev {lab['site_if']}" not in sh("ip", "route", "get", lab["hub_ip"], netns=lab["site_ns"])
    assert f"dev {lab['site_if']}" in sh("ip", "route", "get", f"{lab['tun']}.1", netns=lab["site_ns"])
    start_hub(lab)
    started = time.monotonic()
    wait_for(lambda: exec_works(api), what="kubectl exec through the tunnel", timeout=180)
    print(f"\nhub up to kubectl exec through the tunnel: {time.monotonic() - started:.2f}s")
    # The node API's metrics through the apiserver's node proxy: the tunnel up, its handshake and bytes.
    metrics = kubectl(api, "get", "--raw", f"/api/v1/nodes/{NODE}/proxy/metrics").stdout.decode()
    assert re.search(r'^kubelet_tunnel_up\{interface="%s"\} 1\.0$' % lab["site_if"], metrics, re.M), metrics[-2000:]
    assert "kubelet_tunnel_receive_bytes_total{" in metrics
    node = api.get(f"/api/v1/nodes/{NODE}")
    assert {"type": "InternalIP", "address": tunnel_ip} in node["status"]["addresses"]  # type: ignore[index]
    # The mirror reports the tunnel on the Node itself.
    wait_for(lambda: tunnel_ready(api) == ("True", "HandshakeRecent"), what="TunnelReady on the Node", timeout=60)

    # exec -i: stdin through the apiserver, the tunnel and the node API.
    done = kubectl(api, "exec", "-i", f"web-{NODE}", "--", "sh", "-c", "wc -c", input=b"x" * 100_000)
    assert done.returncode == 0 and done.stdout.strip() == b"100000", done.stderr
    assert kubectl(api, "exec", f"web-{NODE}", "--", "sh", "-c", "exit 3").returncode == 3

    # exec -it: a terminal.
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    tty = subprocess.Popen(
        kubectl_argv(api, "exec", "-it", f"web-{NODE}", "--", "sh"),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()

    def shows(pattern: bytes) -> bool:
        if select.select([master], [], [], 0.2)[0]:
            with contextlib.suppress(OSError):
                seen.extend(os.read(master, 4096))
        return re.search(pattern, seen) is not None

    try:
        os.write(master, b"stty size; echo $((6*7))x\n")
        wait_for(lambda: shows(rb"33 111") and shows(rb"42x"), what="the terminal's answer", timeout=60)
        os.write(master, b"exit 5\n")
        assert tty.wait(timeout=60) == 5
    finally:
        if tty.poll() is None:
            tty.kill()
            tty.wait()
        os.close(master)

    # logs -f and attach: what the container writes from now on keeps coming.
    for verb in ("logs", "attach"):
        follow = subprocess.Popen(
            kubectl_argv(api, verb, *(["-f"] if verb == "logs" else []), f"talk-{NODE}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert follow.stdout is not None
            lines = [follow.stdout.readline().decode().strip() for _ in range(15)]
        finally:
            follow.kill()
            follow.communicate()
        numbers = [int(x.split("-")[1]) for x in lines if re.fullmatch(r"line-\d+", x)]
        assert len(numbers) == 15 and numbers == sorted(numbers), (verb, lines)

    # port-forward: several connections at once through one session (kubectl listens on the hub's loopback).
    forward = subprocess.Popen(kubectl_argv(api, "port-forward", f"web-{NODE}", ":8080"), stdout=subprocess.PIPE)
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline().decode()
        local = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
        assert local, line
        url = f"http://127.0.0.1:{local[1]}/"
        results: list[bytes] = []

        def fetch() -> None:
            results.append(api.in_netns(lambda: urllib.request.urlopen(url, timeout=60).read()))  # type: ignore[misc]

        threads = [threading.Thread(target=fetch) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert results == [b"hello-through-the-tunnel\n"] * 6
    finally:
        forward.send_signal(signal.SIGINT)
        forward.communicate(timeout=30)

    # cp both ways.
    src = tmp_path / "in.txt"
    src.write_bytes(os.urandom(50_000).hex().encode())
    assert kubectl(api, "cp", str(src), f"web-{NODE}:/tmp/in.txt").returncode == 0
    assert kubectl(api, "cp", f"web-{NODE}:/tmp/in.txt", str(tmp_path / "back.txt")).returncode == 0
    assert (tmp_path / "back.txt").read_bytes() == src.read_bytes()

    # 1. The hub restarted (its wireguard-go SIGKILLed and started again, as a reboot): the device's keepalives
    # make a new handshake.
    kill_hub(lab)
    wait_for(lambda: not reaches_hub(lab), what="the tunnel down with the hub", timeout=30)
    start_hub(lab)
    healed(api, "a hub restart")

    # 2. A NAT rebinding: the router's uplink address changes, which drops its masquerade's mappings; the
    # device's next packets leave from a new address and port, and the hub follows.
    new = rebind_nat(lab)
    healed(api, "a NAT rebinding")
    endpoint = sh("wg", "show", lab["hub_if"], "endpoints", netns=lab["hub_ns"]).split()[1]
    assert endpoint.startswith(f"{new}:"), endpoint

    # 3. The agent SIGKILLed and started again: the interface, its wireguard-go and the pods live on.
    daemons = wireguard_gos(lab)
    pids = sorted(
        c["pid"] for c in agent.containers_of("web") + agent.containers_of("talk") if c["status"] == "running"
    )
    agent.stop(signal.SIGKILL)
    assert reaches_hub(lab)
    agent.start(*argv, wrapper=wrapper)
    healed(api, "an agent SIGKILL and restart")
    assert wireguard_gos(lab) == daemons
    assert (
        sorted(c["pid"] for c in agent.containers_of("web") + agent.containers_of("talk") if c["status"] == "running")
        == pids
    )

    # 4. The hub moved: its WireGuard's address is gone and its name answers another. Nothing reaches the device
    # from the new address (the router forwards only what the site dialed), so only the agent's next lookup of
    # the name (every 30 s, the tunnel's handshakes still fresh) can mend it.
    moved = move_hub(lab, hub_dns)
    t = time.monotonic()
    wait_for(
        lambda: device_endpoint(lab) == f"{moved}:51820", what="the device's endpoint to follow the name", timeout=90
    )
    print(f"\nthe device's endpoint followed the moved hub's name: {time.monotonic() - t:.2f}s")
    healed(api, "the hub's address changed")
    # Followed while the tunnel's handshakes were fresh: by the periodic lookup, not the staleness rule.
    assert [x for x in agent.log().splitlines() if "Tunnel endpoint moved" in x and "stale=False" in x]
    assert hub_dns.asked(lab["hub_name"], since=t)
    metrics = kubectl(api, "get", "--raw", f"/api/v1/nodes/{NODE}/proxy/metrics").stdout.decode()
    mended = 'kubelet_tunnel_reconnects_total{interface="%s",reason="endpoint"} 1.0' % lab["site_if"]
    assert mended in metrics, metrics[-2000:]  # the agent started again in 3., so this count is break 4's alone
    assert tunnel_ready(api) == ("True", "HandshakeRecent")


def node_conditions(api: ApiServer) -> list[dict]:
    try:
        return api.get(f"/api/v1/nodes/{NODE}")["status"].get("conditions", [])  # type: ignore[index]
    except ValueError:  # not registered yet
        return []


def node_ready(api: ApiServer) -> str | None:
    return next((c["status"] for c in node_conditions(api) if c["type"] == "Ready"), None)


def mirror_phase(api: ApiServer, name: str) -> str | None:
    try:
        return api.get(f"/api/v1/namespaces/default/pods/{name}")["status"].get("phase")  # type: ignore[index]
    except ValueError:  # not mirrored yet
        return None


def tunnel_ready(api: ApiServer) -> tuple[str, str] | None:
    return next(((c["status"], c["reason"]) for c in node_conditions(api) if c["type"] == "TunnelReady"), None)


def device_endpoint(lab: dict) -> str | None:
    """The hub's endpoint as the device's wireguard-go has it (its UAPI socket, read from outside the agent)."""
    answer = asyncio.run(uapi.transact(uapi.socket_path(lab["site_if"]), "get=1\n\n", interface=lab["site_if"]))
    return uapi.parse_get(answer).peers[0].endpoint
