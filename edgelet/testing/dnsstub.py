"""A DNS server for tests and benches, in a network namespace the test made: it answers there at the machine's
own nameserver addresses, so a process in that namespace resolves the test's names with the real resolver.

The machine's resolv.conf is read, never written: the namespace's loopback is given its nameserver addresses
and the server binds them, so glibc's queries from that namespace (an agent started with `nsenter --net`,
which keeps the machine's files) reach it and no other. It answers A and AAAA for the names it holds (TTL 0,
authoritative), NXDOMAIN for the rest, and records every query, so a test can see when a name was asked.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from edgelet.testing.wglab import InNetns, sh

_A, _AAAA, _IN = 1, 28, 1


def nameservers(resolv_conf: str = "/etc/resolv.conf") -> list[str]:
    """The nameserver addresses glibc asks (resolv.conf's, or 127.0.0.1 without any, as glibc does)."""
    found = []
    try:
        with open(resolv_conf) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 2 and fields[0] == "nameserver":
                    found.append(fields[1].split("%", 1)[0])
    except FileNotFoundError:
        pass
    return found or ["127.0.0.1"]


def question(query: bytes) -> tuple[str, int, int] | None:
    """A one-question query's (name, type, where the question ends) (pure); None for anything else."""
    if len(query) < 12:
        return None
    flags, qdcount = struct.unpack("!HH", query[2:6])
    if flags & 0x8000 or qdcount != 1:
        return None
    labels, i = [], 12
    while i < len(query) and query[i]:
        if query[i] & 0xC0:
            return None
        labels.append(query[i + 1 : i + 1 + query[i]])
        i += 1 + query[i]
    if i + 5 > len(query):
        return None
    (qtype,) = struct.unpack("!H", query[i + 1 : i + 3])
    return b".".join(labels).decode(errors="replace").lower(), qtype, i + 5


def answer(query: bytes, records: dict[str, list[str]]) -> bytes | None:
    """The reply to one query (pure): the name's addresses of the type asked; NXDOMAIN for a name not held."""
    asked = question(query)
    if asked is None:
        return None
    name, qtype, end = asked
    qid, flags = struct.unpack("!HH", query[:4])
    addresses = records.get(name)
    version = {_A: 4, _AAAA: 6}.get(qtype)
    raws = [ipaddress.ip_address(a).packed for a in addresses or () if ipaddress.ip_address(a).version == version]
    rcode = 0 if addresses is not None else 3  # a name with no address of the type asked: no error, no answers
    header = struct.pack("!HHHHHH", qid, 0x8400 | (flags & 0x0100) | rcode, 1, len(raws), 0, 0)
    rrs = b"".join(b"\xc0\x0c" + struct.pack("!HHIH", qtype, _IN, 0, len(raw)) + raw for raw in raws)
    return header + query[12:end] + rrs


@dataclass(frozen=True)
class Query:
    at: float  # monotonic
    name: str
    qtype: int


class DnsStub:
    """The server, serving from a thread until `close`; `set` changes a name's addresses at once."""

    def __init__(self, netns: str, records: dict[str, Sequence[str]], servers: Sequence[str] | None = None) -> None:
        self.netns = netns
        self.records = {k.lower().rstrip("."): list(v) for k, v in records.items()}
        self.queries: list[Query] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        in_ns = InNetns(netns, workers=1)
        try:
            for server in servers or nameservers():
                ip = ipaddress.ip_address(server)
                if not ip.is_loopback:  # the namespace's own lo has 127.0.0.0/8 and ::1 already
                    sh("ip", "address", "add", f"{ip}/{ip.max_prefixlen}", "dev", "lo", netns=netns)
                self._sockets.append(in_ns(self._bind(str(ip))))
        except BaseException:
            self.close()
            raise
        finally:
            in_ns.close()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"dns-{netns}", daemon=True)
        self._thread.start()

    @staticmethod
    def _bind(address: str) -> Callable[[], socket.socket]:
        def bind() -> socket.socket:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.bind((address, 53))  # made in the namespace: it stays there, whichever thread serves it
            return sock

        return bind

    def set(self, name: str, addresses: Sequence[str]) -> None:
        with self._lock:
            self.records[name.lower().rstrip(".")] = list(addresses)

    def asked(self, name: str, since: float = 0.0) -> list[Query]:
        with self._lock:
            return [q for q in self.queries if q.name == name.lower().rstrip(".") and q.at >= since]

    def _serve(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select(self._sockets, [], [], 0.2)
            for sock in ready:
                try:
                    query, peer = sock.recvfrom(4096)
                except OSError:
                    continue
                asked = question(query)
                with self._lock:
                    reply = answer(query, self.records)
                    if asked is not None:
                        self.queries.append(Query(time.monotonic(), asked[0], asked[1]))
                if reply is not None:
                    sock.sendto(reply, peer)

    def close(self) -> None:
        if hasattr(self, "_stop"):
            self._stop.set()
            self._thread.join(5)
        for sock in self._sockets:
            sock.close()


@contextlib.contextmanager
def named_hub(lab: dict) -> Iterator[DnsStub]:
    """A wglab lab whose device names its hub by DNS: the hub's WireGuard answers at an address of its own (the
    uplink /24's .10, beside the apiserver's .1), the device's file says `Endpoint = hub-TAG.test:51820`, and a
    DnsStub in the site namespace answers that name. The lab gains `hub_name` and `hub_wg_ip`."""
    tag = lab["hub_ns"].split("-")[1]
    lab["hub_name"], lab["hub_wg_ip"] = f"hub-{tag}.test", f"{lab['hub_under']}.10"
    sh("ip", "address", "add", f"{lab['hub_wg_ip']}/24", "dev", f"vh{tag}", netns=lab["hub_ns"])
    conf = lab["conf"]
    conf.write_text(re.sub(r"(?m)^Endpoint = .*$", f"Endpoint = {lab['hub_name']}:51820", conf.read_text()))
    dns = DnsStub(lab["site_ns"], {lab["hub_name"]: [lab["hub_wg_ip"]]})
    try:
        yield dns
    finally:
        dns.close()


def move_hub(lab: dict, dns: DnsStub) -> str:
    """The hub's WireGuard moves to another address of its /24 (the old one gone from its namespace, as a hub
    re-addressed or replaced) and its name follows; returns the new address."""
    tag = lab["hub_ns"].split("-")[1]
    old = lab["hub_wg_ip"]
    new = f"{lab['hub_under']}.{11 if old.endswith('.10') else 10}"
    sh("ip", "address", "add", f"{new}/24", "dev", f"vh{tag}", netns=lab["hub_ns"])
    sh("ip", "address", "del", f"{old}/24", "dev", f"vh{tag}", netns=lab["hub_ns"])
    dns.set(lab["hub_name"], [new])
    lab["hub_wg_ip"] = new
    return new
