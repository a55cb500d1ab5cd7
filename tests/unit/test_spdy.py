"""edgelet.streaming.spdy at the frame level (a table of frames both ways, header blocks, the shared zlib context)
and as a session over a real loopback socket (streams, flow control, limits), plus fuzzing: whatever a client
sends, the session ends with an error and a closed connection, never an exception out of serve() or a task left."""

from __future__ import annotations

import asyncio
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgelet.streaming import _spdyframes as spdyframes
from edgelet.streaming import spdy
from edgelet.testing.spdyclient import SpdyClient
from edgelet.util.clock import REAL_CLOCK, FakeClock

FRAMES = [
    spdyframes.Data(1, b"hello"),
    spdyframes.Data(3, b"", fin=True),
    spdyframes.Data(0x7FFFFFFF, b"x" * 70000),
    spdyframes.SynStream(1, (("streamtype", "error"),)),
    spdyframes.SynStream(
        5,
        (("streamtype", "data"), ("port", "80"), ("requestid", "0")),
        associated_id=3,
        priority=7,
        fin=True,
        unidirectional=True,
    ),
    spdyframes.SynReply(1),
    spdyframes.SynReply(7, (("a", "1"), ("a", "2")), fin=True),
    spdyframes.RstStream(1, spdy.CANCEL),
    spdyframes.Settings(
        ((0, spdyframes.SETTINGS_MAX_CONCURRENT_STREAMS, 100), (1, spdyframes.SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20))
    ),
    spdyframes.Settings((), clear=True),
    spdyframes.Ping(1),
    spdyframes.GoAway(9, spdyframes.GOAWAY_PROTOCOL_ERROR),
    spdyframes.HeadersFrame(3, (("x", "y"),)),
    spdyframes.WindowUpdate(0, 1000),
    spdyframes.WindowUpdate(3, spdyframes.MAX_WINDOW),
]


def _parse_all(data: bytes, limits: spdy.Limits = spdy.Limits(max_frame=1 << 24)) -> list[spdyframes.Frame]:
    parser = spdyframes.FrameParser(limits)
    parser.feed(data)
    out = []
    while (f := parser.next()) is not None:
        out.append(f)
    return out


def test_frames_round_trip_through_one_compression_context():
    comp = spdyframes.HeaderCompressor()
    wire = b"".join(spdyframes.encode_frame(f, comp) for f in FRAMES)
    assert _parse_all(wire) == FRAMES


def test_frames_parse_byte_by_byte():
    comp = spdyframes.HeaderCompressor()
    wire = b"".join(spdyframes.encode_frame(f, comp) for f in FRAMES[:8])
    parser = spdyframes.FrameParser(spdy.Limits(max_frame=1 << 24))
    got = []
    for b in wire:
        parser.feed(bytes([b]))
        while (f := parser.next()) is not None:
            got.append(f)
    assert got == FRAMES[:8]


def test_wire_layout_of_fixed_frames():
    assert spdyframes.encode_frame(spdyframes.Ping(7)) == bytes.fromhex("80030006 00000004 00000007")
    assert spdyframes.encode_frame(spdyframes.RstStream(3, 5)) == bytes.fromhex("80030003 00000008 00000003 00000005")
    assert spdyframes.encode_frame(spdyframes.GoAway(5, 0)) == bytes.fromhex("80030007 00000008 00000005 00000000")
    assert spdyframes.encode_frame(spdyframes.WindowUpdate(1, 10)) == bytes.fromhex(
        "80030009 00000008 00000001 0000000a"
    )
    assert spdyframes.encode_frame(spdyframes.Data(1, b"ab", fin=True)) == bytes.fromhex("00000001 01000002 6162")


