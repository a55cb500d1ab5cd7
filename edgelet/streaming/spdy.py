"""A server-side subset of SPDY/3.1, the framing kubectl exec/attach/port-forward speak through the apiserver to a
kubelet: frames, header blocks, streams, flow control and the limits that keep a bad client from hurting the agent.

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
import struct
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from edgelet.streaming.errors import StreamingError
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.util.clock import Clock

log = get_logger(__name__)

VERSION = 3
UPGRADE = "SPDY/3.1"

SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02
FLAG_CLEAR_SETTINGS = 0x01

# RST_STREAM status codes
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, UNSUPPORTED_VERSION, CANCEL, INTERNAL_ERROR = 1, 2, 3, 4, 5, 6
FLOW_CONTROL_ERROR, STREAM_IN_USE, STREAM_ALREADY_CLOSED, FRAME_TOO_LARGE = 7, 8, 9, 11
# GOAWAY status codes
GOAWAY_OK, GOAWAY_PROTOCOL_ERROR, GOAWAY_INTERNAL_ERROR = 0, 1, 2
# SETTINGS ids
SETTINGS_MAX_CONCURRENT_STREAMS = 4
SETTINGS_INITIAL_WINDOW_SIZE = 7

INITIAL_WINDOW = 64 * 1024
MAX_WINDOW = 2**31 - 1
MAX_DATA_CHUNK = 32 * 1024  # what one DATA frame edgelet sends carries at most
_HEADER = struct.Struct(">II")


def _dictionary() -> bytes:
    """SPDY/3's header compression dictionary (draft-mbelshe-httpbis-spdy-00, 2.6.10.1): length-prefixed names
    and values, then a run of bare tokens."""
    words = (
        (
            "options head post put delete trace accept accept-charset accept-encoding accept-language "
            "accept-ranges age allow authorization cache-control connection content-base content-encoding "
            "content-language content-length content-location content-md5 content-range content-type date etag "
            "expect expires from host if-match if-modified-since if-none-match if-range if-unmodified-since "
            "last-modified location max-forwards pragma proxy-authenticate proxy-authorization range referer "
            "retry-after server te trailer transfer-encoding upgrade user-agent vary via warning "
            "www-authenticate method get status"
        ).split()
        + ["200 OK"]
        + "version HTTP/1.1 url public set-cookie keep-alive origin".split()
    )
    tail = (
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
        "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
        "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
        "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
        "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
        "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,"
        "deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
    )
    return b"".join(struct.pack(">I", len(w)) + w.encode() for w in words) + tail.encode()


DICTIONARY = _dictionary()


class SpdyError(StreamingError):
    """A SPDY peer broke the protocol, or the session ended; `status` is the GOAWAY status it earns."""

    def __init__(self, message: str, status: int = GOAWAY_PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.status = status


class StreamError(SpdyError):
    """One stream broke the protocol: it is reset with `status`, the session goes on."""

    def __init__(self, stream_id: int, status: int, message: str) -> None:
        super().__init__(f"stream {stream_id}: {message}", status)
        self.stream_id = stream_id


class StreamReset(SpdyError):
    """The stream was reset (by the peer or because the connection ended) before the write or read finished."""


@dataclass(frozen=True)
class Limits:
    max_frame: int = 1024 * 1024  # a frame's payload; kubectl's DATA frames carry 32 KiB
    max_header_block: int = 16 * 1024  # inflated; kubelet's streams carry 3-4 short headers
    max_headers: int = 64  # name/value pairs in one block
    max_streams: int = 64  # open at once; port-forward opens two per forwarded connection
    initial_window: int = INITIAL_WINDOW
    idle_timeout: float = 4 * 3600.0  # kubelet's streaming idle timeout
    max_stream_buffer: int = 1024 * 1024  # unread data one stream may hold (a peer ignoring our window)
    stall_timeout: float = 10.0  # how long a full stream may go unread before it is reset


# ---------------------------------------------------------------------------------------------------------- frames

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Data:
    stream_id: int
    data: bytes
    fin: bool = False


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    headers: Headers
    associated_id: int = 0
    priority: int = 0
    fin: bool = False
    unidirectional: bool = False


@dataclass(frozen=True)
class SynReply:
    stream_id: int
    headers: Headers = ()
    fin: bool = False


@dataclass(frozen=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True)
class Settings:
    values: tuple[tuple[int, int, int], ...]  # (flags, id, value)
    clear: bool = False


@dataclass(frozen=True)
class Ping:
    ping_id: int


@dataclass(frozen=True)
class GoAway:
    last_good_id: int
    status: int = GOAWAY_OK


@dataclass(frozen=True)
class HeadersFrame:
    stream_id: int
    headers: Headers
    fin: bool = False


@dataclass(frozen=True)
class WindowUpdate:
    stream_id: int
    delta: int


@dataclass(frozen=True)
class Unknown:
    """A control frame of a type this subset does not know; ignored, as the spec asks."""

    type: int


Frame = Union[Data, SynStream, SynReply, RstStream, Settings, Ping, GoAway, HeadersFrame, WindowUpdate, Unknown]


def encode_header_block(headers: Sequence[tuple[str, str]]) -> bytes:
    """The uncompressed name/value block: names lowercased, repeated names joined with NUL as the spec wants."""
    merged: dict[str, list[str]] = {}
    for name, value in headers:
        merged.setdefault(name.lower(), []).append(value)
    out = [struct.pack(">I", len(merged))]
    for name, values in merged.items():
        n, v = name.encode(), "\0".join(values).encode()
        out += [struct.pack(">I", len(n)), n, struct.pack(">I", len(v)), v]
    return b"".join(out)


def decode_header_block(block: bytes, limits: Limits = Limits()) -> Headers:
    """The pairs of an inflated block; SpdyError on a truncated block, an empty or upper-case or repeated name,
    or more pairs than `limits.max_headers`. Multi-valued headers come out as repeated pairs."""

    def take(pos: int) -> tuple[bytes, int]:
        if pos + 4 > len(block):
            raise SpdyError("truncated header block")
        (n,) = struct.unpack_from(">I", block, pos)
        if pos + 4 + n > len(block):
            raise SpdyError("truncated header block")
        return block[pos + 4 : pos + 4 + n], pos + 4 + n

    if len(block) < 4:
        raise SpdyError("truncated header block")
    (count,) = struct.unpack_from(">I", block, 0)
    if count > limits.max_headers:
        raise SpdyError(f"header block with {count} pairs (at most {limits.max_headers})")
    pos, seen, out = 4, set(), []
    for _ in range(count):
        raw_name, pos = take(pos)
        raw_value, pos = take(pos)
        try:
            name, value = raw_name.decode("ascii"), raw_value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpdyError(f"header block: undecodable name or value: {exc}") from exc
        if not name or name != name.lower():
            raise SpdyError(f"header block: invalid header name {name!r}")
        if name in seen:
            raise SpdyError(f"header block: header {name!r} given twice")
        seen.add(name)
        out += [(name, v) for v in value.split("\0")]
    if pos != len(block):
        raise SpdyError("header block: trailing bytes")
    return tuple(out)


class HeaderCompressor:
    """Our direction's zlib context: every block we send continues it (SYNC_FLUSH at the end of each)."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, zdict=DICTIONARY
        )

    def compress(self, headers: Sequence[tuple[str, str]]) -> bytes:
        return self._z.compress(encode_header_block(headers)) + self._z.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    """The peer's zlib context, with a bound on what one block may inflate to."""

    def __init__(self, limits: Limits = Limits()) -> None:
        self._z = zlib.decompressobj(zdict=DICTIONARY)
        self._limits = limits

    def decompress(self, data: bytes) -> Headers:
        limit = self._limits.max_header_block
        try:
            block = self._z.decompress(data, limit + 1)
        except zlib.error as exc:
            raise SpdyError(f"header block does not inflate: {exc}") from exc
        if len(block) > limit or self._z.unconsumed_tail:
            raise SpdyError(f"header block inflates past {limit} bytes")
        return decode_header_block(block, self._limits)


