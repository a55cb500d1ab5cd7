"""Probers against real loopback servers (host namespace), exec through a scripted runtime, and the probe manager."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from edgelet.api.types import HTTPGetAction, TCPSocketAction
from edgelet.container.errors import ExecError, ExecTimeout
from edgelet.container.types import Completed
from edgelet.events import EventRecorder
from edgelet.probes.machine import Result
from edgelet.probes.probers import Outcome, ProbeTarget, build_request, exec_probe, http_probe, tcp_probe
from edgelet.util.clock import FakeClock

HOST = ProbeTarget(container_id="c1", netns=None, ports={"http": 0})


async def serve(status: int, seen: list[bytes]):
    async def handle(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head)
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize(
    "status, result",
    [(200, Result.SUCCESS), (302, Result.SUCCESS), (399, Result.SUCCESS), (400, Result.FAILURE), (503, Result.FAILURE)],
)
def test_http_status_ranges(status, result):
    async def main():
        seen: list[bytes] = []
        server, port = await serve(status, seen)
        async with server:
            action = msgspec.convert(
                {
                    "port": "http",
                    "path": "/healthz",
                    "httpHeaders": [{"name": "X-A", "value": "b"}, {"name": "Host", "value": "h"}],
                },
                HTTPGetAction,
            )
            out = await http_probe(action, ProbeTarget("c1", None, {"http": port}), 1.0)
        return out, seen

    out, seen = asyncio.run(main())
    assert out.result == result and not out.error
    if result == Result.FAILURE:
        assert out.message == f"HTTP probe failed with statuscode: {status}"
    head = seen[0].decode()
    assert head.startswith("GET /healthz HTTP/1.1\r\n")
    assert "\r\nHost: h\r\n" in head and "\r\nX-A: b\r\n" in head and "User-Agent: kube-probe/" in head


def test_http_connection_refused_is_a_failure_with_gos_text():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return port, await http_probe(HTTPGetAction(port=port, path="/"), HOST, 1.0)

    port, out = asyncio.run(main())
    assert out.result == Result.FAILURE
    assert out.message == f'Get "http://127.0.0.1:{port}/": dial tcp 127.0.0.1:{port}: connect: connection refused'


def test_unknown_named_port_is_an_error_not_a_failure():
    out = asyncio.run(http_probe(HTTPGetAction(port="nope"), HOST, 1.0))
    assert out.error and "couldn't find port: nope" in out.message
    out = asyncio.run(tcp_probe(TCPSocketAction(port=70000), HOST, 1.0))
    assert out.error and "invalid port" in out.message


def test_request_rejects_header_injection():
    with pytest.raises(Exception, match="invalid header"):
        build_request(
            msgspec.convert({"port": 1, "httpHeaders": [{"name": "A", "value": "x\r\nB: y"}]}, HTTPGetAction),
            "127.0.0.1",
            1,
        )


def test_tcp_probe_success_and_refused():
    async def main():
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            ok = await tcp_probe(TCPSocketAction(port=port), HOST, 1.0)
        refused = await tcp_probe(TCPSocketAction(port=port), HOST, 1.0)
        return port, ok, refused

    port, ok, refused = asyncio.run(main())
    assert ok.result == Result.SUCCESS
    assert refused.result == Result.FAILURE
    assert refused.message == f"dial tcp 127.0.0.1:{port}: connect: connection refused"


class ScriptedExec:
    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.calls: list[tuple] = []

    async def exec_sync(self, cid, argv, timeout):
        self.calls.append((cid, tuple(argv), timeout))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.mark.parametrize(
    "answer, result, message, error",
    [
        (Completed(("x",), 0, b"fine", b""), Result.SUCCESS, "fine", False),
        (Completed(("x",), 1, b"out ", b"err"), Result.FAILURE, "out err", False),
        (ExecTimeout(("runc",), 1.0), Result.FAILURE, 'command "cat /x" timed out', False),
        (ExecError(("runc",), None, message="cannot start"), Result.UNKNOWN, None, True),
    ],
)
def test_exec_probe(answer, result, message, error):
    runtime = ScriptedExec(answer)
    out = asyncio.run(exec_probe(runtime, HOST, ["cat", "/x"], 1.0))
    assert (out.result, out.error) == (result, error)
    if message is not None:
        assert out.message == message
    assert runtime.calls == [("c1", ("cat", "/x"), 1.0)]


# ---------------------------------------------------------------- manager


class StepClock(FakeClock):
    """A FakeClock whose sleep also yields to the loop several times, so workers take turns."""

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        for _ in range(5):
            await asyncio.sleep(0)


def make_pod(probes: dict):
    from edgelet.api.static import make_static_pod
    from edgelet.api.types import Pod

    raw = msgspec.convert(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app", "image": "i", **probes}]},
        },
        Pod,
    )
    return make_static_pod(raw, node_name="node", source="file", origin="/m/p.yaml")


def runtime_status(pod, cid="c1", started_at=0.0):
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord

    uid = pod.metadata.uid
    sb = SandboxRecord(
        id="sb",
        pod_uid=uid,
        pod_name="p",
        pod_namespace="default",
        attempt=0,
        state="running",
        pid=None,
        created_at=0.0,
        host_network=True,
    )
    rec = ContainerRecord(
        id=cid,
        pod_uid=uid,
        pod_name="p",
        pod_namespace="default",
        name="app",
        attempt=0,
        spec_hash="",
        sandbox_id="sb",
        state="running",
        pid=1,
        created_at=started_at,
        started_at=started_at,
    )
    return PodRuntimeStatus(uid=uid, sandboxes=(sb,), containers=(rec,))


def test_manager_liveness_failure_reports_failure_event_and_resync():
    from edgelet.probes.manager import ProbeManager
    from edgelet.status.syncstate import PodSyncState

    clock = StepClock()
    events = EventRecorder(clock)
    script = {"liveness": [Result.SUCCESS, Result.FAILURE, Result.FAILURE], "readiness": [Result.SUCCESS] * 50}
    calls: list[str] = []

    async def runner(probe, target, runtime):
        kind = "liveness" if probe.exec is not None else "readiness"
        calls.append(kind)
        seq = script[kind]
        r = seq.pop(0) if seq else Result.FAILURE
        return Outcome(r, "boom" if r == Result.FAILURE else "")

    pod = make_pod(
        {
            "livenessProbe": {
                "exec": {"command": ["x"]},
                "periodSeconds": 1,
                "failureThreshold": 2,
                "terminationGracePeriodSeconds": 7,
            },
            "readinessProbe": {"tcpSocket": {"port": 1}, "periodSeconds": 1},
        }
    )
    st = PodSyncState()
    changed: list[str] = []
    mgr = ProbeManager(object(), clock, events, state_of=lambda uid: st, on_change=changed.append, runner=runner)

    async def main():
        mgr.sync_pod(pod, runtime_status(pod, started_at=clock.now()))
        assert st.ready == {"app": False}  # readiness starts as Failure
        for _ in range(20):
            await clock.sleep(0.5)
        failures = mgr.failures(pod.metadata.uid)
        grace = mgr.kill_grace(pod.metadata.uid, "c1")
        # The container was restarted: fresh workers and results for the new id.
        mgr.sync_pod(pod, runtime_status(pod, cid="c2", started_at=clock.now()))
        fresh = (dict(st.ready), mgr.failures(pod.metadata.uid))
        mgr.remove_pod(pod.metadata.uid)
        await asyncio.sleep(0)
        return failures, grace, fresh

    failures, grace, fresh = asyncio.run(main())
    assert failures == {"c1": "liveness"}
    assert grace == 7.0
    assert fresh == ({"app": False}, {})
    assert calls.count("liveness") == 3  # held after the published failure
    assert changed and set(changed) == {pod.metadata.uid}
    msgs = [(e.reason, e.message) for e in events.events()]
    assert ("Unhealthy", "Liveness probe failed: boom") in msgs
    assert [e.count for e in events.events() if e.message == "Liveness probe failed: boom"] == [2]


# ---------------------------------------------------------------- redirects (kubelet RedirectChecker(false))

from edgelet.probes.probers import HttpRequest, HttpResponse, TooManyRedirects, next_request  # noqa: E402

FIRST = HttpRequest("http", "127.0.0.1", 8080, "/healthz", (("Host", "h"), ("X-A", "b")))


def moved(location: str | None, status: int = 302) -> HttpResponse:
    return HttpResponse(status, b"", location)


@pytest.mark.parametrize(
    ("response", "followed", "expected"),
    [
        (moved("/other?x=1"), 0, HttpRequest("http", "127.0.0.1", 8080, "/other?x=1", (("Host", "h"), ("X-A", "b")))),
        (moved("other"), 0, HttpRequest("http", "127.0.0.1", 8080, "/other", (("Host", "h"), ("X-A", "b")))),
        # An absolute Location to the same host: another port or scheme is fine; the probe's Host header stays behind.
        (moved("http://127.0.0.1:9090/x"), 0, HttpRequest("http", "127.0.0.1", 9090, "/x", (("X-A", "b"),))),
        (moved("https://127.0.0.1/x", 301), 3, HttpRequest("https", "127.0.0.1", 443, "/x", (("X-A", "b"),))),
        (moved("/x", 307), 9, HttpRequest("http", "127.0.0.1", 8080, "/x", (("Host", "h"), ("X-A", "b")))),
        (moved("/x", 308), 0, HttpRequest("http", "127.0.0.1", 8080, "/x", (("Host", "h"), ("X-A", "b")))),
        (moved("http://localhost:8080/x"), 0, None),  # another host: not followed, the 3xx is judged
        (moved("ftp://127.0.0.1/x"), 0, None),
        (moved(None), 0, None),  # no Location
        (moved("/x", 300), 0, None),  # Go follows only 301, 302, 303, 307, 308
        (moved("/x", 304), 0, None),
        (HttpResponse(200, b"ok"), 0, None),
    ],
)
def test_next_request(response, followed, expected):
    assert next_request(FIRST, FIRST, response, followed) == expected


def test_the_eleventh_redirect_is_an_error():
    current = HttpRequest("http", "127.0.0.1", 8080, "/loop")
    with pytest.raises(TooManyRedirects) as err:
        next_request(FIRST, current, moved("/loop"), 10)
    assert (err.value.url, str(err.value)) == ("http://127.0.0.1:8080/loop", "stopped after 10 redirects")


async def serve_routes(routes: dict[str, tuple[int, str | None, bytes]], seen: list[str]):
    """A loopback server answering path -> (status, Location, body); it logs the request lines it got."""

    async def handle(reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split(" ", 2)[1]
        seen.append(head)
        status, location, body = routes.get(path, (404, None, b"nope"))
        extra = f"Location: {location}\r\n" if location else ""
        writer.write(
            f"HTTP/1.1 {status} X\r\n{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def probe_routes(routes, path="/start"):
    async def main():
        seen: list[str] = []
        server, port = await serve_routes(routes, seen)
        async with server:
            action = msgspec.convert(
                {"port": port, "path": path, "httpHeaders": [{"name": "X-A", "value": "b"}]}, HTTPGetAction
            )
            out = await http_probe(action, ProbeTarget("c1", None), 2.0)
        return out, seen, port

    return asyncio.run(main())


def test_http_probe_follows_a_redirect_to_the_same_host():
    out, seen, _ = probe_routes(
        {"/start": (302, "/next", b""), "/next": (301, "/ok", b""), "/ok": (200, None, b"fine")}
    )
    assert (out.result, out.message, out.warning) == (Result.SUCCESS, "fine", False)
    assert [h.split(" ", 2)[1] for h in seen] == ["/start", "/next", "/ok"]
    assert all("\r\nX-A: b\r\n" in h for h in seen)


def test_http_probe_judges_the_end_of_the_chain():
    out, _, _ = probe_routes({"/start": (302, "/gone", b"")})
    assert (out.result, out.message) == (Result.FAILURE, "HTTP probe failed with statuscode: 404")


def test_http_probe_redirect_to_another_host_is_a_success_with_a_warning():
    out, seen, _ = probe_routes({"/start": (302, "http://localhost:1/elsewhere", b"moved")})
    assert (out.result, out.warning, out.error) == (Result.SUCCESS, True, False)
    assert out.message == "Probe terminated redirects, Response body: moved"
    assert len(seen) == 1


def test_http_probe_stops_after_ten_redirects():
    out, seen, port = probe_routes({"/start": (302, "/start", b"")})
    assert out.result == Result.FAILURE and not out.error
    assert out.message == f'Get "http://127.0.0.1:{port}/start": stopped after 10 redirects'
    assert len(seen) == 11


# ---------------------------------------------------------------- manager: retries, warnings, initial jitter

from edgelet.probes.machine import initial_jitter  # noqa: E402


@pytest.mark.parametrize(
    ("period", "uptime", "adopted", "expected"),
    [
        (10, 0.0, True, 2.5),  # adopted right after the agent started: a random part of the period
        (10, 9.9, True, 2.5),
        (10, 10.0, True, 0.0),  # the agent has been up a whole period: no burst to spread
        (10, 0.0, False, 0.0),  # a container started by this agent: probed on its own schedule
        (1, 3.0, True, 0.0),
    ],
)
def test_initial_jitter(period, uptime, adopted, expected):
    assert initial_jitter(period, agent_uptime=uptime, adopted=adopted, rand=lambda: 0.25) == expected


class TimerClock(FakeClock):
    """A FakeClock whose sleepers wake only when the test moves time on (`run_until`), in deadline order."""

    def __init__(self) -> None:
        super().__init__()
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._seq = 0

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._seq += 1
        self._sleepers.append((self.monotonic() + max(0.0, seconds), self._seq, fut))
        await fut

    async def run_until(self, seconds: float) -> None:
        end = self.monotonic() + seconds
        while True:
            for _ in range(10):
                await asyncio.sleep(0)
            due = sorted(s for s in self._sleepers if s[0] <= end)
            if not due:
                break
            when, _, fut = due[0]
            self._sleepers.remove(due[0])
            self.advance(when - self.monotonic())
            fut.set_result(None)
        self.advance(end - self.monotonic())


def run_manager(
    probes: dict, outcomes: list[Outcome], *, started_at_offset: float = 0.0, ticks: int = 4, rand=lambda: 0.5
):
    """A ProbeManager over a scripted runner for `ticks` seconds; returns when each probe ran, events, verdicts."""
    from edgelet.probes.manager import ProbeManager
    from edgelet.status.syncstate import PodSyncState

    clock = TimerClock()
    events = EventRecorder(clock)
    t0 = clock.now()
    ran: list[float] = []

    async def runner(probe, target, runtime):
        ran.append(clock.now() - t0)
        return outcomes.pop(0) if outcomes else Outcome(Result.SUCCESS)

    pod = make_pod(probes)
    st = PodSyncState()
    mgr = ProbeManager(object(), clock, events, state_of=lambda uid: st, runner=runner, rand=rand)

    async def main():
        mgr.sync_pod(pod, runtime_status(pod, started_at=t0 + started_at_offset))
        await clock.run_until(ticks)
        verdicts = dict(st.ready)
        mgr.remove_pod(pod.metadata.uid)
        await asyncio.sleep(0)
        return verdicts

    verdicts = asyncio.run(main())
    return ran, [(e.reason, e.message, e.count) for e in events.events()], verdicts


READINESS = {"readinessProbe": {"exec": {"command": ["x"]}, "periodSeconds": 10}}


def test_an_errored_probe_is_tried_three_times_in_one_period():
    err = Outcome(Result.UNKNOWN, "runc: container not running", error=True)
    ran, events, st = run_manager(READINESS, [err, err, Outcome(Result.SUCCESS)], ticks=2)
    assert ran == [0.0, 0.0, 0.0]  # one period: the third try succeeded
    assert st == {"app": True}
    assert not [e for e in events if e[0] == "Unhealthy"]


def test_a_probe_that_keeps_erroring_reports_once_per_period():
    err = Outcome(Result.UNKNOWN, "runc: container not running", error=True)
    ran, events, _ = run_manager(READINESS, [err] * 6, ticks=12)
    assert ran == [0.0, 0.0, 0.0, 10.0, 10.0, 10.0]
    assert events == [
        ("Unhealthy", "Readiness probe errored and resulted in unknown state: runc: container not running", 2)
    ]


def test_a_failure_is_not_retried():
    ran, events, _ = run_manager(READINESS, [Outcome(Result.FAILURE, "no")], ticks=2)
    assert ran == [0.0]
    assert events == [("Unhealthy", "Readiness probe failed: no", 1)]


def test_a_probe_warning_is_a_success_and_an_event():
    warn = Outcome(Result.SUCCESS, "Probe terminated redirects, Response body: moved", warning=True)
    probes = {"readinessProbe": {"httpGet": {"port": 80}, "periodSeconds": 1}}
    _, events, ready = run_manager(probes, [warn], ticks=0)
    assert ready == {"app": True}
    assert events == [("ProbeWarning", "Readiness probe warning: Probe terminated redirects, Response body: moved", 1)]


def test_an_adopted_container_is_first_probed_after_a_random_part_of_the_period():
    ran, _, _ = run_manager(READINESS, [], started_at_offset=-100.0, ticks=25, rand=lambda: 0.3)
    assert ran == [3.0, 13.0, 23.0]


def test_a_new_container_is_probed_at_once():
    ran, _, _ = run_manager(READINESS, [], ticks=25, rand=lambda: 0.3)
    assert ran == [0.0, 10.0, 20.0]
