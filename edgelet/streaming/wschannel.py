"""kubelet's WebSocket channel protocols for exec on the node API (`channel.k8s.io`, `base64.channel.k8s.io`,
`v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, `v5.channel.k8s.io`): what the Python client and a translating
apiserver send, framed by wsproto over the connection h11 upgraded.

Every message carries one channel: binary protocols put the channel number
in the first byte, base64 ones an ASCII digit followed by the base64 of the
data. Channels are 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize; v5 adds
the client's close signal (`[255, channel]`: stdin's EOF). The channels are
handed to `remoteexec.run_exec` like SPDY streams.

WebSocket has no flow control of its own: a channel holding more than
`MAX_BUFFER` unread bytes stops the reading of the socket (TCP then pushes
back on the client) until the application has read it down, so a command or
listener that never reads costs a bounded buffer, never the agent's memory.
A port-forward takes at most `MAX_PORTS` ports (two channels each).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from edgelet.streaming.errors import RequestRefused
from edgelet.streaming.spdy import StreamReset
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.util.clock import Clock

log = get_logger(__name__)

PORT_FORWARD_PROTOCOLS = ("v4.channel.k8s.io", "v4.base64.channel.k8s.io")
EXEC_PROTOCOLS = (
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
)
CHANNELS = {"stdin": 0, "stdout": 1, "stderr": 2, "error": 3, "resize": 4}
CLOSE_SIGNAL = 255
MAX_MESSAGE = 1024 * 1024
MAX_BUFFER = 1024 * 1024  # unread data one channel may hold before the socket is no longer read
MAX_PORTS = 16  # of one port-forward: each is a connection into the pod, and channel numbers are one byte
IDLE_TIMEOUT = 4 * 3600.0
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def is_websocket_upgrade(headers: Iterable[tuple[str, str]]) -> bool:
    h = {k.lower(): v for k, v in headers}
    return "upgrade" in h.get("connection", "").lower() and h.get("upgrade", "").lower() == "websocket"


def parse_ports(query: dict[str, list[str]]) -> list[int]:
    """The ports of a WebSocket port-forward (`?port=80&port=443` or `?port=80,443`); RequestRefused 400 when
    there are none or one is not a port."""
    raw = [p.strip() for v in query.get("port", ()) for p in v.split(",") if p.strip()]
    if not raw:
        raise RequestRefused(400, "port-forward over WebSocket needs the ports as `port` query parameters")
    if len(raw) > MAX_PORTS:
        raise RequestRefused(400, f"port-forward over WebSocket: {len(raw)} ports (at most {MAX_PORTS})")
    if not all(p.isdigit() and 0 < int(p) < 65536 for p in raw):
        raise RequestRefused(400, f"port-forward: invalid port in {raw}")
    return [int(p) for p in raw]


def negotiate(headers: Iterable[tuple[str, str]], supported: Sequence[str] = EXEC_PROTOCOLS) -> str:
    """The subprotocol of `Sec-WebSocket-Protocol` we speak, in the client's order ("" when it offers none: v1
    binary, as kubelet); RequestRefused 400 when it offers only others."""
    offered = [
        p.strip() for k, v in headers if k.lower() == "sec-websocket-protocol" for p in v.split(",") if p.strip()
    ]
    if not offered:
        return ""
    for p in offered:
        if p in supported:
            return p
    raise RequestRefused(
        400, f"unable to upgrade: no supported WebSocket subprotocol in {offered} (supported: {list(supported)})"
    )


def exec_protocol(subprotocol: str) -> str:
    """The remotecommand semantics (what the error channel says) of a WebSocket subprotocol."""
    return "v4.channel.k8s.io" if subprotocol.startswith(("v4.", "v5.")) else "channel.k8s.io"


def accept_token(headers: Iterable[tuple[str, str]]) -> str:
    """Sec-WebSocket-Accept for the request's key; RequestRefused 400 without a usable key."""
    key = next((v.strip() for k, v in headers if k.lower() == "sec-websocket-key"), "")
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError(key)
    except (binascii.Error, ValueError):
        raise RequestRefused(400, "WebSocket upgrade without a valid Sec-WebSocket-Key") from None
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def encode_message(channel: int, data: bytes, *, text: bool) -> bytes | str:
    if text:
        return chr(ord("0") + channel) + base64.b64encode(data).decode()
    return bytes([channel]) + data


