"""The pure decisions of kubectl exec / port-forward on the node API: routes, protocol negotiation, exec options,
the streams a session waits for, what the error stream says, resize messages."""

from __future__ import annotations

import asyncio
import json

import pytest

from edgelet.server.nodeapi import match_node_route
from edgelet.server.routes import HttpError
from edgelet.streaming import portforward, remotecommand
from edgelet.streaming.errors import RequestRefused

V4, V3, V2, V1 = remotecommand.EXEC_PROTOCOLS


@pytest.mark.parametrize(
    "method, target, endpoint, params",
    [
        (
            "POST",
            "/exec/default/web-n1/c?command=ls&output=1",
            "exec",
            {"namespace": "default", "pod": "web-n1", "container": "c"},
        ),
        ("GET", "/exec/ns/p/uid-1/c?command=ls&output=1", "exec", {"namespace": "ns", "pod": "p", "container": "c"}),
        ("POST", "/portForward/default/web-n1", "port_forward", {"namespace": "default", "pod": "web-n1"}),
        ("GET", "/portForward/default/web-n1/uid", "port_forward", {"namespace": "default", "pod": "web-n1"}),
        (
            "POST",
            "/attach/default/web-n1/c?output=1",
            "attach",
            {"namespace": "default", "pod": "web-n1", "container": "c"},
        ),
    ],
)
def test_streaming_routes(method, target, endpoint, params):
    route = match_node_route(method, target)
    assert (route.endpoint, route.params) == (endpoint, params)


@pytest.mark.parametrize(
    "method, target, status, text",
    [
        ("POST", "/exec/default/web", 400, "expected /exec"),
        ("PUT", "/exec/default/web/c", 405, "not allowed"),
        ("POST", "/portForward/default", 400, "expected /portForward"),
        ("POST", "/attach/default/web", 400, "expected /attach"),
    ],
)
def test_bad_streaming_routes(method, target, status, text):
    with pytest.raises(HttpError) as err:
        match_node_route(method, target)
    assert err.value.status == status and text in err.value.message


@pytest.mark.parametrize(
    "offered, supported, chosen",
    [
        ([V4, V3, V2, V1], remotecommand.EXEC_PROTOCOLS, V4),
        ([V2, V4], remotecommand.EXEC_PROTOCOLS, V2),  # the client's order wins, as in kubelet's Handshake
        (["v9.channel.k8s.io", V3], remotecommand.EXEC_PROTOCOLS, V3),
        ([], remotecommand.EXEC_PROTOCOLS, V1),
        (["portforward.k8s.io"], remotecommand.PORT_FORWARD_PROTOCOLS, "portforward.k8s.io"),
    ],
)
def test_negotiate(offered, supported, chosen):
    assert remotecommand.negotiate(offered, supported) == chosen


def test_negotiate_refuses_with_kubelets_403():
    with pytest.raises(RequestRefused) as err:
        remotecommand.negotiate(["v9.channel.k8s.io"], remotecommand.EXEC_PROTOCOLS)
    assert err.value.status == 403 and "unable to negotiate protocol" in str(err.value)


def test_client_protocols_from_repeated_and_comma_separated_headers():
    headers = [("X-Stream-Protocol-Version", V4), ("x-stream-protocol-version", f"{V3}, {V2}"), ("Other", "x")]
    assert remotecommand.client_protocols(headers) == [V4, V3, V2]


@pytest.mark.parametrize(
    "headers, ok",
    [
        ([("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")], True),
        ([("Connection", "keep-alive, Upgrade"), ("Upgrade", "spdy/3.1")], True),
        ([("Upgrade", "SPDY/3.1")], False),
        ([("Connection", "Upgrade"), ("Upgrade", "websocket")], False),
    ],
)
def test_is_spdy_upgrade(headers, ok):
    assert remotecommand.is_spdy_upgrade(headers) is ok


@pytest.mark.parametrize(
    "query, opts",
    [
        (
            {"command": ["sh", "-c", "exit 3"], "output": ["1"], "error": ["1"]},
            remotecommand.ExecOptions(("sh", "-c", "exit 3"), stdout=True, stderr=True),
        ),
        (
            {"command": ["sh"], "input": ["1"], "output": ["1"], "tty": ["1"], "error": ["1"]},
            remotecommand.ExecOptions(("sh",), stdin=True, stdout=True, tty=True),
        ),  # with a tty, no stderr stream
        ({"command": ["ls"], "stdout": ["true"]}, remotecommand.ExecOptions(("ls",), stdout=True)),
    ],
)
def test_parse_exec_options(query, opts):
    assert remotecommand.parse_exec_options(query) == opts


@pytest.mark.parametrize(
    "query, text",
    [
        ({"output": ["1"]}, "no command"),
        ({"command": ["ls"]}, "at least 1 of stdin, stdout, stderr"),
    ],
)
def test_bad_exec_options(query, text):
    with pytest.raises(RequestRefused) as err:
        remotecommand.parse_exec_options(query)
    assert err.value.status == 400 and text in str(err.value)


