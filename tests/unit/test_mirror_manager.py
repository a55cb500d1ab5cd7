"""The mirror manager over a fake apiserver (httpx.MockTransport, the lowest boundary) and a fake clock.

The real behaviour against kube-apiserver is in tests/e2e/test_mirror.py; these check what is hard to
provoke there: a wall clock that jumps, and the cadence of renewals.
"""

from __future__ import annotations

import asyncio
import json

import httpx

from edgelet.events import EventRecorder
from edgelet.mirror.client import KubeClient
from edgelet.mirror.kubeconfig import ClientConfig
from edgelet.mirror.manager import MirrorManager
from edgelet.mirror.node import NodeFacts
from edgelet.util.clock import FakeClock


class JumpyClock(FakeClock):
    """Wall time can be set anywhere (a device without an RTC); monotonic time only moves forward."""

    def set_wall(self, wall: float) -> None:
        self._wall = wall


class FakeApi:
    def __init__(self) -> None:
        self.lease: dict | None = None
        self.renewals: list[tuple[float, str]] = []  # (monotonic at the PUT, renewTime sent)
        self.clock: JumpyClock | None = None
        self.rv = 0

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        if path == "/api/v1/nodes/n1" and method == "GET":
            return httpx.Response(200, json={"metadata": {"name": "n1", "uid": "node-uid"}})
        if path == "/api/v1/pods" and request.url.params.get("watch"):
            await asyncio.sleep(3600)
        if path == "/api/v1/pods":
            return httpx.Response(200, json={"items": [], "metadata": {"resourceVersion": "1"}})
        if path.endswith("/leases/n1") and method == "GET":
            return httpx.Response(404, json={"reason": "NotFound", "message": "not found"})
        if "/leases" in path and method in ("POST", "PUT"):
            body = json.loads(request.content)
            self.rv += 1
            body["metadata"]["resourceVersion"] = str(self.rv)
            assert self.clock is not None
            self.renewals.append((self.clock.monotonic(), body["spec"]["renewTime"]))
            self.lease = body
            return httpx.Response(201 if method == "POST" else 200, json=body)
        return httpx.Response(200, json={})


class NoPods:
    def entries(self) -> list:
        return []


def _manager(api: FakeApi, clock: JumpyClock) -> MirrorManager:
    """A manager renewing its lease every 10 s against `api`, everything else rare."""
    api.clock = clock
    client = KubeClient(ClientConfig(server="https://api"), version="t", transport=httpx.MockTransport(api.handle))
    return MirrorManager(
        client,
        node="n1",
        server="https://api",
        facts=lambda: NodeFacts(name="n1"),
        publisher=NoPods(),
        events=EventRecorder(clock),
        clock=clock,  # type: ignore[arg-type]
        is_ready=lambda: (True, "ok"),
        lease_renew_interval=10.0,
        status_frequency=3600,
        report_frequency=3600,
        batch_interval=0.001,
    )


def test_lease_cadence_follows_the_monotonic_clock_through_a_wall_clock_jump():
    async def scenario() -> tuple[FakeApi, JumpyClock]:
        clock = JumpyClock(start=1_800_000_000.0)
        api = FakeApi()
        mgr = _manager(api, clock)
        task = asyncio.create_task(mgr.run())
        while len(api.renewals) < 5:
            await asyncio.sleep(0.001)
        clock.set_wall(1_000_000_000.0)  # back to 2001: what a Pi believes before NTP
        while len(api.renewals) < 10:
            await asyncio.sleep(0.001)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return api, clock

    api, _ = asyncio.run(scenario())
    gaps = [b[0] - a[0] for a, b in zip(api.renewals, api.renewals[1:])]
    # Every renewal one interval after the last (the other tasks move the shared fake clock a little too).
    assert all(10.0 <= g < 11.0 for g in gaps), gaps
    assert api.renewals[4][1].startswith("2027") and api.renewals[-1][1].startswith("2001")


class ConflictingApi(FakeApi):
    """Someone else (a second agent by mistake, an admin's edit) bumps the Lease between our renewals."""

    def __init__(self) -> None:
        super().__init__()
        self.puts: list[str] = []  # the resourceVersion each PUT carried
        self.gets = 0

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        if path.endswith("/leases/n1") and method == "GET":
            self.gets += 1
            if self.lease is None:
                return httpx.Response(404, json={"reason": "NotFound", "message": "not found"})
            return httpx.Response(200, json=self.lease)
        if path.endswith("/leases/n1") and method == "PUT":
            body = json.loads(request.content)
            self.puts.append(body["metadata"].get("resourceVersion", ""))
            if len(self.puts) == 1:  # the other writer got there first
                assert self.lease is not None
                self.rv += 1
                self.lease["metadata"]["resourceVersion"] = str(self.rv)
                return httpx.Response(409, json={"reason": "Conflict", "message": "the object has been modified"})
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                return httpx.Response(409, json={"reason": "Conflict", "message": "stale"})
        return await super().handle(request)


def test_a_lease_conflict_is_resolved_by_reading_it_again():
    async def scenario() -> ConflictingApi:
        clock = JumpyClock(start=1_800_000_000.0)
        api = ConflictingApi()
        mgr = _manager(api, clock)
        task = asyncio.create_task(mgr.run())
        while len(api.puts) < 3:
            await asyncio.sleep(0.001)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return api

    api = asyncio.run(scenario())
    # Created (rv 1), the first PUT loses to the other writer (rv 2), the lease is read again and the
    # renewal goes through on rv 2; no renewal is lost to the conflict.
    assert api.puts[:2] == ["1", "2"]
    assert api.gets >= 2