def decode_message(message: bytes | str) -> tuple[int, bytes]:
    """(channel, data) of one client message; ValueError when it is not one."""
    if isinstance(message, str):
        if not message or not "0" <= message[0] <= "9":
            raise ValueError("a base64 channel message must start with the channel digit")
        try:
            return ord(message[0]) - ord("0"), base64.b64decode(message[1:], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"bad base64: {exc}") from exc
    if not message:
        raise ValueError("an empty channel message")
    return message[0], bytes(message[1:])


class WsChannel:
    """One channel, read and written like a SPDY stream."""

    def __init__(self, session: WsSession, number: int) -> None:
        self._session = session
        self.number = number
        self._inbox: deque[bytes] = deque()
        self._readable = asyncio.Event()
        self.buffered = 0
        self.drained = asyncio.Event()
        self.drained.set()
        self.remote_closed = False
        self.local_closed = False

    async def read(self) -> bytes:
        while not self._inbox:
            if self.remote_closed:
                return b""
            self._readable.clear()
            await self._readable.wait()
        data = self._inbox.popleft()
        self.buffered -= len(data)
        if self.buffered <= MAX_BUFFER:
            self.drained.set()
        return data

    async def write(self, data: bytes) -> None:
        if self.local_closed or self._session.closed:
            raise StreamReset(f"channel {self.number} is closed")
        for i in range(0, len(data), 32 * 1024):
            await self._session.send(self.number, data[i : i + 32 * 1024])

    async def close(self) -> None:
        self.local_closed = True  # the session's close ends every channel for the client

    def deliver(self, data: bytes) -> None:
        if data:
            self._inbox.append(data)
            self.buffered += len(data)
            if self.buffered > MAX_BUFFER:
                self.drained.clear()
        self._readable.set()

    def finish(self) -> None:
        self.remote_closed = True
        self.drained.set()
        self._readable.set()


