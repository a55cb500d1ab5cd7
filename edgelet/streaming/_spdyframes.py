"""SPDY/3.1's wire format as edgelet serves it: frames, header blocks with their shared zlib contexts, the frame
parser, the protocol's errors and the limits that keep a bad client from hurting the agent.

Pure bytes in and out; the session over them (streams, flow control, the
idle timeout) is `edgelet.streaming.spdy`'s, whose docstring says what of the
protocol is served.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

from edgelet.streaming.errors import StreamingError

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
