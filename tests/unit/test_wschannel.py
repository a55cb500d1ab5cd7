"""kubelet's WebSocket channel framing for exec (pure parts): subprotocol choice, the accept token, channel
messages both ways, binary and base64."""

from __future__ import annotations

import pytest

from edgelet.streaming import wschannel
from edgelet.streaming.errors import RequestRefused


@pytest.mark.parametrize(
    "offered, chosen",
    [
        ("v5.channel.k8s.io, v4.channel.k8s.io", "v5.channel.k8s.io"),
        ("v4.base64.channel.k8s.io,channel.k8s.io", "v4.base64.channel.k8s.io"),
        ("x.example, base64.channel.k8s.io", "base64.channel.k8s.io"),
    ],
)
def test_negotiate_in_the_clients_order(offered, chosen):
    assert wschannel.negotiate([("Sec-WebSocket-Protocol", offered)]) == chosen


def test_negotiate_nothing_offered_is_v1_and_unknown_ones_are_refused():
    assert wschannel.negotiate([]) == ""
    with pytest.raises(RequestRefused) as err:
        wschannel.negotiate([("Sec-WebSocket-Protocol", "v9.channel.k8s.io")])
    assert err.value.status == 400


@pytest.mark.parametrize(
    "sub, semantics",
    [
        ("v5.channel.k8s.io", "v4.channel.k8s.io"),
        ("v4.base64.channel.k8s.io", "v4.channel.k8s.io"),
        ("channel.k8s.io", "channel.k8s.io"),
        ("", "channel.k8s.io"),
    ],
)
def test_exec_semantics(sub, semantics):
    assert wschannel.exec_protocol(sub) == semantics


def test_accept_token_is_rfc6455s():
    # RFC 6455's own example.
    assert wschannel.accept_token([("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    with pytest.raises(RequestRefused):
        wschannel.accept_token([("Sec-WebSocket-Key", "short")])


@pytest.mark.parametrize("text", [False, True])
def test_messages_round_trip(text):
    msg = wschannel.encode_message(1, b"\x00hi\xff", text=text)
    assert isinstance(msg, str) is text
    assert wschannel.decode_message(msg) == (1, b"\x00hi\xff")


@pytest.mark.parametrize("msg", [b"", "", "x123", "0***"])
def test_bad_messages(msg):
    with pytest.raises(ValueError):
        wschannel.decode_message(msg)


def test_websocket_upgrade_detection():
    assert wschannel.is_websocket_upgrade([("Connection", "Upgrade"), ("Upgrade", "websocket")])
    assert not wschannel.is_websocket_upgrade([("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")])


# ---------------------------------------------------------------------------------------------- sessions

import asyncio  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from wsproto.connection import Connection, ConnectionType  # noqa: E402
from wsproto.events import BytesMessage, CloseConnection  # noqa: E402

from edgelet.util.clock import REAL_CLOCK  # noqa: E402


async def _session(
    handler, raw: list[bytes], subprotocol: str = "v5.channel.k8s.io", *, eof: bool = False
) -> list[object]:
    """A WsSession on loopback fed `raw` bytes by a client; the client's events until the server closes."""
    done = asyncio.get_running_loop().create_future()

    async def on_conn(reader, writer):
        try:
            await wschannel.WsSession(reader, writer, subprotocol=subprotocol, clock=REAL_CLOCK).run(handler)
        finally:
            done.set_result(None)

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    client = Connection(ConnectionType.CLIENT)
    events: list[object] = []
    try:
        for chunk in raw:
            writer.write(chunk)
        if eof:
            writer.write_eof()  # a client that stops mid-frame is done too
        await writer.drain()
        async with asyncio.timeout(30):
            while data := await reader.read(65536):
                client.receive_data(data)
                for ev in client.events():
                    events.append(ev)
                    if isinstance(ev, CloseConnection) and not eof:
                        writer.write(client.send(ev.response()))
    except ConnectionError:
        pass  # the server closed on a bad client with its bytes unread: a reset
    async with asyncio.timeout(30):
        await done
    writer.close()
    server.close()
    await server.wait_closed()
    return events


def test_session_echoes_stdin_to_stdout_and_closes():
    async def handler(session):
        stdin, stdout = session.channel("stdin"), session.channel("stdout")
        while data := await stdin.read():
            await stdout.write(data)

    client = Connection(ConnectionType.CLIENT)
    raw = [client.send(BytesMessage(data=b"\x00hello")), client.send(BytesMessage(data=bytes([255, 0])))]
    events = asyncio.run(_session(handler, raw))
    assert [bytes(e.data) for e in events if isinstance(e, BytesMessage)] == [b"\x01hello"]
    assert isinstance(events[-1], CloseConnection) and events[-1].code == 1000


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=64),
            st.builds(lambda b: Connection(ConnectionType.CLIENT).send(BytesMessage(data=b)), st.binary(max_size=64)),
        ),
        max_size=8,
    )
)
def test_fuzz_a_bad_client_ends_its_session_and_nothing_else(chunks):
    async def handler(session):
        await session.channel("stdin").read()
        await asyncio.sleep(3600)

    async def main():
        before = set(asyncio.all_tasks())
        await _session(handler, chunks, eof=True)
        await asyncio.sleep(0)
        left = {t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()}
        assert not left, left

    asyncio.run(main())


