"""Clients that flood what never reads (a WebSocket channel of a node API session, a TCP port such as kubectl
port-forward's) and the agent's resident memory while they do: what the back-pressure tests and
bench/streaming_flood.py measure."""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

CHUNK = 64 * 1024


def rss_kib(pid: int) -> int:
    """The process's resident set (VmRSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"no VmRSS for pid {pid}")


class RssPeak:
    """The highest VmRSS of `pid` sampled every `interval` seconds while the `with` block runs."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid, self.interval = pid, interval
        self.before = self.peak = rss_kib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, rss_kib(self.pid))

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_kib(self.pid))

    @property
    def growth_kib(self) -> int:
        return self.peak - self.before


@dataclass
class Flood:
    sent: int  # bytes the kernel took from us
    pushed_back: bool  # a send blocked for `stall` seconds: the server stopped reading


def ws_flood(
    port: int, ctx: ssl.SSLContext, path: str, subprotocol: str, *, channel: int, total: int, stall: float = 3.0
) -> Flood:
    """Upgrade `path` on the node API at `port` and send `total` bytes on `channel` (never reading what the
    server sends), until done or until one send blocks for `stall` seconds."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, BytesMessage, RejectConnection, Request

    ws = WSConnection(ConnectionType.CLIENT)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=60) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(ws.send(Request(host="127.0.0.1", target=path, subprotocols=[subprotocol])))
        accepted = False
        while not accepted:
            data = tls.recv(65536)
            if not data:
                raise ConnectionError(f"{path}: the server closed during the upgrade")
            ws.receive_data(data)
            for ev in ws.events():
                if isinstance(ev, RejectConnection):
                    raise ConnectionError(f"{path}: upgrade rejected: {ev.status_code}")
                accepted = accepted or isinstance(ev, AcceptConnection)
        frame = ws.send(BytesMessage(data=bytes([channel]) + b"\0" * CHUNK))  # one masked frame, sent again
        tls.settimeout(stall)
        sent = 0
        try:
            while sent < total:
                tls.sendall(frame)
                sent += CHUNK
        except TimeoutError:
            return Flood(sent, True)
        return Flood(sent, False)


def tcp_flood(port: int, total: int, stall: float = 3.0) -> Flood:
    """Send `total` bytes to `port` on loopback, until done, reset, or one send blocks for `stall` seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=stall) as s:
        chunk, sent = b"\0" * CHUNK, 0
        try:
            while sent < total:
                s.sendall(chunk)
                sent += len(chunk)
        except TimeoutError:
            return Flood(sent, True)
        except OSError:
            return Flood(sent, False)  # reset
    return Flood(sent, False)