class WsSession:
    """The server side of one WebSocket channel session over an upgraded stream pair."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        subprotocol: str,
        clock: Clock,
        initial: bytes = b"",
        name: str = "",
        idle_timeout: float = IDLE_TIMEOUT,
        channels: int = len(CHANNELS),
        readable: frozenset[int] = frozenset({0, 4}),
    ) -> None:
        from wsproto.connection import Connection, ConnectionType

        self._reader = reader
        self._writer = writer
        self._ws = Connection(ConnectionType.SERVER)
        self._text = "base64" in subprotocol
        self._v5 = subprotocol.startswith("v5.")
        self._clock = clock
        self._initial = initial
        self.name = name
        self._idle = idle_timeout
        self._lock = asyncio.Lock()
        self.closed = False
        self.channels = {n: WsChannel(self, n) for n in range(channels)}
        self._readable = readable
        self._last = clock.monotonic()
        self._buffer: list[bytes | str] = []
        self._size = 0

    def channel(self, name: str) -> WsChannel:
        return self.channels[CHANNELS[name]]

    async def send(self, number: int, data: bytes) -> None:
        from wsproto.events import BytesMessage, TextMessage

        msg = encode_message(number, data, text=self._text)
        event = TextMessage(data=msg) if isinstance(msg, str) else BytesMessage(data=msg)
        await self._write(event)

    async def _write(self, event: object) -> None:
        if self.closed:
            raise StreamReset("the WebSocket session is closed")
        async with self._lock:
            try:
                self._writer.write(self._ws.send(event))  # type: ignore[arg-type]
                self._last = self._clock.monotonic()
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                self._end()
                raise StreamReset(f"the connection is gone: {exc}") from exc
            except Exception as exc:  # wsproto's LocalProtocolError: the session is already closing
                self._end()
                raise StreamReset(str(exc)) from exc

    def _end(self) -> None:
        if not self.closed:
            self.closed = True
            for ch in self.channels.values():
                ch.local_closed = True
                ch.finish()

    async def run(self, handler: Callable[[WsSession], Awaitable[None]]) -> None:
        """Like SpdyConnection.run: the handler beside the reading; whichever ends first ends the other."""
        task = asyncio.ensure_future(handler(self))
        reading = asyncio.ensure_future(self._read_loop())
        idle = asyncio.ensure_future(self._watch_idle())
        try:
            await asyncio.wait({task, reading, idle}, return_when=asyncio.FIRST_COMPLETED)
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.error("WebSocket session handler failed", task.exception(), session=self.name)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            for t in (reading, idle):
                t.cancel()
            await asyncio.gather(reading, idle, return_exceptions=True)
            await self._close()

    async def _close(self) -> None:
        from wsproto.events import CloseConnection

        if not self.closed:
            with contextlib.suppress(StreamReset, asyncio.TimeoutError):
                await asyncio.wait_for(self._write(CloseConnection(code=1000)), 5.0)
        self._end()
        self._writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)

    async def _watch_idle(self) -> None:
        while True:
            left = self._last + self._idle - self._clock.monotonic()
            if left <= 0:
                log.info("WebSocket session idle; closing", session=self.name)
                return
            await self._clock.sleep(left)

    async def _read_loop(self) -> None:
        from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
        from wsproto.utilities import RemoteProtocolError

        data, self._initial = self._initial, b""
        while True:
            if data:
                self._ws.receive_data(data)
            try:
                for event in self._ws.events():
                    if isinstance(event, (BytesMessage, TextMessage)):
                        self._on_fragment(
                            event.data if isinstance(event.data, str) else bytes(event.data), event.message_finished
                        )
                    elif isinstance(event, Ping):
                        await self._write(event.response())
                    elif isinstance(event, CloseConnection):
                        with contextlib.suppress(StreamReset):
                            await self._write(event.response())
                        self._end()
                        return
            except (RemoteProtocolError, ValueError) as exc:
                log.info("WebSocket session ended by a protocol error", session=self.name, err=str(exc))
                return
            for ch in self.channels.values():
                await ch.drained.wait()  # back-pressure: the socket is not read while a channel is full
            data = await self._reader.read(64 * 1024)
            self._last = self._clock.monotonic()
            if not data:
                return

    def _on_fragment(self, data: bytes | str, finished: bool) -> None:
        self._size += len(data)
        if self._size > MAX_MESSAGE:
            raise ValueError(f"a message larger than {MAX_MESSAGE} bytes")
        self._buffer.append(data)
        if not finished:
            return
        message: bytes | str
        if isinstance(data, str):
            message = "".join(b if isinstance(b, str) else b.decode("latin-1") for b in self._buffer)
        else:
            message = b"".join(b if isinstance(b, bytes) else b.encode() for b in self._buffer)
        self._buffer, self._size = [], 0
        number, payload = decode_message(message)
        if self._v5 and number == CLOSE_SIGNAL:
            if payload and payload[0] in self.channels:
                self.channels[payload[0]].finish()
            return
        channel = self.channels.get(number)
        if channel is None or number not in self._readable:
            raise ValueError(f"a message on channel {number}, which the client does not write")
        channel.deliver(payload)


def response_headers(headers: Sequence[tuple[str, str]], subprotocol: str) -> list[tuple[str, str]]:
    out = [("Sec-WebSocket-Accept", accept_token(headers))]
    if subprotocol:
        out.append(("Sec-WebSocket-Protocol", subprotocol))
    return out
