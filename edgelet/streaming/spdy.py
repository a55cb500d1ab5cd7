"""A server-side subset of SPDY/3.1, the framing kubectl exec/attach/port-forward speak through the apiserver to a
kubelet: streams, flow control and the session's lifetime over the frames of `_spdyframes.py`.

What is served (draft-mbelshe-httpbis-spdy-00 and the 3.1 additions):

- Frames: SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS,
  WINDOW_UPDATE (per stream and, as 3.1 adds, for stream 0, the connection)
  and DATA; unknown control frame types are ignored, as the spec asks.
- Header blocks are zlib streams with SPDY/3's dictionary, one compression
  context per direction for the whole connection (every block continues the
  previous one); a block that inflates past `Limits.max_header_block` is a
  session error, so a compression bomb costs a bounded amount of memory.
- Only the client opens streams (odd ids, increasing); the server replies to
  each it accepts (SYN_REPLY) and refuses the rest (RST_STREAM), as
  kubelet's httpstream/spdy does. At most `Limits.max_streams` are open.
- Flow control: the peer's windows start at 64 KiB. moby/spdystream, the
  client every Kubernetes component uses, never sends WINDOW_UPDATE, so a
  server enforcing its send windows on it would stall after 64 KiB; send
  windows are therefore enforced only once the peer has shown it does flow
  control (a WINDOW_UPDATE or an INITIAL_WINDOW_SIZE setting). In the other
  direction edgelet sends WINDOW_UPDATE as the application consumes data,
  and a stream whose unread data passes its window stops the reading of the
  connection (TCP then pushes back on the client) until it is read.
- Idle timeout: a connection with no frame in either direction for
  `Limits.idle_timeout` (kubelet: 4 h) is closed with GOAWAY.

A protocol error of the whole session is answered with GOAWAY and the end of
the connection; one of a stream with RST_STREAM. Neither raises out of
`SpdyConnection.serve()`: a bad client ends its own session, nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from edgelet.streaming._spdyframes import (
    CANCEL,
    FLOW_CONTROL_ERROR,
    GOAWAY_INTERNAL_ERROR,
    GOAWAY_OK,
    INITIAL_WINDOW,
    INVALID_STREAM,
    MAX_DATA_CHUNK,
    MAX_WINDOW,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    STREAM_ALREADY_CLOSED,
    UPGRADE,
    Data,
    Frame,
    FrameParser,
    GoAway,
    HeaderCompressor,
    Headers,
    HeadersFrame,
    Limits,
    Ping,
    RstStream,
    Settings,
    SpdyError,
    StreamError,
    StreamReset,
    SynReply,
    SynStream,
    WindowUpdate,
    encode_frame,
)
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.util.clock import Clock

log = get_logger(__name__)

# The session's API, with what its users need of the wire format (the upgrade token, the limits, the errors, the
# reset codes a session resets a stream with).
__all__ = [
    "CANCEL",
    "PROTOCOL_ERROR",
    "UPGRADE",
    "Accept",
    "Limits",
    "SessionRunner",
    "SpdyConnection",
    "SpdyError",
    "Stream",
    "StreamError",
    "StreamReset",
]


class Stream:
    """One accepted stream: its headers, what the peer sent (read), what we send (write, close)."""

    def __init__(self, conn: SpdyConnection, stream_id: int, headers: Headers) -> None:
        self._conn = conn
        self.id = stream_id
        self.headers: dict[str, str] = {}
        for k, v in headers:
            self.headers.setdefault(k, v)
        self._inbox: deque[bytes] = deque()
        self.buffered = 0
        self._consumed = 0  # read since the last WINDOW_UPDATE we sent
        self._readable = asyncio.Event()
        self.drained = asyncio.Event()
        self.drained.set()
        self.progressed = asyncio.Event()
        self.remote_closed = False  # FIN or reset: nothing more comes
        self.local_closed = False  # we sent FIN or reset: nothing more goes
        self.reset_status: int | None = None
        self.send_window = conn.peer_initial_window
        self.read_total = 0  # what the application has read: the progress a stalled connection waits for

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")

    async def read(self) -> bytes:
        """The next data the peer sent; b"" once it finished the stream (FIN, reset or the connection gone)."""
        while not self._inbox:
            if self.remote_closed:
                return b""
            self._readable.clear()
            await self._readable.wait()
        data = self._inbox.popleft()
        self.buffered -= len(data)
        self.read_total += len(data)
        self.progressed.set()
        if self.buffered <= self._conn.limits.initial_window:
            self.drained.set()
        self._consumed += len(data)
        if self._consumed >= self._conn.limits.initial_window // 2 and not self.remote_closed:
            delta, self._consumed = self._consumed, 0
            await self._conn.send_quietly(WindowUpdate(self.id, delta))
        return data

    async def write(self, data: bytes) -> None:
        """Send `data` (in frames of at most MAX_DATA_CHUNK, within the send windows when the peer keeps them);
        StreamReset when the stream or connection is gone."""
        view = memoryview(data)
        while view:
            if self.local_closed or self._conn.closed or self.reset_status is not None:
                raise StreamReset(f"stream {self.id} is closed")
            n = await self._conn.reserve(self, min(len(view), MAX_DATA_CHUNK))
            await self._conn.send(Data(self.id, bytes(view[:n])))
            view = view[n:]

    async def close(self) -> None:
        """Half-close our side (an empty DATA frame with FIN); idempotent, quiet when the connection is gone."""
        if self.local_closed:
            return
        self.local_closed = True
        if self.reset_status is None:
            await self._conn.send_quietly(Data(self.id, b"", fin=True))
        self._conn.forget_if_done(self)

    async def reset(self, status: int = CANCEL) -> None:
        if self.local_closed and self.remote_closed:
            return
        self.local_closed = True
        was_reset = self.reset_status is not None
        self._finish_remote(status)
        if not was_reset:
            await self._conn.send_quietly(RstStream(self.id, status))
        self._conn.forget_if_done(self)

    # called by the connection
    def _deliver(self, data: bytes, fin: bool) -> None:
        if data:
            self._inbox.append(data)
            self.buffered += len(data)
            if self.buffered > self._conn.limits.max_stream_buffer:
                self.drained.clear()
        if fin:
            self.remote_closed = True
        self._readable.set()

    def _finish_remote(self, status: int | None = None) -> None:
        self.remote_closed = True
        if status is not None and self.reset_status is None:
            self.reset_status = status
        self._inbox.clear()
        self.buffered = 0
        self.drained.set()
        self._readable.set()


Accept = Callable[[Mapping[str, str]], bool]


class SpdyConnection:
    """The server side of one SPDY session over an asyncio stream pair (TLS or not).

    `serve()` runs the session until the peer goes, a protocol error, the
    idle timeout or `close()`; it never raises for anything the peer does.
    New streams the `accept` predicate (given the stream's headers) takes are
    replied to at once and handed out by `accept_stream()`; the others are
    refused.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        clock: Clock,
        accept: Accept | None = None,
        limits: Limits = Limits(),
        initial: bytes = b"",
        name: str = "",
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._clock = clock
        self._accept = accept or (lambda headers: True)
        self.limits = limits
        self._initial = initial
        self.name = name
        self._parser = FrameParser(limits)
        self._compressor = HeaderCompressor()
        self._write_lock = asyncio.Lock()
        self.streams: dict[int, Stream] = {}
        self._new: asyncio.Queue[Stream | None] = asyncio.Queue()
        self._last_id = 0
        self.closed = False
        self.goaway_sent = False
        self.error: SpdyError | None = None
        self.peer_flow_control = False
        self.peer_initial_window = INITIAL_WINDOW
        self._send_window = INITIAL_WINDOW  # the connection's (SPDY/3.1)
        self._window_changed = asyncio.Event()
        self._last_activity = clock.monotonic()
        self._done = asyncio.Event()

    # -- sending
    async def send(self, frame: Frame) -> None:
        """Write one frame (frames with headers compress under the lock, so blocks stay in order)."""
        if self.closed:
            raise StreamReset("the connection is closed")
        async with self._write_lock:
            self._writer.write(encode_frame(frame, self._compressor))
            self._last_activity = self._clock.monotonic()
            try:
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                self._mark_closed()
                raise StreamReset(f"the connection is gone: {exc}") from exc

    async def send_quietly(self, frame: Frame) -> None:
        with contextlib.suppress(StreamReset):
            await self.send(frame)

    async def reserve(self, stream: Stream, wanted: int) -> int:
        """How many of `wanted` bytes `stream` may send now (waits while a flow-controlling peer's window is shut)."""
        while True:
            if stream.local_closed or self.closed:
                raise StreamReset(f"stream {stream.id} is closed")
            if not self.peer_flow_control:
                return wanted
            n = min(wanted, stream.send_window, self._send_window)
            if n > 0:
                stream.send_window -= n
                self._send_window -= n
                return n
            self._window_changed.clear()
            await self._window_changed.wait()

    async def accept_stream(self) -> Stream | None:
        """The next stream the peer opened and we accepted; None once the connection has ended."""
        if self.closed and self._new.empty():
            return None
        return await self._new.get()

    def forget_if_done(self, stream: Stream) -> None:
        if stream.local_closed and stream.remote_closed:
            self.streams.pop(stream.id, None)

    # -- the session
    async def serve(self) -> None:
        """Run the session to its end; the connection is closed on return."""
        watchdog = asyncio.ensure_future(self._idle_watchdog())
        try:
            await self.send(Settings(((0, SETTINGS_MAX_CONCURRENT_STREAMS, self.limits.max_streams),)))
            if self._initial:
                await self._feed(self._initial)
            while not self.closed:
                data = await self._reader.read(64 * 1024)
                if not data:
                    break
                await self._feed(data)
        except _PeerGone:
            pass
        except SpdyError as exc:
            self.error = exc
            log.info("SPDY session ended by a protocol error", session=self.name, err=str(exc))
            await self._goaway(exc.status)
        except (ConnectionError, OSError, StreamReset):
            pass
        finally:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
            await self._shutdown()

    async def run(self, handler: SessionRunner) -> None:
        """Serve the session with `handler(conn)` beside it: the session closes when the handler returns (or
        fails), and the handler is cancelled when the session ends first (the client gone, a protocol error,
        the idle timeout), so what it started is cleaned up in every case."""
        task = asyncio.ensure_future(handler(self))
        serving = asyncio.ensure_future(self.serve())
        try:
            await asyncio.wait({task, serving}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                if not task.cancelled() and task.exception() is not None:
                    log.error("SPDY session handler failed", task.exception(), session=self.name)
                await self.close(GOAWAY_INTERNAL_ERROR if not task.cancelled() and task.exception() else GOAWAY_OK)
            await serving
        finally:
            # The handler first, while the connection is still up: it may have last words (the agent stopping).
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
            if not self._done.is_set():
                await self._shutdown()

    async def close(self, status: int = GOAWAY_OK) -> None:
        """End the session: GOAWAY, every stream finished, the connection closed."""
        await self._goaway(status)
        await self._shutdown()

    async def wait_closed(self) -> None:
        await self._done.wait()

    async def _goaway(self, status: int) -> None:
        if not self.goaway_sent and not self.closed:
            self.goaway_sent = True
            with contextlib.suppress(StreamReset, asyncio.TimeoutError):
                await asyncio.wait_for(self.send(GoAway(self._last_id, status)), 5.0)

    def _mark_closed(self) -> None:
        if self.closed:
            return
        self.closed = True
        for s in list(self.streams.values()):
            s.local_closed = True
            s._finish_remote(CANCEL)
        self.streams.clear()
        self._window_changed.set()
        self._new.put_nowait(None)

    async def _shutdown(self) -> None:
        self._mark_closed()
        self._writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)
        self._done.set()

    async def _idle_watchdog(self) -> None:
        idle = self.limits.idle_timeout
        while not self.closed:
            left = self._last_activity + idle - self._clock.monotonic()
            if left <= 0:
                log.info("SPDY session idle; closing", session=self.name, idle_timeout=idle)
                await self._goaway(GOAWAY_OK)
                self._mark_closed()
                self._writer.close()
                return
            await self._clock.sleep(left)

    async def _feed(self, data: bytes) -> None:
        self._last_activity = self._clock.monotonic()
        self._parser.feed(data)
        while (frame := self._parser.next()) is not None:
            try:
                await self._handle(frame)
            except StreamError as exc:
                log.info("SPDY stream reset", session=self.name, err=str(exc))
                stream = self.streams.get(exc.stream_id)
                if stream is not None:
                    stream._finish_remote(exc.status)  # counted until the application lets go, as a peer's reset
                    self.forget_if_done(stream)
                await self.send(RstStream(exc.stream_id, exc.status))

    async def _handle(self, frame: Frame) -> None:
        if isinstance(frame, Data):
            await self._on_data(frame)
        elif isinstance(frame, SynStream):
            await self._on_syn_stream(frame)
        elif isinstance(frame, RstStream):
            stream = self.streams.get(frame.stream_id)
            if stream is not None:
                # Still counted against max_streams until the application lets go of it (close or reset):
                # what it started for the stream (a process, a socket) lives until then.
                stream._finish_remote(frame.status)
                self.forget_if_done(stream)
        elif isinstance(frame, Settings):
            self._on_settings(frame)
        elif isinstance(frame, Ping):
            if frame.ping_id % 2 == 1:  # the client's (odd); ours would be even and we send none
                await self.send(frame)
        elif isinstance(frame, GoAway):
            # The peer opens no more streams; the session ends when the application is done with its own.
            # kubectl sends it as it exits; its streams are then finished too.
            raise _PeerGone()
        elif isinstance(frame, WindowUpdate):
            self._on_window_update(frame)
        elif isinstance(frame, (SynReply, HeadersFrame)):
            stream = self.streams.get(frame.stream_id)
            if isinstance(frame, SynReply) or stream is None:
                # We open no streams, so a reply is always for an unknown one.
                raise StreamError(frame.stream_id, INVALID_STREAM, f"{type(frame).__name__} for no stream of ours")
            for k, v in frame.headers:
                stream.headers.setdefault(k, v)
            if frame.fin:
                stream._deliver(b"", True)
                self.forget_if_done(stream)

    async def _on_syn_stream(self, frame: SynStream) -> None:
        sid = frame.stream_id
        if sid % 2 == 0:
            raise SpdyError(f"SYN_STREAM with the even id {sid} (clients open odd ones)")
        if sid <= self._last_id:
            raise SpdyError(f"SYN_STREAM {sid} after {self._last_id} (ids must increase)")
        self._last_id = sid
        if self.goaway_sent:
            raise StreamError(sid, REFUSED_STREAM, "the session is going away")
        if len(self.streams) >= self.limits.max_streams:
            raise StreamError(sid, REFUSED_STREAM, f"more than {self.limits.max_streams} streams at once")
        stream = Stream(self, sid, frame.headers)
        try:
            accepted = self._accept(stream.headers)
        except SpdyError as exc:
            raise StreamError(sid, REFUSED_STREAM, str(exc)) from exc
        if not accepted:
            raise StreamError(sid, REFUSED_STREAM, f"stream refused (headers {dict(stream.headers)})")
        self.streams[sid] = stream
        if frame.unidirectional:
            stream.local_closed = True
        await self.send(SynReply(sid))
        if frame.fin:
            stream._deliver(b"", True)
        self._new.put_nowait(stream)

    async def _on_data(self, frame: Data) -> None:
        stream = self.streams.get(frame.stream_id)
        if stream is None:
            if frame.stream_id <= self._last_id:
                return  # for a stream already reset or finished: dropped, as spdystream does
            raise StreamError(frame.stream_id, INVALID_STREAM, "DATA for a stream never opened")
        if stream.remote_closed:
            if stream.reset_status is not None:
                return  # in flight when the stream was reset
            raise StreamError(frame.stream_id, STREAM_ALREADY_CLOSED, "DATA after FIN")
        stream._deliver(frame.data, frame.fin)
        if frame.fin:
            self.forget_if_done(stream)
        if not stream.drained.is_set():
            await self._wait_drained(stream)

    async def _wait_drained(self, stream: Stream) -> None:
        """A peer ignoring our window filled `stream`'s buffer: stop reading the connection (TCP pushes back)
        while the application keeps reading the stream; StreamError (FLOW_CONTROL_ERROR) when it read nothing
        for `stall_timeout`, which drops the buffer and lets the other streams go on."""
        while not stream.drained.is_set() and not stream.remote_closed:
            stream.progressed.clear()
            waiters = [
                asyncio.ensure_future(stream.drained.wait()),
                asyncio.ensure_future(stream.progressed.wait()),
                asyncio.ensure_future(self._clock.sleep(self.limits.stall_timeout)),
            ]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
                await asyncio.gather(*waiters, return_exceptions=True)
            if not stream.drained.is_set() and not stream.progressed.is_set():
                raise StreamError(
                    stream.id,
                    FLOW_CONTROL_ERROR,
                    f"{stream.buffered} bytes unread for {self.limits.stall_timeout:g} s "
                    f"(the peer ignores the {self.limits.initial_window} byte window)",
                )

    def _on_settings(self, frame: Settings) -> None:
        for _flags, sid, value in frame.values:
            if sid == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise SpdyError(f"INITIAL_WINDOW_SIZE {value} is too large")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                self.peer_flow_control = True
                for s in self.streams.values():
                    s.send_window += delta
                self._window_changed.set()

    def _on_window_update(self, frame: WindowUpdate) -> None:
        if frame.delta == 0:
            if frame.stream_id == 0:
                raise SpdyError("WINDOW_UPDATE of 0 for the connection")
            raise StreamError(frame.stream_id, FLOW_CONTROL_ERROR, "WINDOW_UPDATE of 0")
        self.peer_flow_control = True
        if frame.stream_id == 0:
            self._send_window += frame.delta
            if self._send_window > MAX_WINDOW:
                raise SpdyError("the connection's send window overflowed")
        else:
            stream = self.streams.get(frame.stream_id)
            if stream is None:
                return  # a late update for a finished stream
            stream.send_window += frame.delta
            if stream.send_window > MAX_WINDOW:
                raise StreamError(frame.stream_id, FLOW_CONTROL_ERROR, "send window overflowed")
        self._window_changed.set()


class _PeerGone(SpdyError):
    """The peer sent GOAWAY: the session ends (not an error of the peer's)."""

    def __init__(self) -> None:
        super().__init__("the peer went away", GOAWAY_OK)


SessionRunner = Callable[[SpdyConnection], Awaitable[None]]
