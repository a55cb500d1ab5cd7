"""The h11 server on a real unix socket and TCP loopback: keep-alive, errors, HEAD, streaming, hang-ups, stale sockets."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from pathlib import Path

import pytest

from edgelet.server.api import Api, ApiServer
from edgelet.server.http import HttpServer, Request, Response, ServerError
from edgelet.server.routes import HttpError


async def _raw(path: Path, data: bytes, *, until_close: bool = True) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(data)
    await writer.drain()
    out = await asyncio.wait_for(reader.read(-1) if until_close else reader.read(65536), 5)
    writer.close()
    return out


def run_server(tmp_path: Path, handler, scenario):
    sock = tmp_path / "t.sock"

    async def main():
        server = HttpServer(handler, idle_timeout=2)
        await server.listen_unix(sock)
        try:
            return await scenario(sock)
        finally:
            await server.close()

    return asyncio.run(main())


async def echo(request: Request) -> Response:
    if request.target == "/boom":
        raise RuntimeError("kaput")
    if request.target == "/missing":
        raise HttpError(404, "no such thing")
    return Response(200, f"{request.method} {request.target}".encode())


def test_socket_mode_keepalive_and_errors(tmp_path):
    async def scenario(sock: Path):
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        two = await _raw(
            sock, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        boom = await _raw(sock, b"GET /boom HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        missing = await _raw(sock, b"GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        garbage = await _raw(sock, b"NOT HTTP AT ALL\r\n\r\n")
        head = await _raw(sock, b"HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        huge = await _raw(sock, b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n")
        return two, boom, missing, garbage, head, huge

    two, boom, missing, garbage, head, huge = run_server(tmp_path, echo, scenario)
    assert two.count(b"HTTP/1.1 200") == 2 and b"GET /a" in two and b"GET /b" in two
    assert boom.startswith(b"HTTP/1.1 500")
    assert json.loads(boom.split(b"\r\n\r\n", 1)[1])["message"] == "internal error: RuntimeError: kaput"
    body = json.loads(missing.split(b"\r\n\r\n", 1)[1])
    assert missing.startswith(b"HTTP/1.1 404") and body["reason"] == "NotFound" and body["message"] == "no such thing"
    assert garbage.startswith(b"HTTP/1.1 400")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n") and b"content-length: 7" in head.lower()
    assert huge.startswith(b"HTTP/1.1 431") or huge.startswith(b"HTTP/1.1 400")


def test_streaming_is_chunked_and_a_hangup_closes_the_stream(tmp_path):
    state = {"closed": False}

    async def handler(request: Request) -> Response:
        async def gen():
            try:
                yield b"first\n"
                while True:
                    await asyncio.sleep(0.01)
                    yield b""
            finally:
                state["closed"] = True

        return Response(200, gen())

    async def scenario(sock: Path):
        reader, writer = await asyncio.open_unix_connection(str(sock))
        writer.write(b"GET /logs HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        chunk = await asyncio.wait_for(reader.readuntil(b"first\n"), 5)
        writer.close()
        for _ in range(200):
            if state["closed"]:
                break
            await asyncio.sleep(0.01)
        return head, chunk

    head, chunk = run_server(tmp_path, handler, scenario)
    assert b"transfer-encoding: chunked" in head.lower()
    assert chunk.endswith(b"first\n")
    assert state["closed"], "the stream was not closed after the client hung up"


def test_stale_socket_is_replaced_and_a_live_one_is_refused(tmp_path):
    stale = tmp_path / "t.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # bound, never listening: what a killed agent leaves

    async def scenario(sock: Path):
        other = HttpServer(echo)
        with pytest.raises(ServerError, match="already running"):
            await other.listen_unix(sock)
        return await _raw(sock, b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

    assert run_server(tmp_path, echo, scenario).startswith(b"HTTP/1.1 200")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ServerError, match="not a socket"):
        asyncio.run(HttpServer(echo).listen_unix(tmp_path / "file"))


class _Sources:
    """Just enough of ApiSources for the healthz listener test."""

    def __init__(self) -> None:
        from edgelet.util.clock import FakeClock

        self.clock = FakeClock()
        self.metrics = None

    def last_sync_iteration(self):
        return self.clock.monotonic()

    def last_relist(self):
        return None


def test_api_server_tcp_serves_healthz_only_and_removes_its_socket(tmp_path):
    api = Api(_Sources())  # type: ignore[arg-type]

    async def main():
        server = ApiServer(api, tmp_path, healthz_port=0)
        server._port = 0  # listen_tcp on an ephemeral port below
        await server.start()
        port = await server._server.listen_tcp("127.0.0.1", 0, api.handle_public)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        out = await asyncio.wait_for(reader.read(-1), 5)
        writer.close()
        sock_existed = server.socket.exists()
        await server.close()
        return out, sock_existed, server.socket.exists()

    out, existed, exists_after = asyncio.run(main())
    first, second = out.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"500") and b"pleg has yet to be successful" in first
    assert second.startswith(b"404") and b"only on the local socket" in second
    assert existed and not exists_after
    assert not os.path.exists(tmp_path / "edgelet.sock")


FLOOD = """
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
conns = []
for _ in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /healthz HTTP/1.1\\r\\nHo")
    conns.append(s)
print("flooding", flush=True)
for _ in range(600):  # a byte now and then on every connection, until killed
    for s in conns:
        try:
            s.sendall(b"x")
        except OSError:
            pass
    time.sleep(0.5)
"""


@pytest.mark.privileged
def test_a_local_flood_neither_locks_root_out_of_the_socket_nor_starves_healthz(tmp_path):
    """70 trickling connections from uid 65534 (nobody): the socket answers root, /healthz answers too."""
    import sys

    sock = tmp_path / "t.sock"

    async def main():
        server = HttpServer(echo, max_connections=16, idle_timeout=60, request_timeout=3)
        await server.listen_unix(sock)
        port = await server.listen_tcp("127.0.0.1", 0)
        # The system's python: nobody may not read the venv's; the script needs only the standard library.
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.base_executable
        flood = await asyncio.create_subprocess_exec(
            python, "-c", FLOOD, str(port), "70", user=65534, cwd="/", stdout=asyncio.subprocess.PIPE
        )
        try:
            assert (await asyncio.wait_for(flood.stdout.readline(), 30)).strip() == b"flooding"
            answers = []
            for i in range(5):
                answers.append(
                    await _raw(sock, f"GET /root{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                )
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                await writer.drain()
                answers.append(await asyncio.wait_for(reader.read(-1), 10))
                writer.close()
                await asyncio.sleep(0.5)
            return answers
        finally:
            flood.kill()
            await flood.wait()
            await server.close()

    answers = asyncio.run(main())
    assert all(a.startswith(b"HTTP/1.1 200") for a in answers), answers