@pytest.mark.parametrize(
    "query, ports", [({"port": ["80"]}, [80]), ({"port": ["80", "443"]}, [80, 443]), ({"port": ["80,443"]}, [80, 443])]
)
def test_parse_ports(query, ports):
    assert wschannel.parse_ports(query) == ports


@pytest.mark.parametrize("query", [{}, {"port": ["0"]}, {"port": ["http"]}, {"port": ["70000"]}])
def test_bad_ports(query):
    with pytest.raises(RequestRefused) as err:
        wschannel.parse_ports(query)
    assert err.value.status == 400


def test_ports_beyond_the_cap_are_refused_before_any_channel_number_passes_a_byte():
    ports = ",".join(str(1000 + i) for i in range(wschannel.MAX_PORTS + 1))
    with pytest.raises(RequestRefused) as err:
        wschannel.parse_ports({"port": [ports]})
    assert err.value.status == 400 and f"at most {wschannel.MAX_PORTS}" in str(err.value)
    assert 2 * wschannel.MAX_PORTS <= 255  # every channel number fits its one byte
    assert wschannel.parse_ports({"port": [",".join(["80"] * wschannel.MAX_PORTS)]}) == [80] * wschannel.MAX_PORTS


def test_a_channel_never_read_holds_at_most_its_buffer_and_the_socket_pushes_back():
    """A client flooding stdin of a command that never reads: the session stops reading the socket once the
    channel holds MAX_BUFFER, so the rest waits in the kernel (the client's writes stall), not in the agent."""
    sessions: list[wschannel.WsSession] = []
    release = asyncio.Event()

    async def handler(session):
        sessions.append(session)
        await release.wait()  # never reads; the command's end ends the session

    async def main():
        done = asyncio.get_running_loop().create_future()

        async def on_conn(reader, writer):
            try:
                await wschannel.WsSession(reader, writer, subprotocol="v5.channel.k8s.io", clock=REAL_CLOCK).run(
                    handler
                )
            finally:
                done.set_result(None)

        server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        writer.transport.set_write_buffer_limits(high=0)
        client = Connection(ConnectionType.CLIENT)
        sent = 0
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(3):
                while True:  # 32 MiB unless the server pushes back
                    writer.write(client.send(BytesMessage(data=b"\x00" + b"x" * 65536)))
                    await writer.drain()
                    sent += 65536
                    assert sent < 32 * 1024 * 1024, "the server never pushed back"
        held = sum(len(b) for b in sessions[0].channel("stdin")._inbox)
        assert held <= 1024 * 1024 + 2 * 65536 < sent
        release.set()
        async with asyncio.timeout(30):
            await done
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_a_full_channel_read_down_lets_the_socket_be_read_again_and_loses_nothing():
    async def handler(session):
        stdin, stdout = session.channel("stdin"), session.channel("stdout")
        total = 0
        await asyncio.sleep(0.5)  # let the buffer fill and the reading stop
        while data := await stdin.read():
            total += len(data)
        await stdout.write(str(total).encode())

    client = Connection(ConnectionType.CLIENT)
    raw = [client.send(BytesMessage(data=b"\x00" + b"x" * 65536)) for _ in range(64)]
    raw.append(client.send(BytesMessage(data=bytes([255, 0]))))
    events = asyncio.run(_session(handler, raw))
    assert [bytes(e.data) for e in events if isinstance(e, BytesMessage)] == [b"\x01" + str(64 * 65536).encode()]
