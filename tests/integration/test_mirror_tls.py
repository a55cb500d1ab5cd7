"""A wrong clock as a device without an RTC has it, seen through a real TLS handshake on loopback.

The apiserver's certificate is valid from years ahead (what a board that booted in 1970 or 2001 sees of a
certificate issued today): the handshake fails, and the error says that the clock is the likely cause.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from edgelet.mirror.client import KubeClient
from edgelet.mirror.errors import Unreachable
from edgelet.mirror.kubeconfig import ClientConfig


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], check=True, cwd=cwd, capture_output=True)


def _certs(d: Path, start: str, end: str) -> tuple[Path, Path, Path]:
    """(CA, server certificate, server key); the server's validity is [start, end] (YYYYMMDDHHMMSSZ)."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=edgelet-test-ca",
        cwd=d,
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=apiserver", cwd=d
    )
    (d / "index.txt").touch()
    (d / "serial").write_text("01\n")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    (d / "ca.cnf").write_text(f"""[ca]
default_ca = here
[here]
database = {d}/index.txt
new_certs_dir = {d}
serial = {d}/serial
default_md = sha256
policy = any
[any]
commonName = supplied
""")
    _openssl(
        "ca",
        "-batch",
        "-config",
        "ca.cnf",
        "-cert",
        "ca.crt",
        "-keyfile",
        "ca.key",
        "-in",
        "srv.csr",
        "-out",
        "srv.crt",
        "-startdate",
        start,
        "-enddate",
        end,
        "-extfile",
        "ext",
        cwd=d,
    )
    return d / "ca.crt", d / "srv.crt", d / "srv.key"


def _serve(cert: Path, key: Path) -> tuple[int, threading.Event]:
    """A TLS listener on loopback that completes handshakes (or sees them fail) until told to stop."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.settimeout(0.2)
    stop = threading.Event()

    def loop() -> None:
        with sock:
            while not stop.is_set():
                try:
                    conn, _ = sock.accept()
                except TimeoutError:
                    continue
                try:
                    with ctx.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
                except (OSError, ssl.SSLError):
                    pass

    threading.Thread(target=loop, daemon=True).start()
    return sock.getsockname()[1], stop


@pytest.mark.parametrize(
    "start, end, says",
    [
        ("20991231000000Z", "21000101000000Z", "clock is probably behind"),
        ("20000101000000Z", "20000201000000Z", "certificate has expired"),
    ],
)
def test_a_certificate_outside_its_dates_is_blamed_on_the_clock(
    tmp_path: Path, start: str, end: str, says: str
) -> None:
    ca, cert, key = _certs(tmp_path, start, end)
    port, stop = _serve(cert, key)

    async def ask() -> None:
        client = KubeClient(
            ClientConfig(server=f"https://127.0.0.1:{port}", ca_file=str(ca), token="t"), version="test", timeout=30
        )
        try:
            await client.request("GET", "/api/v1/nodes/n1")
        finally:
            await client.aclose()

    try:
        with pytest.raises(Unreachable, match=says) as info:
            asyncio.run(ask())
    finally:
        stop.set()
    assert info.value.clock_skew is True