def test_header_blocks_continue_one_zlib_stream_with_the_spdy3_dictionary():
    comp = spdyframes.HeaderCompressor()
    first = comp.compress((("streamtype", "stdout"),))
    second = comp.compress((("streamtype", "stdout"),))
    # Only the first block carries the zlib header naming the dictionary (FDICT and its Adler-32).
    assert first[0] == 0x78 and first[1] & 0x20
    assert struct.unpack(">I", first[2:6])[0] == zlib.adler32(spdyframes.DICTIONARY)
    assert len(second) < len(first)  # it refers back to the first block
    dec = spdyframes.HeaderDecompressor()
    assert dec.decompress(first) == (("streamtype", "stdout"),)
    assert dec.decompress(second) == (("streamtype", "stdout"),)
    # A fresh context cannot read the second block alone: the contexts are per connection and direction.
    with pytest.raises(spdy.SpdyError):
        spdyframes.HeaderDecompressor().decompress(second)


def test_dictionary_is_spdy3s():
    assert len(spdyframes.DICTIONARY) == 1423
    assert spdyframes.DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert spdyframes.DICTIONARY.endswith(b"charset=iso-8859-1,utf-,*,enq=0.")


def _block(pairs: list[tuple[bytes, bytes]], count: int | None = None) -> bytes:
    out = struct.pack(">I", len(pairs) if count is None else count)
    for n, v in pairs:
        out += struct.pack(">I", len(n)) + n + struct.pack(">I", len(v)) + v
    return out


@pytest.mark.parametrize(
    "block, error",
    [
        (b"", "truncated"),
        (_block([(b"a", b"b")], count=2), "truncated"),
        (_block([(b"", b"b")]), "invalid header name"),
        (_block([(b"Upper", b"b")]), "invalid header name"),
        (_block([(b"a", b"1"), (b"a", b"2")]), "given twice"),
        (_block([(b"a", b"b")]) + b"junk", "trailing"),
        (_block([], count=10_000), "pairs"),
        (struct.pack(">I", 1) + struct.pack(">I", 1 << 30), "truncated"),
        (_block([(b"\xff", b"b")]), "undecodable"),
    ],
)
def test_bad_header_blocks(block, error):
    with pytest.raises(spdy.SpdyError, match=error):
        spdyframes.decode_header_block(block)


def test_multi_valued_header_splits_on_nul():
    assert spdyframes.decode_header_block(_block([(b"a", b"1\x002")])) == (("a", "1"), ("a", "2"))


def test_compression_bomb_is_refused_without_inflating_it():
    z = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, zdict=spdyframes.DICTIONARY)
    bomb = z.compress(_block([(b"a", b"A" * (64 * 1024 * 1024))])) + z.flush(zlib.Z_SYNC_FLUSH)
    assert len(bomb) < 100_000
    with pytest.raises(spdy.SpdyError, match="inflates past"):
        spdyframes.HeaderDecompressor().decompress(bomb)


def _control(ftype: int, payload: bytes, flags: int = 0, version: int = 3) -> bytes:
    return struct.pack(">II", 0x80000000 | version << 16 | ftype, flags << 24 | len(payload)) + payload


@pytest.mark.parametrize(
    "wire, error",
    [
        (_control(spdyframes.PING, b"\0\0\0"), "expected 4"),
        (_control(spdyframes.RST_STREAM, b"\0" * 4), "expected 8"),
        (_control(spdyframes.WINDOW_UPDATE, b"\0" * 12), "expected 8"),
        (_control(spdyframes.SETTINGS, struct.pack(">I", 3)), "entries"),
        (_control(spdyframes.SETTINGS, b"\0"), "too short"),
        (_control(spdyframes.SYN_STREAM, b"\0" * 5), "too short"),
        (_control(spdyframes.SYN_STREAM, b"\0\0\0\1" + b"\0" * 6 + b"not zlib"), "does not inflate"),
        (_control(spdyframes.PING, b"\0\0\0\1", version=2), "version 2"),
        (struct.pack(">II", 0, 3) + b"abc", "stream 0"),
        (struct.pack(">II", 1, 2 << 20), "frame of"),
    ],
)
def test_malformed_frames(wire, error):
    with pytest.raises(spdy.SpdyError, match=error):
        _parse_all(wire, spdy.Limits())