def _control(ftype: int, flags: int, payload: bytes) -> bytes:
    return _HEADER.pack(0x80000000 | (VERSION << 16) | ftype, (flags << 24) | len(payload)) + payload


def encode_frame(frame: Frame, compressor: HeaderCompressor | None = None) -> bytes:
    """The wire bytes of `frame`; frames with headers need the connection's compressor."""
    if isinstance(frame, Data):
        if len(frame.data) >= 1 << 24:
            raise ValueError("DATA payload too large for one frame")
        return (
            _HEADER.pack(frame.stream_id & MAX_WINDOW, (FLAG_FIN if frame.fin else 0) << 24 | len(frame.data))
            + frame.data
        )
    if isinstance(frame, (SynStream, SynReply, HeadersFrame)):
        assert compressor is not None, "header frames need the connection's compressor"
        block = compressor.compress(frame.headers)
        flags = FLAG_FIN if frame.fin else 0
        if isinstance(frame, SynStream):
            flags |= FLAG_UNIDIRECTIONAL if frame.unidirectional else 0
            head = struct.pack(">IIBB", frame.stream_id, frame.associated_id, (frame.priority & 7) << 5, 0)
            return _control(SYN_STREAM, flags, head + block)
        return _control(
            SYN_REPLY if isinstance(frame, SynReply) else HEADERS, flags, struct.pack(">I", frame.stream_id) + block
        )
    if isinstance(frame, RstStream):
        return _control(RST_STREAM, 0, struct.pack(">II", frame.stream_id, frame.status))
    if isinstance(frame, Settings):
        body = struct.pack(">I", len(frame.values)) + b"".join(
            struct.pack(">II", (f << 24) | i, v) for f, i, v in frame.values
        )
        return _control(SETTINGS, FLAG_CLEAR_SETTINGS if frame.clear else 0, body)
    if isinstance(frame, Ping):
        return _control(PING, 0, struct.pack(">I", frame.ping_id))
    if isinstance(frame, GoAway):
        return _control(GOAWAY, 0, struct.pack(">II", frame.last_good_id, frame.status))
    if isinstance(frame, WindowUpdate):
        return _control(WINDOW_UPDATE, 0, struct.pack(">II", frame.stream_id, frame.delta))
    raise ValueError(f"cannot encode {frame!r}")


