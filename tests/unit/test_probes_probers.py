"""Probers against real loopback servers (host namespace), exec through a scripted runtime, and the probe manager."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from edgelet.api.types import HTTPGetAction, Probe, TCPSocketAction
from edgelet.events import EventRecorder
from edgelet.probes.machine import Result
from edgelet.probes.probers import Outcome, ProbeTarget, build_request, exec_probe, http_probe, tcp_probe
from edgelet.runtime._exec import Completed
from edgelet.runtime.errors import ExecError, ExecTimeout
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


@pytest.mark.parametrize("status, result", [(200, Result.SUCCESS), (302, Result.SUCCESS), (399, Result.SUCCESS),
                                            (400, Result.FAILURE), (503, Result.FAILURE)])
def test_http_status_ranges(status, result):
    async def main():
        seen: list[bytes] = []
        server, port = await serve(status, seen)
        async with server:
            action = msgspec.convert({"port": "http", "path": "/healthz",
                                      "httpHeaders": [{"name": "X-A", "value": "b"}, {"name": "Host", "value": "h"}]},
                                     HTTPGetAction)
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
        build_request(msgspec.convert({"port": 1, "httpHeaders": [{"name": "A", "value": "x\r\nB: y"}]},
                                      HTTPGetAction), "127.0.0.1", 1)


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


@pytest.mark.parametrize("answer, result, message, error", [
    (Completed(("x",), 0, b"fine", b""), Result.SUCCESS, "fine", False),
    (Completed(("x",), 1, b"out ", b"err"), Result.FAILURE, "out err", False),
    (ExecTimeout(("runc",), 1.0), Result.FAILURE, 'command "cat /x" timed out', False),
    (ExecError(("runc",), None, message="cannot start"), Result.UNKNOWN, None, True),
])
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

    raw = msgspec.convert({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                           "spec": {"containers": [{"name": "app", "image": "i", **probes}]}}, Pod)
    return make_static_pod(raw, node_name="node", source="file", origin="/m/p.yaml")


def runtime_status(pod, cid="c1", started_at=0.0):
    from edgelet.runtime.types import ContainerRecord, PodRuntimeStatus, SandboxRecord

    uid = pod.metadata.uid
    sb = SandboxRecord(id="sb", pod_uid=uid, pod_name="p", pod_namespace="default", attempt=0, state="running",
                       pid=None, created_at=0.0, host_network=True)
    rec = ContainerRecord(id=cid, pod_uid=uid, pod_name="p", pod_namespace="default", name="app", attempt=0,
                          spec_hash="", sandbox_id="sb", state="running", pid=1, created_at=started_at,
                          started_at=started_at)
    return PodRuntimeStatus(uid=uid, sandboxes=(sb,), containers=(rec,))


def test_manager_liveness_failure_reports_failure_event_and_resync():
    from edgelet.probes.manager import ProbeManager
    from edgelet.sync.syncpod import PodSyncState

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

    pod = make_pod({"livenessProbe": {"exec": {"command": ["x"]}, "periodSeconds": 1, "failureThreshold": 2,
                                      "terminationGracePeriodSeconds": 7},
                    "readinessProbe": {"tcpSocket": {"port": 1}, "periodSeconds": 1}})
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