def test_unknown_control_frames_are_ignored():
    assert _parse_all(_control(42, b"whatever")) == [spdyframes.Unknown(42)]


# ---------------------------------------------------------------------------------------------------- sessions


async def _session(handler, *, limits=spdy.Limits(), clock=REAL_CLOCK, accept=None):
    """A server on loopback running `handler(conn)` beside `conn.serve()`; yields a connected SpdyClient."""
    done: asyncio.Future[spdy.SpdyConnection] = asyncio.get_running_loop().create_future()

    async def on_conn(reader, writer):
        conn = spdy.SpdyConnection(reader, writer, clock=clock, limits=limits, accept=accept, name="test")
        try:
            await (conn.run(handler) if handler else conn.serve())
        finally:
            done.set_result(conn)

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return server, SpdyClient(reader, writer), done


async def _finish(server, client, done):
    client.close()
    async with asyncio.timeout(30):
        conn = await done
    server.close()
    await server.wait_closed()
    assert conn.closed and not conn.streams
    return conn


async def _echo(conn: spdy.SpdyConnection) -> None:
    tasks = set()
    try:
        while (stream := await conn.accept_stream()) is not None:
            tasks.add(asyncio.ensure_future(_echo_stream(stream)))
        await asyncio.sleep(3600)  # the session ends it
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _echo_stream(stream: spdy.Stream) -> None:
    try:
        while data := await stream.read():
            await stream.write(data)
        await stream.close()
    except spdy.StreamReset:
        pass


def test_streams_are_replied_echoed_and_finished():
    async def main():
        server, c, done = await _session(_echo)
        a = await c.open({"streamtype": "data"})
        b = await c.open({"streamtype": "error"})
        await c.write(a, b"ping " * 30000)  # 150 kB: more than a window, in frames of at most 32 KiB
        # WINDOW_UPDATEs as the echo consumes the data (none once the stream is finished: nothing more comes).
        await c.until(lambda: any(isinstance(f, spdyframes.WindowUpdate) and f.stream_id == a for f in c.frames))
        await c.write(b, b"pong", fin=True)
        await c.write(a, b"", fin=True)
        await c.until(lambda: c.streams[a].fin and c.streams[b].fin)
        assert bytes(c.streams[a].data) == b"ping " * 30000
        assert bytes(c.streams[b].data) == b"pong"
        assert c.streams[a].replied and c.streams[b].replied
        assert all(len(f.data) <= spdyframes.MAX_DATA_CHUNK for f in c.frames if isinstance(f, spdyframes.Data))
        # We sent the first SETTINGS and WINDOW_UPDATEs as the echo consumed the data.
        assert isinstance(c.frames[0], spdyframes.Settings)
        assert any(isinstance(f, spdyframes.WindowUpdate) and f.stream_id == a for f in c.frames)
        await c.send(spdyframes.Ping(5))
        await c.until(lambda: spdyframes.Ping(5) in c.frames)
        await _finish(server, c, done)

    asyncio.run(main())


def test_flow_control_is_kept_once_the_peer_keeps_it():
    got: list[spdy.Stream] = []

    async def handler(conn):
        stream = await conn.accept_stream()
        got.append(stream)
        await stream.write(b"z" * 100_000)
        await stream.close()

    async def main():
        server, c, done = await _session(handler)
        await c.send(spdyframes.Settings(((0, spdyframes.SETTINGS_INITIAL_WINDOW_SIZE, 1000),)))
        sid = await c.open({})
        await c.until(lambda: len(c.streams[sid].data) >= 1000)
        await c.send(spdyframes.Ping(1))  # answered after anything the server had sent before it
        await c.until(lambda: spdyframes.Ping(1) in c.frames)
        assert len(c.streams[sid].data) == 1000  # the window is shut: no more until we open it
        await c.send(spdyframes.WindowUpdate(sid, 200_000))
        await c.until(lambda: len(c.streams[sid].data) >= spdyframes.INITIAL_WINDOW)
        await c.send(spdyframes.Ping(3))
        await c.until(lambda: spdyframes.Ping(3) in c.frames)
        assert len(c.streams[sid].data) == spdyframes.INITIAL_WINDOW  # now the connection's window (SPDY/3.1) is shut
        await c.send(spdyframes.WindowUpdate(0, 200_000))
        await c.until(lambda: c.streams[sid].fin)
        assert len(c.streams[sid].data) == 100_000
        await _finish(server, c, done)

    asyncio.run(main())


