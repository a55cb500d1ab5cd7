"""A small HTTP/1.1 server on asyncio streams and h11: keep-alive, chunked streaming, limits, clean shutdown.

The handler is `async (Request) -> Response`; a Response body is bytes or
an async iterator of bytes (sent chunked; the connection closes after it,
and the iterator is cancelled when the client goes away). Requests are
GET-style: a request body is read and discarded up to `MAX_BODY`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import h11

from edgelet.errors import EdgeletError
from edgelet.server.routes import HttpError, status_body
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    import ssl as ssl_

log = get_logger(__name__)

MAX_HEADER = 16 * 1024
MAX_BODY = 64 * 1024
IDLE_TIMEOUT = 60.0  # a keep-alive connection with no request for this long is closed
# Once a request's first byte is in, all of it must be within this: a peer trickling a byte at a time
# cannot hold a connection longer by being slow.
REQUEST_TIMEOUT = 10.0
MAX_CONNECTIONS = 64  # per listener; a full listener makes room by dropping its oldest connection still reading
READ_SIZE = 64 * 1024
TLS_HANDSHAKE_TIMEOUT = 10.0  # a peer that opens a TLS connection and stalls the handshake is dropped
JSON = "application/json"


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: tuple[tuple[str, str], ...] = ()
    peer_cert: dict | None = None  # a verified TLS client certificate (ssl's getpeercert()), for authentication


@dataclass
class Response:
    status: int = 200
    body: bytes | AsyncIterator[bytes] = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Upgrade(Response):
    """Switch the connection to `protocol` (101 Switching Protocols) and hand its socket to `run`.

    The socket is a non-blocking duplicate of the connection's, read by no
    one else once the switch is made (the transport stops reading before the
    101 goes out, so bytes and descriptors the client sends next reach `run`
    untouched); the connection closes when `run` returns.
    """

    protocol: str = ""
    run: Callable[[socket.socket], Awaitable[None]] | None = None
    # Instead of `run`: the connection's own stream pair (TLS stays in place) and the bytes the client sent
    # after its request, for protocols spoken through the transport (SPDY on the node API).
    run_streams: Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]] | None = None


Handler = Callable[[Request], Awaitable[Response]]


def error_response(err: HttpError) -> Response:
    return Response(err.status, status_body(err), JSON, list(err.headers))


class ServerError(EdgeletError):
    """A listener could not be opened (address in use, another edgelet on the socket, ...)."""


class HttpServer:
    """Serves `handler` on any number of listeners; `close()` stops listening and drops open connections."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout: float = IDLE_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self._handler = handler
        self._max = max_connections
        self._idle = idle_timeout
        self._request_timeout = request_timeout
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task] = set()

    async def listen_unix(self, path: Path, mode: int = 0o600) -> None:
        """Listen on a unix socket at `path`, replacing a stale one; no one can connect before `mode` is set."""
        _remove_stale_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            # Bound but not yet listening: a connect is refused until the mode is right.
            os.chmod(path, mode)
            sock.listen(16)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ServerError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
        listener = _Listener(str(path), self._max)
        self._servers.append(
            await asyncio.start_unix_server(lambda r, w: self._on_connection(r, w, None, listener), sock=sock)
        )

    async def listen_tcp(
        self,
        host: str,
        port: int,
        handler: Handler | None = None,
        ssl: ssl_.SSLContext | None = None,
        *,
        freebind: bool = False,
    ) -> int:
        """Listen on TCP (optionally with its own handler, optionally TLS); returns the port (useful with port 0).

        `freebind` binds `host` whether or not an interface has it yet (Linux's IP_FREEBIND): the listener then
        answers on that address whenever it exists, and stays across the interface going and coming back.
        """
        listener = _Listener(f"{host}:{port}", self._max)

        def cb(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> Awaitable[None]:
            return self._on_connection(r, w, handler, listener)

        try:
            tls_timeout = TLS_HANDSHAKE_TIMEOUT if ssl else None
            if freebind:
                sock = _freebind_socket(host, port)
                server = await asyncio.start_server(cb, sock=sock, ssl=ssl, ssl_handshake_timeout=tls_timeout)
            else:
                server = await asyncio.start_server(
                    cb, host, port, reuse_address=True, ssl=ssl, ssl_handshake_timeout=tls_timeout
                )
        except OSError as exc:
            raise ServerError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        for s in self._servers:
            s.close()
        for t in list(self._connections):
            t.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        for s in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(s.wait_closed(), 1.0)
        self._servers.clear()

    async def _on_connection(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handler: Handler | None = None,
        listener: _Listener | None = None,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        listener = listener or _Listener("?", self._max)
        if len(listener.connections) >= listener.limit and not listener.make_room():
            log.warning(
                "Too many API connections, all busy; closing a new one", listener=listener.name, limit=listener.limit
            )
            writer.close()
            return
        conn = Connection(reader, writer, handler or self._handler, self._idle, self._request_timeout)
        self._connections.add(task)
        listener.connections[task] = conn
        try:
            await conn.serve()
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away; nothing to tell anyone
        finally:
            self._connections.discard(task)
            listener.connections.pop(task, None)
            writer.close()
            # Bounded: a peer that never reads again must not hold up the agent's stop.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)


class _Listener:
    """One listening socket's own connection limit: a flood on the TCP /healthz port never fills the
    unix socket's, so root's `edgelet pods` always gets through."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.connections: dict[asyncio.Task, Connection] = {}

    def make_room(self) -> bool:
        """Drop the connection that has waited longest without a complete request; False when every one is
        being answered. Idle and trickling peers thus cannot keep a newcomer out."""
        reading = [(c.since, t) for t, c in self.connections.items() if c.reading and not t.done()]
        if not reading:
            return False
        _, oldest = min(reading, key=lambda x: x[0])
        oldest.cancel()
        self.connections.pop(oldest, None)
        return True


class Connection:
    """One client connection: requests served one at a time, as HTTP/1.1 without pipelining does."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handler: Handler,
        idle_timeout: float,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self._idle = idle_timeout
        self._request_timeout = request_timeout
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER)
        self._loop = asyncio.get_running_loop()
        self.reading = True  # waiting for (the rest of) a request, not answering one
        self.since = self._loop.time()  # when the current wait began
        self._deadline: float | None = None  # the whole request is due by then, once its first byte is in

    async def _next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        while True:
            event = self._conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            now = self._loop.time()
            wait = self._idle if self._deadline is None else self._deadline - now
            if wait <= 0:
                raise TimeoutError
            async with asyncio.timeout(wait):
                data = await self._reader.read(READ_SIZE)
            if data and self._deadline is None:
                self._deadline = self._loop.time() + self._request_timeout
            self._conn.receive_data(data)  # b"" is EOF

    async def _send(self, event: h11.Event) -> None:
        data = self._conn.send(event)
        if data:
            self._writer.write(data)
            await self._writer.drain()

    async def serve(self) -> None:
        while True:
            try:
                event = await self._next_event()
                if isinstance(event, (h11.ConnectionClosed,)) or event is h11.PAUSED:
                    return
                assert isinstance(event, h11.Request)
                request = Request(
                    event.method.decode("ascii", "replace"),
                    event.target.decode("ascii", "replace"),
                    tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers),
                    self._writer.get_extra_info("peercert"),
                )
                body = 0
                while not isinstance(ev := await self._next_event(), h11.EndOfMessage):
                    if isinstance(ev, h11.Data):
                        body += len(ev.data)
                        if body > MAX_BODY:
                            raise HttpError(400, f"request body larger than {MAX_BODY} bytes")
                    elif isinstance(ev, h11.ConnectionClosed):
                        return
            except h11.RemoteProtocolError as exc:
                await self._refuse(HttpError(exc.error_status_hint, f"bad request: {exc}"))
                return
            except HttpError as exc:
                await self._refuse(exc)
                return
            except TimeoutError:
                return  # idle keep-alive connection, or a request that did not arrive in time
            self.reading = False
            response = await self._respond(request)
            if isinstance(response, Upgrade):
                await self._upgrade(response)
                return
            await self._write_response(request, response)
            self.reading, self.since, self._deadline = True, self._loop.time(), None
            if self._conn.our_state is h11.MUST_CLOSE or self._conn.their_state is h11.MUST_CLOSE:
                return
            try:
                self._conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _respond(self, request: Request) -> Response:
        try:
            return await self._handler(request)
        except HttpError as exc:
            return error_response(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("API request failed", exc, method=request.method, target=request.target)
            return error_response(HttpError(500, f"internal error: {type(exc).__name__}: {exc}"))

    async def _upgrade(self, upgrade: Upgrade) -> None:
        if upgrade.run_streams is not None:
            await self._send(
                h11.InformationalResponse(
                    status_code=101,
                    headers=[("Upgrade", upgrade.protocol), ("Connection", "Upgrade"), *upgrade.headers],
                )
            )
            trailing, _closed = self._conn.trailing_data
            await upgrade.run_streams(self._reader, self._writer, bytes(trailing))
            return
        assert upgrade.run is not None
        # A read transport (uvloop's too, though it does not subclass asyncio.ReadTransport).
        transport = cast(asyncio.ReadTransport, self._writer.transport)
        transport.pause_reading()  # from here on the socket is `run`'s (see Upgrade)
        await self._send(
            h11.InformationalResponse(
                status_code=101, headers=[("Upgrade", upgrade.protocol), ("Connection", "Upgrade"), *upgrade.headers]
            )
        )
        raw = self._writer.get_extra_info("socket")
        sock = socket.socket(fileno=os.dup(raw.fileno()))
        sock.setblocking(False)
        try:
            await upgrade.run(sock)
        finally:
            sock.close()

    async def _refuse(self, err: HttpError) -> None:
        if self._conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
            await self._write_response(Request("GET", "/"), error_response(err), close=True)

    async def _write_response(self, request: Request, response: Response, *, close: bool = False) -> None:
        headers = [("Content-Type", response.content_type), *response.headers]
        body = response.body
        streaming = not isinstance(body, bytes)
        if isinstance(body, bytes):
            headers.append(("Content-Length", str(len(body))))
        if close or streaming:
            headers.append(("Connection", "close"))
        await self._send(h11.Response(status_code=response.status, headers=headers))
        if request.method == "HEAD":
            if streaming:
                await response.body.aclose()  # type: ignore[union-attr]
        elif streaming:
            await self._stream(response.body)  # type: ignore[arg-type]
        elif isinstance(body, bytes) and body:
            await self._send(h11.Data(data=body))
        await self._send(h11.EndOfMessage())

    async def _stream(self, body: AsyncIterator[bytes]) -> None:
        """Send chunks as they come; stop (closing the iterator) when the client hangs up."""

        async def pump() -> None:
            async for chunk in body:
                if chunk:
                    await self._send(h11.Data(data=chunk))

        hangup = asyncio.ensure_future(self._reader.read(READ_SIZE))
        sender = asyncio.ensure_future(pump())
        try:
            done, _ = await asyncio.wait({hangup, sender}, return_when=asyncio.FIRST_COMPLETED)
            if sender not in done:
                # Anything read while streaming is a hang-up or a request we will not serve (Connection: close).
                raise ConnectionResetError("client closed the connection during a streamed response")
            sender.result()
        finally:
            for t in (hangup, sender):
                t.cancel()
            await asyncio.gather(hangup, sender, return_exceptions=True)
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()


def _remove_stale_socket(path: Path) -> None:
    """Remove a socket left by an edgelet that died; refuse when one still answers on it."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ServerError(f"{path} exists and is not a socket; not removing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        path.unlink(missing_ok=True)
        return
    except OSError as exc:
        raise ServerError(f"cannot check the existing socket {path}: {exc.strerror or exc}") from exc
    finally:
        probe.close()
    raise ServerError(f"another process serves on {path} (is edgelet already running?)")


_IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)  # linux/in.h; Python names it only on some builds


def _freebind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host` (an IP address), bound before any interface need have it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_IP, _IP_FREEBIND, 1)  # IPv6 sockets honour it too
        sock.bind((host, port))
        sock.listen(100)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
