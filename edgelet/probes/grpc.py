"""The grpc probe: one grpc.health.v1.Health/Check over a hand-rolled minimal HTTP/2 client (no dependency).

Why hand-rolled: a full gRPC stack (grpcio) is tens of megabytes, and even
`h2`+`hpack`+`hyperframe` are more than one unary call needs. The client
sends the connection preface, an empty SETTINGS, one HEADERS frame whose
header block uses only HPACK literals without indexing (so no encoder state
and no Huffman coding), and one DATA frame carrying the HealthCheckRequest.
It never decodes the server's header blocks (that would need HPACK's
Huffman table and dynamic table): the verdict comes from the response
message, HealthCheckResponse.status, which is SERVING (1) or not; a
response without a message (a trailers-only error such as NOT_FOUND or
UNIMPLEMENTED) is a failure. The server's SETTINGS and PINGs are
acknowledged; our request and the response are far below the default
65,535-byte flow-control windows, so no WINDOW_UPDATE is ever needed.
Plain-text HTTP/2 (h2c with prior knowledge), as kubelet's grpc probe uses.
"""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING

from edgelet.probes import netns
from edgelet.probes.machine import Result
from edgelet.probes.target import DEFAULT_HOST, USER_AGENT, Outcome, ProbeTarget

if TYPE_CHECKING:
    from edgelet.api.types import GRPCAction

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
MAX_FRAME = 1 << 16


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream & 0x7FFFFFFF) + payload


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """RFC 7541 5.1 integer with an N-bit prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(name: str, value: str) -> bytes:
    """Literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + hpack_int(len(n), 7) + n + hpack_int(len(v), 7) + v


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def check_request(service: str) -> bytes:
    """A gRPC length-prefixed HealthCheckRequest{service = 1}."""
    body = b"\x0a" + varint(len(service.encode())) + service.encode() if service else b""
    return b"\x00" + struct.pack(">I", len(body)) + body


def parse_status(message: bytes) -> int | None:
    """HealthCheckResponse.status (field 1, varint) from a gRPC length-prefixed message; None if absent."""
    if len(message) < 5 or message[0] != 0:  # compressed responses are not negotiated, so never sent
        return None
    (length,) = struct.unpack(">I", message[1:5])
    body = message[5 : 5 + length]
    i = 0
    while i < len(body):
        key, i = _read_varint(body, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(body, i)
            if field == 1:
                return value
        elif wire == 2:
            size, i = _read_varint(body, i)
            i += size
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            return None
    return 0  # proto3: a missing enum field is its zero value, UNKNOWN


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def build_call(authority: str, service: str) -> bytes:
    block = b"".join(
        hpack_literal(n, v)
        for n, v in (
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/grpc.health.v1.Health/Check"),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("user-agent", USER_AGENT),
        )
    )
    return (
        PREFACE
        + frame(SETTINGS, 0, 0)
        + frame(HEADERS, END_HEADERS, 1, block)
        + frame(DATA, END_STREAM, 1, check_request(service))
    )


async def health_check(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str, service: str
) -> int | None:
    """Run one Check on an open connection; the serving status, or None when no response message came."""
    writer.write(build_call(authority, service))
    await writer.drain()
    data = bytearray()
    while True:
        head = await reader.readexactly(9)
        length = int.from_bytes(head[:3], "big")
        kind, flags = head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        if length > MAX_FRAME:
            raise ConnectionError(f"HTTP/2 frame of {length} bytes")
        payload = await reader.readexactly(length)
        if kind == SETTINGS and not flags & ACK:
            writer.write(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            writer.write(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            raise ConnectionError("server sent GOAWAY")
        elif kind == RST_STREAM and stream == 1:
            raise ConnectionError(f"stream reset (error code {int.from_bytes(payload[:4], 'big')})")
        elif kind == DATA and stream == 1:
            if flags & PADDED and payload:
                payload = payload[1 : len(payload) - payload[0]]
            data += payload
        if stream == 1 and kind in (DATA, HEADERS) and flags & END_STREAM:
            return parse_status(bytes(data)) if data else None


async def grpc_probe(action: GRPCAction, target: ProbeTarget, timeout: float) -> Outcome:
    """kubelet prober/grpc: SERVING is success; anything else, or no connection within the timeout, failure."""
    host = DEFAULT_HOST
    port = action.port
    authority = f"{host}:{port}"
    if not 0 < port < 65536:
        return Outcome(Result.UNKNOWN, f"invalid port number: {port}", error=True)

    async def call() -> int | None:
        sock = await netns.connect(target.netns, host, port, timeout)
        reader, writer = await asyncio.open_connection(sock=sock)
        try:
            return await health_check(reader, writer, authority, action.service or "")
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    try:
        async with asyncio.timeout(timeout):
            status = await call()
    except netns.NetnsError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    except TimeoutError:
        return Outcome(Result.FAILURE, f'timeout: failed to connect service "{authority}" within {timeout:g}s')
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        return Outcome(Result.FAILURE, f'error: failed to connect service "{authority}": {exc}')
    if status == 1:
        return Outcome(Result.SUCCESS)
    if status is None:
        return Outcome(Result.FAILURE, "service unhealthy (the server answered without a health status)")
    return Outcome(Result.FAILURE, f'service unhealthy (responded with "{SERVING_STATUS.get(status, status)}")')