def test_without_flow_control_from_the_peer_output_is_not_stalled():
    """spdystream never sends WINDOW_UPDATE: more than 64 KiB must still flow."""

    async def handler(conn):
        stream = await conn.accept_stream()
        await stream.write(b"q" * 300_000)
        await stream.close()

    async def main():
        server, c, done = await _session(handler)
        sid = await c.open({})
        await c.until(lambda: c.streams[sid].fin)
        assert len(c.streams[sid].data) == 300_000
        await _finish(server, c, done)

    asyncio.run(main())


@pytest.mark.parametrize(
    "frames, expect",
    [
        # (client frames after the session starts, what the server does: "goaway" or an RST status on stream 1)
        ([spdyframes.SynStream(2, ())], "goaway"),  # even id: server-initiated ids are not the client's
        ([spdyframes.SynStream(3, ()), spdyframes.SynStream(1, ())], "goaway"),  # ids must increase
        ([spdyframes.Data(1, b"x")], spdyframes.INVALID_STREAM),  # data for a stream never opened
        ([spdyframes.SynStream(1, (), fin=True), spdyframes.Data(1, b"x")], spdyframes.STREAM_ALREADY_CLOSED),
        ([spdyframes.SynReply(1)], spdyframes.INVALID_STREAM),
        ([spdyframes.SynStream(1, ()), spdyframes.WindowUpdate(1, 0)], spdyframes.FLOW_CONTROL_ERROR),
        (
            [spdyframes.SynStream(1, ()), spdyframes.WindowUpdate(1, spdyframes.MAX_WINDOW)],
            spdyframes.FLOW_CONTROL_ERROR,
        ),
        ([spdyframes.WindowUpdate(0, 0)], "goaway"),
        ([spdyframes.Settings(((0, spdyframes.SETTINGS_INITIAL_WINDOW_SIZE, 1 << 31),))], "goaway"),
    ],
)
def test_protocol_errors(frames, expect):
    async def main():
        server, c, done = await _session(None)
        for f in frames:
            await c.send(f)
        if expect == "goaway":
            await c.drain_to_eof()
            assert c.goaway is not None and c.goaway.status == spdyframes.GOAWAY_PROTOCOL_ERROR
        else:
            await c.until(lambda: 1 in c.streams and c.streams[1].reset is not None)
            assert c.streams[1].reset == expect
            await c.send(spdyframes.Ping(1))  # the session goes on
            await c.until(lambda: spdyframes.Ping(1) in c.frames)
        conn = await _finish(server, c, done)
        assert (conn.error is not None) == (expect == "goaway")

    asyncio.run(main())


def test_refused_and_too_many_streams():
    async def main():
        limits = spdy.Limits(max_streams=3)
        server, c, done = await _session(None, limits=limits, accept=lambda h: h.get("streamtype") != "bad")
        bad = await c.open({"streamtype": "bad"})
        ids = [await c.open({"streamtype": "ok"}) for _ in range(4)]
        await c.until(lambda: c.streams[bad].reset is not None and c.streams[ids[3]].reset is not None)
        assert c.streams[bad].reset == spdyframes.REFUSED_STREAM
        assert [c.streams[i].replied for i in ids] == [True, True, True, False]
        assert c.streams[ids[3]].reset == spdyframes.REFUSED_STREAM
        await _finish(server, c, done)

    asyncio.run(main())


def test_idle_timeout_from_the_clock():
    async def main():
        clock = FakeClock()
        server, c, done = await _session(None, clock=clock, limits=spdy.Limits(idle_timeout=60))
        await c.drain_to_eof()  # the fake clock's sleep passes the whole timeout at once
        assert c.goaway is not None and c.goaway.status == spdyframes.GOAWAY_OK
        await _finish(server, c, done)

    asyncio.run(main())


