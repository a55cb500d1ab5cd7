"""Lifecycle hooks and probe kills in the syncer, over FakeRuntime with a scripted `exec_sync`."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from edgelet.api.static import make_static_pod
from edgelet.api.types import Pod
from edgelet.container.types import Completed
from edgelet.events import EventRecorder
from edgelet.sync.syncpod import Syncer
from edgelet.testing.fakes import FakeImageStore, FakeRuntime
from edgelet.util.backoff import Backoff
from edgelet.util.clock import FakeClock

IMAGE = "edgelet.local/busybox:1.36"


class ExecRuntime(FakeRuntime):
    def __init__(self, clock, exit_codes=()) -> None:
        super().__init__(clock)
        self.exit_codes = list(exit_codes)
        self.execs: list[tuple] = []

    async def exec_sync(self, cid, argv, timeout):
        self.execs.append((cid, tuple(argv)))
        code = self.exit_codes.pop(0) if self.exit_codes else 0
        return Completed(tuple(argv), code, b"out", b"")


def make_pod(lifecycle: dict, grace: int = 30, **container) -> Pod:
    spec = {
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "app", "image": IMAGE, "lifecycle": lifecycle, **container}],
    }
    raw = msgspec.convert({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "h"}, "spec": spec}, Pod)
    return make_static_pod(raw, node_name="node", source="file", origin="/m/h.yaml")


def harness(exit_codes=()):
    clock = FakeClock()
    rt = ExecRuntime(clock, exit_codes)
    events = EventRecorder(clock)
    syncer = Syncer(rt, FakeImageStore(), Backoff(), clock, publish=lambda *a: None, events=events)
    return clock, rt, events, syncer


def test_post_start_success_runs_after_start():
    clock, rt, events, syncer = harness([0])
    pod = make_pod({"postStart": {"exec": {"command": ["touch", "/x"]}}})
    asyncio.run(syncer.sync_pod(pod))
    (c,) = rt.running()
    assert rt.execs == [(c.id, ("touch", "/x"))]
    assert not [e for e in events.events() if e.reason == "FailedPostStartHook"]


def test_failing_post_start_kills_the_container():
    clock, rt, events, syncer = harness([3])
    pod = make_pod({"postStart": {"exec": {"command": ["sh", "-c", "exit 3"]}}})
    asyncio.run(syncer.sync_pod(pod))
    assert not rt.running()
    assert [c for c in rt.calls if c[0] == "stop_container"]
    by_reason = {e.reason: e.message for e in events.events()}
    assert by_reason["FailedPostStartHook"].startswith(
        'Exec lifecycle hook ([sh -c exit 3]) for Container "app" in Pod "h-node_default('
    )
    assert "exited with 3" in by_reason["FailedPostStartHook"]
    assert by_reason["Killing"] == "FailedPostStartHook"
    assert syncer.state(pod.metadata.uid).waiting["app"][0] == "PostStartHookError"


@pytest.mark.parametrize(("hook_seconds", "grace", "left"), [(5, 30, 25), (1, 3, 2)])
def test_pre_stop_time_comes_out_of_the_grace_period(hook_seconds: int, grace: int, left: int):
    clock, rt, events, syncer = harness()
    pod = make_pod({"preStop": {"sleep": {"seconds": hook_seconds}}}, grace=grace)
    asyncio.run(syncer.sync_pod(pod))
    asyncio.run(syncer.terminate_pod(pod.metadata.uid, pod))
    stops = [c for c in rt.calls if c[0] == "stop_container"]
    # kubelet: grace - time spent in preStop, so the whole stop takes the grace period, not grace + hook.
    assert stops and stops[0][2] == left


def test_pre_stop_exec_failure_is_an_event_and_the_stop_goes_on():
    clock, rt, events, syncer = harness([0, 1])
    pod = make_pod({"preStop": {"exec": {"command": ["false"]}}}, grace=10)
    asyncio.run(syncer.sync_pod(pod))
    rt.exit_codes = [1]
    asyncio.run(syncer.terminate_pod(pod.metadata.uid, pod))
    assert any(e.reason == "FailedPreStopHook" for e in events.events())
    assert [c for c in rt.calls if c[0] == "stop_container"][0][2] == 10


def test_liveness_failure_kills_with_the_probes_grace_and_kubelets_message():
    from edgelet.probes.machine import Result
    from edgelet.probes.manager import ProbeManager

    clock, rt, events, syncer = harness()
    pod = make_pod(
        {}, livenessProbe={"exec": {"command": ["x"]}, "failureThreshold": 1, "terminationGracePeriodSeconds": 3}
    )
    probes = ProbeManager(rt, clock, events, state_of=syncer.state)
    syncer._probes = probes

    async def main():
        await syncer.sync_pod(pod)
        (c,) = rt.running()
        worker = probes._workers[(pod.metadata.uid, "app", "liveness")]
        worker.machine.record(Result.FAILURE)  # as the worker would after a failed run
        await syncer.sync_pod(pod)
        probes.remove_pod(pod.metadata.uid)
        return c

    old = asyncio.run(main())
    stop = [c for c in rt.calls if c[0] == "stop_container"][0]
    assert stop[1:3] == (old.id, 3.0)
    assert ("Killing", "Container app failed liveness probe, will be restarted") in [
        (e.reason, e.message) for e in events.events()
    ]
    (new,) = rt.running()
    assert new.attempt == 1
