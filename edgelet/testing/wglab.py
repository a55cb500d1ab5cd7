"""A WireGuard lab for tests and benches: a "hub" and a "site" network namespace joined by a veth, a real
wireguard-go hub configured with wg(8), and the device's wg-quick file; everything removed on exit.

Addresses are two random private /24s used only inside the two namespaces: nothing is routed outside them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from edgelet.tunnel import keys, uapi
from edgelet.tunnel.config import encode_key

T = TypeVar("T")


def sh(*argv: str, check: bool = True, netns: str | None = None, timeout: float = 30.0) -> str:
    if netns is not None:
        argv = ("ip", "netns", "exec", netns, *argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    return done.stdout


@contextlib.contextmanager
def wireguard_lab(tmp: Path, keepalive: int = 1, nat: bool = False) -> Iterator[dict]:
    """The lab as a dict: namespaces, interfaces, addresses, the device's config file (named after its
    interface) and root dir (whose kept key the hub already knows as its peer).

    With `nat`, a "router" namespace sits between them and masquerades the site's own /24: the hub has a route
    to that /24, but the router forwards from the hub only what the site dialed (conntrack), as a home router
    or a carrier-grade NAT does."""
    tag = secrets.token_hex(3)
    hub, site = f"wgh-{tag}", f"wgs-{tag}"
    under, tun = random.sample(range(16, 250), 2)
    net = {
        "hub_ns": hub,
        "site_ns": site,
        "hub_if": f"wgh{tag}",
        "site_if": f"wgs{tag}",
        "hub_under": f"10.{under}.{random.randrange(256)}",
        "tun": f"10.{tun}.{random.randrange(256)}",
    }
    net["hub_ip"], net["site_ip"] = f"{net['hub_under']}.1", f"{net['hub_under']}.2"
    router = f"wgr-{tag}"
    created: list[str] = []
    try:
        for ns in (hub, site, router) if nat else (hub, site):
            sh("ip", "netns", "add", ns)
            created.append(ns)
            sh("ip", "link", "set", "lo", "up", netns=ns)
        if nat:
            _wire_through_router(net, tag, under, tun)
        else:
            sh("ip", "link", "add", f"vh{tag}", "netns", hub, "type", "veth", "peer", "name", f"vs{tag}", "netns", site)
            sh("ip", "address", "add", f"{net['hub_ip']}/24", "dev", f"vh{tag}", netns=hub)
            sh("ip", "link", "set", f"vh{tag}", "up", netns=hub)
            sh("ip", "address", "add", f"{net['site_ip']}/24", "dev", f"vs{tag}", netns=site)
            sh("ip", "link", "set", f"vs{tag}", "up", netns=site)
        # The hub: wireguard-go configured by wg(8), so edgelet's side is checked against WireGuard's own tool.
        hub_key, conf = _hub_key_and_device_config(tmp, net, keepalive)
        root = tmp / "root"
        loaded = keys.load(conf, root)  # the first start's key, kept under root
        assert loaded is not None
        lab = {**net, "conf": conf, "root": root, "public_key": loaded.public_key, "hub_key": hub_key}
        start_hub(lab)
        yield lab
    finally:
        for ns in reversed(created):
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            sh("ip", "netns", "delete", ns, check=False)
        for name in (net["hub_if"], net["site_if"]):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(uapi.socket_path(name))


def _wire_through_router(net: dict, tag: str, under: int, tun: int) -> None:
    """The hub and the site, each on a veth to the router namespace, which masquerades the site's own /24 and
    forwards from the hub only what the site dialed."""
    hub, site, router = net["hub_ns"], net["site_ns"], f"wgr-{tag}"
    site_under = f"10.{random.choice([n for n in range(16, 250) if n not in (under, tun)])}.{random.randrange(256)}"
    net.update(router_ns=router, site_ip=f"{site_under}.2", router_hub_ip=f"{net['hub_under']}.2")
    sh(
        "ip",
        "link",
        "add",
        f"vh{tag}",
        "netns",
        hub,
        "type",
        "veth",
        "peer",
        "name",
        f"vrh{tag}",
        "netns",
        router,
    )
    sh(
        "ip",
        "link",
        "add",
        f"vs{tag}",
        "netns",
        site,
        "type",
        "veth",
        "peer",
        "name",
        f"vrs{tag}",
        "netns",
        router,
    )
    for ns, dev, addr in (
        (hub, f"vh{tag}", net["hub_ip"]),
        (router, f"vrh{tag}", net["router_hub_ip"]),
        (router, f"vrs{tag}", f"{site_under}.1"),
        (site, f"vs{tag}", net["site_ip"]),
    ):
        sh("ip", "address", "add", f"{addr}/24", "dev", dev, netns=ns)
        sh("ip", "link", "set", dev, "up", netns=ns)
    sh("ip", "route", "add", f"{net['hub_under']}.0/24", "via", f"{site_under}.1", netns=site)
    sh("ip", "route", "add", f"{site_under}.0/24", "via", net["router_hub_ip"], netns=hub)
    sh("sysctl", "-qw", "net.ipv4.ip_forward=1", netns=router)
    sh(
        "iptables",
        "-t",
        "nat",
        "-A",
        "POSTROUTING",
        "-s",
        f"{site_under}.0/24",
        "-o",
        f"vrh{tag}",
        "-j",
        "MASQUERADE",
        netns=router,
    )
    sh(
        "iptables",
        "-A",
        "FORWARD",
        "-i",
        f"vrh{tag}",
        "-m",
        "conntrack",
        "--ctstate",
        "ESTABLISHED,RELATED",
        "-j",
        "ACCEPT",
        netns=router,
    )
    sh("iptables", "-A", "FORWARD", "-i", f"vrh{tag}", "-j", "DROP", netns=router)


def _hub_key_and_device_config(tmp: Path, net: dict, keepalive: int) -> tuple[Path, Path]:
    """The hub's private key file, and the device's wg-quick file naming the hub as its one peer."""
    hub_key = tmp / "hub.key"
    hub_key.write_text(sh("wg", "genkey"))
    hub_key.chmod(0o600)
    hub_pub = subprocess.run(
        ["wg", "pubkey"], input=hub_key.read_text(), capture_output=True, text=True, check=True
    ).stdout.strip()
    conf = tmp / f"{net['site_if']}.conf"
    conf.write_text(f"""[Interface]
