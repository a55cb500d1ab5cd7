"""A minimal SPDY/3.1 client for tests: opens streams, sends data and reads the server's frames (what kubectl's
spdystream does, from the other side)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from edgelet.streaming import _spdyframes as spdyframes
from edgelet.streaming import spdy


@dataclass
class StreamState:
    headers: dict[str, str]
    data: bytearray = field(default_factory=bytearray)
    fin: bool = False
    reset: int | None = None
    replied: bool = False


class SpdyClient:
    """Client side of a session over an asyncio stream pair; frames the server sends are applied to `streams`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, initial: bytes = b"") -> None:
        self.reader = reader
        self.writer = writer
        self.parser = spdyframes.FrameParser(spdy.Limits(max_frame=1 << 24, max_header_block=1 << 20))
        self.parser.feed(initial)
        self.compressor = spdyframes.HeaderCompressor()
        self.next_id = 1
        self.streams: dict[int, StreamState] = {}
        self.frames: list[spdyframes.Frame] = []  # every frame the server sent, in order
        self.goaway: spdyframes.GoAway | None = None
        self.eof = False

    async def send(self, frame: spdyframes.Frame) -> None:
        self.writer.write(spdyframes.encode_frame(frame, self.compressor))
        await self.writer.drain()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def open(self, headers: dict[str, str], fin: bool = False) -> int:
        sid = self.next_id
        self.next_id += 2
        self.streams[sid] = StreamState(dict(headers))
        await self.send(spdyframes.SynStream(sid, tuple(headers.items()), fin=fin))
        return sid

    async def write(self, sid: int, data: bytes, fin: bool = False) -> None:
        await self.send(spdyframes.Data(sid, data, fin))

    async def frame(self) -> spdyframes.Frame | None:
        """The next frame from the server (applied to `streams`), None at EOF."""
        while True:
            f = self.parser.next()
            if f is not None:
                self._apply(f)
                return f
            data = await self.reader.read(65536)
            if not data:
                self.eof = True
                return None
            self.parser.feed(data)

    def _apply(self, f: spdyframes.Frame) -> None:
        self.frames.append(f)
        if isinstance(f, spdyframes.Data):
            st = self.streams.setdefault(f.stream_id, StreamState({}))
            st.data += f.data
            st.fin = st.fin or f.fin
        elif isinstance(f, spdyframes.SynReply):
            self.streams.setdefault(f.stream_id, StreamState({})).replied = True
        elif isinstance(f, spdyframes.RstStream):
            self.streams.setdefault(f.stream_id, StreamState({})).reset = f.status
        elif isinstance(f, spdyframes.GoAway):
            self.goaway = f

    async def until(self, predicate, timeout: float = 30.0) -> None:
        """Read frames until `predicate()` holds; AssertionError at EOF before it does."""
        async with asyncio.timeout(timeout):
            while not predicate():
                if await self.frame() is None:
                    assert predicate(), "the server closed the connection first"
                    return

    async def drain_to_eof(self, timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout):
            while await self.frame() is not None:
                pass

    def close(self) -> None:
        self.writer.close()