def test_peer_goaway_ends_the_session_and_wakes_readers():
    reads: list[bytes] = []

    async def handler(conn):
        stream = await conn.accept_stream()
        reads.append(await stream.read())
        with pytest.raises(spdy.StreamReset):
            await stream.write(b"late")

    async def main():
        server, c, done = await _session(handler)
        await c.open({})
        await c.until(lambda: c.streams[1].replied)
        await c.send(spdyframes.GoAway(0))
        await c.drain_to_eof()
        await _finish(server, c, done)
        assert reads == [b""]

    asyncio.run(main())


def test_a_stream_never_read_by_a_window_ignoring_peer_is_reset_and_the_rest_flows():
    """spdystream ignores our window: the unread stream holds at most max_stream_buffer, is reset with
    FLOW_CONTROL_ERROR when nothing of it is read for stall_timeout, and the other streams and PING go on."""
    conns: list[spdy.SpdyConnection] = []
    limits = spdy.Limits(max_stream_buffer=256 * 1024, stall_timeout=0.2)

    async def handler(conn):
        conns.append(conn)
        await conn.accept_stream()  # and never read it
        await _echo(conn)

    async def main():
        server, c, done = await _session(handler, limits=limits)
        sid = await c.open({})
        for _ in range(64):  # 2 MiB, far past the window and the buffer
            await c.write(sid, b"x" * 32768)
        await c.until(lambda: spdyframes.RstStream(sid, spdyframes.FLOW_CONTROL_ERROR) in c.frames)
        stream = conns[0].streams[sid]  # still counted: the application has not let go of it
        assert stream.buffered == 0 and stream.reset_status == spdyframes.FLOW_CONTROL_ERROR
        await c.send(spdyframes.Ping(7))
        other = await c.open({})
        await c.write(other, b"hello", fin=True)
        await c.until(lambda: spdyframes.Ping(7) in c.frames and c.streams[other].fin)
        assert bytes(c.streams[other].data) == b"hello"
        await _finish(server, c, done)

    asyncio.run(main())


def test_a_window_keeping_peer_is_held_to_64_kib_per_stream_and_the_rest_flows():
    conns: list[spdy.SpdyConnection] = []

    async def handler(conn):
        conns.append(conn)
        await conn.accept_stream()  # and never read it
        await _echo(conn)

    async def main():
        server, c, done = await _session(handler)
        sid = await c.open({})
        await c.write(sid, b"x" * spdyframes.INITIAL_WINDOW)  # the whole window, then the client waits for updates
        await c.send(spdyframes.Ping(9))
        other = await c.open({})
        await c.write(other, b"y" * 200_000)  # read by the echo: updates come for it only
        await c.until(lambda: any(isinstance(f, spdyframes.WindowUpdate) and f.stream_id == other for f in c.frames))
        await c.write(other, b"", fin=True)
        await c.until(lambda: spdyframes.Ping(9) in c.frames and c.streams[other].fin)
        assert bytes(c.streams[other].data) == b"y" * 200_000
        assert not any(isinstance(f, spdyframes.WindowUpdate) and f.stream_id == sid for f in c.frames)
        assert any(isinstance(f, spdyframes.WindowUpdate) and f.stream_id == other for f in c.frames)
        assert conns[0].streams[sid].buffered == spdyframes.INITIAL_WINDOW and not c.streams[sid].fin
        await _finish(server, c, done)

    asyncio.run(main())


def test_a_slow_reader_pushes_back_through_tcp_and_loses_nothing():
    async def handler(conn):
        stream = await conn.accept_stream()
        got = bytearray()
        while data := await stream.read():
            got += data
            await asyncio.sleep(0.001)
        await stream.write(str(len(got)).encode())
        await stream.close()

    async def main():
        server, c, done = await _session(handler, limits=spdy.Limits(max_stream_buffer=128 * 1024))
        sid = await c.open({})
        for _ in range(40):
            await c.write(sid, b"x" * 32768)
        await c.write(sid, b"", fin=True)
        await c.until(lambda: c.streams[sid].fin)
        assert bytes(c.streams[sid].data) == str(40 * 32768).encode()
        await _finish(server, c, done)

    asyncio.run(main())