@pytest.mark.parametrize(
    "opts, protocol, streams",
    [
        (remotecommand.ExecOptions(("ls",), stdout=True, stderr=True), V4, {"error", "stdout", "stderr"}),
        (
            remotecommand.ExecOptions(("sh",), stdin=True, stdout=True, tty=True),
            V4,
            {"error", "stdin", "stdout", "resize"},
        ),
        (remotecommand.ExecOptions(("sh",), stdin=True, stdout=True, tty=True), V2, {"error", "stdin", "stdout"}),
    ],
)
def test_expected_streams(opts, protocol, streams):
    assert remotecommand.expected_streams(opts, protocol) == streams


def test_error_stream_v4_statuses():
    assert json.loads(remotecommand.error_stream_body(V4, ["true"], 0)) == {"metadata": {}, "status": "Success"}
    failed = json.loads(remotecommand.error_stream_body(V4, ["sh", "-c", "exit 3"], 3))
    assert failed["status"] == "Failure" and failed["reason"] == "NonZeroExitCode"
    assert failed["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    internal = json.loads(remotecommand.error_stream_body(V4, ["x"], None, "no such file"))
    assert internal["reason"] == "InternalError" and "no such file" in internal["message"]


def test_error_stream_older_protocols_carry_text():
    assert remotecommand.error_stream_body(V2, ["true"], 0) == b""
    assert b"exit code 3" in remotecommand.error_stream_body(V3, ["false"], 3)


def test_resize_decoder_takes_concatenated_json_across_chunks():
    d = remotecommand.ResizeDecoder()
    assert d.feed(b'{"Width":80,"Height":24}{"Width":1') == [(80, 24)]
    assert d.feed(b'00,"Height":30}') == [(100, 30)]
    assert d.feed(b'{"Width":0,"Height":0}{not json}') == []
    assert d.feed(b"x" * 10_000) == []  # junk is dropped, not buffered


def test_stream_acceptance():
    seen: set[str] = set()
    accept = remotecommand.accept_exec_stream(frozenset({"error", "stdout"}), seen)
    assert accept({"streamtype": "error"}) and accept({"streamtype": "stdout"})
    assert not accept({"streamtype": "stdout"})  # twice
    assert not accept({"streamtype": "stdin"})  # not asked for
    assert remotecommand.accept_port_forward_stream({"streamtype": "data", "port": "80", "requestid": "0"})
    assert not remotecommand.accept_port_forward_stream({"streamtype": "data", "port": "0"})
    assert not remotecommand.accept_port_forward_stream({"streamtype": "data", "port": "http"})
    assert not remotecommand.accept_port_forward_stream({"streamtype": "stdout", "port": "80"})


class _FakeApi:
    """The few Api members the streaming endpoints use."""

    from edgelet.util.clock import FakeClock as _Clock

    clock = _Clock()
    start_exec = staticmethod(lambda *a, **k: None)

    def running_container(self, namespace, pod, container):
        return "c" * 64

    def attach_socket(self, cid):
        return "/nonexistent"


def _node_api(max_sessions: int):
    from edgelet.server.nodeapi import NodeApi

    return NodeApi(
        _FakeApi(), None, stats=None, runtime_pods=lambda: {}, metrics=None, cgroup_root="", max_sessions=max_sessions
    )


SPDY_HEADERS = (("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"), ("X-Stream-Protocol-Version", V4))
WS_HEADERS = (
    ("Connection", "Upgrade"),
    ("Upgrade", "websocket"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Sec-WebSocket-Protocol", V4),
)


@pytest.mark.parametrize("headers", [SPDY_HEADERS, WS_HEADERS])
def test_the_session_cap_answers_429(headers):
    from edgelet.server.http import Request, Upgrade
    from edgelet.server.nodeapi import match_node_route

    target = "/exec/default/p/c?command=true&output=1"
    api = _node_api(max_sessions=2)
    request = Request("POST", target, headers)
    assert isinstance(api._streaming(match_node_route("POST", target), request), Upgrade)
    api.sessions = 2
    with pytest.raises(HttpError) as err:
        api._streaming(match_node_route("POST", target), request)
    assert err.value.status == 429 and ("Retry-After", "5") in err.value.headers


def test_a_refused_streaming_request_is_answered_with_its_http_status():
    """Streaming refuses in its own terms (RequestRefused); the node API answers with that status as a Status."""
    import asyncio

    from edgelet.server.http import Request
    from edgelet.server.nodeapi import NodeApi, NodeApiConfig

    config = NodeApiConfig(ssl=None, tokens={}, grants=(), node_name="n")  # type: ignore[arg-type]
    api = NodeApi(_FakeApi(), config, stats=None, runtime_pods=lambda: {}, metrics=None, cgroup_root="")
    admin = {"subject": ((("commonName", "admin"),), (("organizationName", "system:masters"),))}
    cases = [
        ("/exec/default/p/c?output=1", SPDY_HEADERS, 400, "no command given"),
        (
            "/exec/default/p/c?command=true&output=1",
            (*SPDY_HEADERS[:2], ("X-Stream-Protocol-Version", "v9")),
            403,
            "unable to negotiate",
        ),
        ("/portForward/default/p?port=http", WS_HEADERS, 400, "invalid port"),
    ]
    for target, headers, status, text in cases:
        with pytest.raises(HttpError) as err:
            asyncio.run(api.handle(Request("POST", target, headers, admin)))
        assert err.value.status == status and text in err.value.message, target
        assert isinstance(err.value.__cause__, RequestRefused)


class _Conn:
    """A session that has opened `kinds` streams and then none (the client stalls)."""

    def __init__(self, kinds):
        self._streams = [type("S", (), {"header": lambda self, n, k=k: k})() for k in kinds]

    async def accept_stream(self):
        if self._streams:
            return self._streams.pop(0)
        await asyncio.sleep(3600)


def test_stream_creation_timeout_comes_from_the_clock():
    import asyncio as _asyncio

    from edgelet.util.clock import FakeClock

    got = _asyncio.run(
        remotecommand.collect_streams(_Conn(["error", "stdout"]), frozenset({"error", "stdout"}), FakeClock(), 30)
    )
    assert set(got) == {"error", "stdout"}
    with pytest.raises(remotecommand.SessionError, match=r"timed out waiting for streams: got \['error'\]"):
        _asyncio.run(remotecommand.collect_streams(_Conn(["error"]), frozenset({"error", "stdout"}), FakeClock(), 30))


def test_concurrent_upgrades_cannot_overshoot_the_session_cap():
    """40 upgrades checked at once all pass the first check (nothing counted yet); only 16 sessions run, the
    others end their connection."""
    api = _node_api(max_sessions=16)
    release = asyncio.Event()
    running = []

    class _Writer:
        closed = False

        def close(self):
            self.closed = True

    async def session():
        running.append(api.sessions)
        await release.wait()

    async def main():
        for _ in range(40):
            api._check_session_room()
        writers = [_Writer() for _ in range(40)]
        tasks = [asyncio.ensure_future(api._counted_session(session, w)) for w in writers]
        while len(running) + sum(w.closed for w in writers) < 40:
            await asyncio.sleep(0.01)
        assert len(running) == 16 and max(running) == 16 and api.sessions == 16
        assert sum(w.closed for w in writers) == 24
        release.set()
        await asyncio.gather(*tasks)
        assert api.sessions == 0

    asyncio.run(main())


class _Stream:
    """A port-forward stream as serve_port_forward and forward see it."""

    def __init__(self, headers, *, reset=False):
        self.headers = headers
        self.reset_status = 5 if reset else None
        self.closed = False

    def header(self, name):
        return self.headers.get(name, "")

    async def read(self):
        if self.reset_status is None:
            await asyncio.sleep(3600)
        return b""

    async def write(self, data):
        pass

    async def close(self):
        self.closed = True

    async def reset(self, status=5):
        self.closed = True


def test_a_reset_ends_the_forward_even_when_the_listener_is_silent():
    import socket

    async def main():
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setblocking(False)
        port = listener.getsockname()[1]
        data, error = _Stream({}, reset=True), _Stream({})
        try:
            async with asyncio.timeout(30):
                await portforward.forward(data, error, port, None, "ns/pod")
            peer, _ = listener.accept()  # the connection was made, the listener never answered
            peer.setblocking(False)
            assert data.closed and error.closed
            await asyncio.sleep(0.05)
            assert peer.recv(1) == b""  # our side is closed: the descriptor is not held
            peer.close()
        finally:
            listener.close()

    asyncio.run(main())


def test_port_forward_expiry_timers_do_not_pile_up():
    import gc

    from edgelet.util.clock import FakeClock

    pairs = 200

    class _PairConn:
        def __init__(self):
            self._streams = []
            for i in range(pairs):
                for kind in ("error", "data"):
                    self._streams.append(_Stream({"requestid": str(i), "streamtype": kind, "port": "1"}, reset=True))

        async def accept_stream(self):
            if self._streams:
                return self._streams.pop(0)
            for _ in range(3):
                await asyncio.sleep(0)  # the cancelled timers finish
            gc.collect()
            timers = [
                o
                for o in gc.get_objects()
                if isinstance(o, asyncio.Task) and getattr(o.get_coro(), "__name__", "") == "expire"
            ]
            assert len(timers) <= 1, f"{len(timers)} expiry timers held for {pairs} completed pairs"
            return None

    async def main():
        await portforward.serve_port_forward(
            _PairConn(), netns=None, clock=FakeClock(), what="ns/pod", creation_timeout=3600
        )

    asyncio.run(main())