def _fixed(ftype: int, payload: bytes, size: int) -> tuple[int, ...]:
    if len(payload) != size:
        raise SpdyError(f"control frame type {ftype} with {len(payload)} bytes (expected {size})")
    return struct.unpack(">" + "I" * (size // 4), payload)


def decode_frame(first: int, second: int, payload: bytes, decompressor: HeaderDecompressor) -> Frame:
    """One frame from its 8-byte header (two big-endian words) and payload; SpdyError (session) or StreamError."""
    flags = second >> 24
    if not first & 0x80000000:
        stream_id = first & MAX_WINDOW
        if stream_id == 0:
            raise SpdyError("DATA frame on stream 0")
        return Data(stream_id, payload, bool(flags & FLAG_FIN))
    version, ftype = (first >> 16) & 0x7FFF, first & 0xFFFF
    if version != VERSION:
        raise SpdyError(f"SPDY version {version} (only {VERSION} is spoken)")
    if ftype in (SYN_STREAM, SYN_REPLY, HEADERS):
        fixed = 10 if ftype == SYN_STREAM else 4
        if len(payload) < fixed:
            raise SpdyError(f"control frame type {ftype} too short ({len(payload)} bytes)")
        stream_id = struct.unpack_from(">I", payload)[0] & MAX_WINDOW
        # Always inflate: the context is shared by every block, skipping one would corrupt the next.
        headers = decompressor.decompress(payload[fixed:])
        if stream_id == 0:
            raise SpdyError(f"control frame type {ftype} on stream 0")
        if ftype == SYN_STREAM:
            assoc = struct.unpack_from(">I", payload, 4)[0] & MAX_WINDOW
            return SynStream(
                stream_id, headers, assoc, payload[8] >> 5, bool(flags & FLAG_FIN), bool(flags & FLAG_UNIDIRECTIONAL)
            )
        if ftype == SYN_REPLY:
            return SynReply(stream_id, headers, bool(flags & FLAG_FIN))
        return HeadersFrame(stream_id, headers, bool(flags & FLAG_FIN))
    if ftype == RST_STREAM:
        sid, status = _fixed(ftype, payload, 8)
        return RstStream(sid & MAX_WINDOW, status)
    if ftype == SETTINGS:
        if len(payload) < 4:
            raise SpdyError("SETTINGS frame too short")
        (count,) = struct.unpack_from(">I", payload)
        if len(payload) != 4 + 8 * count:
            raise SpdyError(f"SETTINGS frame of {len(payload)} bytes for {count} entries")
        values = tuple((w >> 24, w & 0xFFFFFF, v) for w, v in struct.iter_unpack(">II", payload[4:]))
        return Settings(values, bool(flags & FLAG_CLEAR_SETTINGS))
    if ftype == PING:
        return Ping(_fixed(ftype, payload, 4)[0])
    if ftype == GOAWAY:
        # SPDY/3 GOAWAY has a status; SPDY/2's had none: accept both lengths.
        if len(payload) == 4:
            return GoAway(struct.unpack(">I", payload)[0] & MAX_WINDOW)
        last, status = _fixed(ftype, payload, 8)
        return GoAway(last & MAX_WINDOW, status)
    if ftype == WINDOW_UPDATE:
        sid, delta = _fixed(ftype, payload, 8)
        return WindowUpdate(sid & MAX_WINDOW, delta & MAX_WINDOW)
    return Unknown(ftype)


class FrameParser:
    """Bytes in, frames out (incrementally); the frame size limit is checked on the header, before buffering."""

    def __init__(self, limits: Limits = Limits()) -> None:
        self._buf = bytearray()
        self._limits = limits
        self._decompressor = HeaderDecompressor(limits)

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next(self) -> Frame | None:
        """The next whole frame, None when more bytes are needed; SpdyError/StreamError on a bad one."""
        if len(self._buf) < 8:
            return None
        first, second = _HEADER.unpack_from(self._buf)
        length = second & 0xFFFFFF
        if length > self._limits.max_frame:
            raise SpdyError(f"frame of {length} bytes (at most {self._limits.max_frame})")
        if len(self._buf) < 8 + length:
            return None
        payload = bytes(self._buf[8 : 8 + length])
        del self._buf[: 8 + length]
        return decode_frame(first, second, payload, self._decompressor)


# --------------------------------------------------------------------------------------------------------- streams


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