def test_a_syn_rst_loop_cannot_evade_max_streams():
    """A stream reset by the peer stays counted while the application holds it (here: forever)."""
    held: list[spdy.Stream] = []

    async def handler(conn):
        while (stream := await conn.accept_stream()) is not None:
            held.append(stream)

    async def main():
        server, c, done = await _session(handler, limits=spdy.Limits(max_streams=4))
        for i in range(50):
            sid = 2 * i + 1
            await c.send(spdyframes.SynStream(sid, (("streamtype", "data"),)))
            await c.send(spdyframes.RstStream(sid, spdy.CANCEL))
        await c.send(spdyframes.Ping(11))
        await c.until(lambda: spdyframes.Ping(11) in c.frames)
        assert len(held) == 4
        refused = [f for f in c.frames if isinstance(f, spdyframes.RstStream) and f.status == spdyframes.REFUSED_STREAM]
        assert len(refused) == 46
        # Letting go of them frees the room.
        for s in held:
            await s.close()
        await c.send(spdyframes.SynStream(101, (("streamtype", "data"),)))
        await c.until(lambda: 101 in c.streams and c.streams[101].replied)
        await _finish(server, c, done)

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------------- fuzzing

_frame = st.one_of(
    st.builds(spdyframes.Data, st.integers(1, 11), st.binary(max_size=300), st.booleans()),
    st.builds(
        spdyframes.SynStream,
        st.integers(1, 40),
        st.lists(st.tuples(st.sampled_from(["streamtype", "port", "x"]), st.text(max_size=8)), max_size=3).map(tuple),
        fin=st.booleans(),
    ),
    st.builds(spdyframes.SynReply, st.integers(1, 9)),
    st.builds(spdyframes.RstStream, st.integers(0, 11), st.integers(0, 12)),
    st.builds(
        spdyframes.Settings,
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9), st.integers(0, 2**32 - 1)), max_size=3).map(tuple),
    ),
    st.builds(spdyframes.Ping, st.integers(0, 2**32 - 1)),
    st.builds(spdyframes.WindowUpdate, st.integers(0, 11), st.integers(0, spdyframes.MAX_WINDOW)),
    st.builds(spdyframes.GoAway, st.integers(0, 11)),
)
_chunk = st.one_of(_frame, st.binary(min_size=1, max_size=40))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_chunk, max_size=12))
def test_fuzz_a_bad_client_ends_only_its_own_session(chunks):
    async def main():
        before = set(asyncio.all_tasks())
        server, c, done = await _session(_echo, limits=spdy.Limits(max_streams=4, max_frame=4096))
        for chunk in chunks:
            try:
                if isinstance(chunk, bytes):
                    await c.send_raw(chunk)
                else:
                    await c.send(chunk)
            except ConnectionError:
                break
        c.writer.write_eof() if c.writer.can_write_eof() else None
        try:
            await c.drain_to_eof()
        except ConnectionError:
            pass
        await _finish(server, c, done)
        await asyncio.sleep(0)
        left = {t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()}
        assert not left, left

    asyncio.run(main())


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 200))
def test_fuzz_stream_flood_is_bounded(n):
    async def main():
        server, c, done = await _session(None, limits=spdy.Limits(max_streams=8))
        for _ in range(n):
            await c.open({"streamtype": "data"})
        await c.send(spdyframes.Ping(1))
        await c.until(lambda: spdyframes.Ping(1) in c.frames)
        refused = sum(1 for s in c.streams.values() if s.reset == spdyframes.REFUSED_STREAM)
        assert refused == max(0, n - 8)
        await _finish(server, c, done)

    asyncio.run(main())