Address = {net["tun"]}.2/24

[Peer]
PublicKey = {hub_pub}
Endpoint = {net["hub_ip"]}:51820
AllowedIPs = {net["tun"]}.0/24
PersistentKeepalive = {keepalive}
""")
    conf.chmod(0o600)
    return hub_key, conf


def wireguard_gos(lab: dict) -> list[str]:
    """The wireguard-go daemons in the site namespace (an agent may run there too)."""
    pids = sh("ip", "netns", "pids", lab["site_ns"]).split()
    return [p for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "wireguard-go"]


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


def reaches_hub(lab: dict) -> bool:
    return sh(sys.executable, "-c", PROBE, f"{lab['tun']}.1", netns=lab["site_ns"]).strip() == "reached"


def start_hub(lab: dict) -> None:
    """(Re)start the hub's wireguard-go with its key, address and the device as its peer, as a hub's boot does."""
    sh("wireguard-go", lab["hub_if"], netns=lab["hub_ns"])
    sh(
        "wg",
        "set",
        lab["hub_if"],
        "private-key",
        str(lab["hub_key"]),
        "listen-port",
        "51820",
        "peer",
        encode_key(lab["public_key"]),
        "allowed-ips",
        f"{lab['tun']}.2/32",
        netns=lab["hub_ns"],
    )
    sh("ip", "address", "add", f"{lab['tun']}.1/24", "dev", lab["hub_if"], netns=lab["hub_ns"])
    sh("ip", "link", "set", lab["hub_if"], "up", netns=lab["hub_ns"])


_CLONE_NEWNET = 0x40000000


def _enter_netns(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


class InNetns:
    """Calls run in threads that entered a network namespace (a thread's own, as setns(2) makes it): the test's
    sockets to what listens only there (an apiserver on the hub's loopback, a kubectl port-forward)."""

    def __init__(self, netns: str, workers: int = 8) -> None:
        self._pool = ThreadPoolExecutor(
            workers, thread_name_prefix=f"in-{netns}", initializer=_enter_netns, initargs=(netns,)
        )

    def __call__(self, fn: Callable[..., T], *args: object) -> T:
        return self._pool.submit(fn, *args).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def hub_wireguard_gos(lab: dict) -> list[str]:
    pids = sh("ip", "netns", "pids", lab["hub_ns"]).split()
    return [p for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "wireguard-go"]


def kill_hub(lab: dict) -> None:
    """The hub goes down as in a power cut: its wireguard-go SIGKILLed and gone with its TUN device (a new one
    cannot take the name before), its stale UAPI socket removed."""
    for pid in hub_wireguard_gos(lab):
        os.kill(int(pid), signal.SIGKILL)
    for _ in range(200):
        link = sh("ip", "link", "show", "dev", lab["hub_if"], check=False, netns=lab["hub_ns"])
        if not hub_wireguard_gos(lab) and not link:
            break
        time.sleep(0.05)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(uapi.socket_path(lab["hub_if"]))


def rebind_nat(lab: dict) -> str:
    """A NAT rebinding in the router of a `nat` lab: its uplink address changes (a carrier reassigning it), which
    drops its masquerade's mappings, and its NAT table is flushed and set again as at its boot. Returns the new
    uplink address: the device's packets leave from it (and a new port) from now on."""
    veth, router = f"vrh{lab['router_ns'].split('-')[1]}", lab["router_ns"]
    old = lab["router_hub_ip"]
    new = f"{lab['hub_under']}.{3 if old.endswith('.2') else 2}"
    sh("ip", "address", "del", f"{old}/24", "dev", veth, netns=router)
    sh("ip", "address", "add", f"{new}/24", "dev", veth, netns=router)
    sh("iptables", "-t", "nat", "-F", netns=router)
    sh("iptables", "-t", "nat", "-A", "POSTROUTING", "-o", veth, "-j", "MASQUERADE", netns=router)
    lab["router_hub_ip"] = new
    return new
