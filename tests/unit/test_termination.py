"""Termination ordering and stop signals (kubelet kuberuntime_termination_order_test), pure and over FakeRuntime."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from edgelet.api.static import make_static_pod
from edgelet.api.types import Container, Lifecycle, Pod
from edgelet.container.types import ContainerRecord
from edgelet.plan.termination import remaining_grace, stop_signal, termination_order
from edgelet.sync.syncpod import Syncer
from edgelet.testing.fakes import FakeImageStore, FakeRuntime
from edgelet.util.backoff import Backoff
from edgelet.util.clock import FakeClock

IMAGE = "edgelet.local/busybox:1.36"


def make_pod(spec: dict, name: str = "p") -> Pod:
    raw = msgspec.convert({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}, Pod)
    return make_static_pod(raw, node_name="node", source="file", origin=f"/m/{name}.yaml")


def rec(name: str, ctype: str = "regular") -> ContainerRecord:
    return ContainerRecord(
        id=f"id-{name}",
        pod_uid="u",
        pod_name="p",
        pod_namespace="d",
        name=name,
        attempt=0,
        spec_hash="h",
        sandbox_id="sb",
        state="running",
        pid=1,
        created_at=1.0,
        container_type=ctype,
    )  # type: ignore[arg-type]


SIDECARS_POD = make_pod(
    {
        "initContainers": [
            {"name": "side1", "image": IMAGE, "restartPolicy": "Always"},
            {"name": "init", "image": IMAGE},
            {"name": "side2", "image": IMAGE, "restartPolicy": "Always"},
        ],
        "containers": [{"name": "main1", "image": IMAGE}, {"name": "main2", "image": IMAGE}],
    }
)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        # kubelet TestTerminationOrderingSidecarStopAfterMain / ...SidecarsInReverseOrder
        (
            ("main1", "main2", "side1", "side2"),
            {
                "id-main1": (),
                "id-main2": (),
                "id-side2": ("id-main1", "id-main2"),
                "id-side1": ("id-main1", "id-main2", "id-side2"),
            },
        ),
        # Only what is being stopped is waited for.
        (("side1", "side2"), {"id-side1": ("id-side2",), "id-side2": ()}),
        # A plain init container is stopped at once, like a main container.
        (("init", "main1"), {"id-init": (), "id-main1": ()}),
        # A container gone from the spec is no sidecar any more.
        (("stale",), {"id-stale": ()}),
    ],
)
def test_termination_order(names: tuple[str, ...], expected: dict) -> None:
    assert termination_order(SIDECARS_POD, [rec(n) for n in names]) == expected


def test_termination_order_without_the_pod_waits_for_nothing() -> None:
    assert termination_order(None, [rec("side1"), rec("main1")]) == {"id-side1": (), "id-main1": ()}


@pytest.mark.parametrize(
    ("container", "image_signal", "expected"),
    [
        (None, "", "SIGTERM"),
        (Container(name="c"), "", "SIGTERM"),
        (Container(name="c"), "SIGQUIT", "SIGQUIT"),
        (Container(name="c", lifecycle=Lifecycle(stop_signal="SIGUSR1")), "SIGQUIT", "SIGUSR1"),
        (Container(name="c", lifecycle=Lifecycle()), "SIGINT", "SIGINT"),
    ],
)
def test_stop_signal(container: Container | None, image_signal: str, expected: str) -> None:
    assert stop_signal(container, image_signal) == expected


@pytest.mark.parametrize(("grace", "waited", "left"), [(30, 0.4, 30), (30, 12.9, 18), (3, 5, -2), (0, 1, 0)])
def test_remaining_grace(grace: float, waited: float, left: float) -> None:
    assert remaining_grace(grace, waited) == left


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.rt = FakeRuntime(self.clock)
        self.syncer = Syncer(self.rt, FakeImageStore(), Backoff(), self.clock, publish=lambda pod, rt, st: None)
        self.names: dict[str, str] = {}

    def sync(self, pod: Pod) -> None:
        asyncio.run(self.syncer.sync_pod(pod))

    def stops(self) -> list[tuple[str, float, str]]:
        self.names.update({c.id: c.name for c in self.rt.containers.values()})
        return [(self.names.get(c[1], c[1]), c[2], c[3]) for c in self.rt.calls if c[0] == "stop_container"]


def _start_all(h: Harness, pod: Pod) -> None:
    for _ in range(6):  # side1, init (exits), side2, then the main containers
        h.sync(pod)
        for c in list(h.rt.containers.values()):
            if c.name == "init" and c.state == "running":
                h.rt.exit(c.id, 0)
    assert {c.name for c in h.rt.containers.values() if c.state == "running"} == {"side1", "side2", "main1", "main2"}


def test_terminate_pod_stops_sidecars_after_main_containers_in_reverse_order_then_the_sandbox() -> None:
    h = Harness()
    spec = msgspec.to_builtins(SIDECARS_POD.spec)
    spec["terminationGracePeriodSeconds"] = 20
    spec["containers"][1]["lifecycle"] = {"stopSignal": "SIGINT"}
    pod = make_pod(spec)
    _start_all(h, pod)
    h.stops()  # remember the names before the pod's records go
    asyncio.run(h.syncer.terminate_pod(pod.metadata.uid, pod))
    stops = h.stops()
    assert [s[0] for s in stops][2:] == ["side2", "side1"]
    assert {s[0] for s in stops[:2]} == {"main1", "main2"}
    assert dict((s[0], s[2]) for s in stops) == {
        "main1": "SIGTERM",
        "main2": "SIGINT",
        "side1": "SIGTERM",
        "side2": "SIGTERM",
    }
    # The fake clock did not move while waiting: every container gets the whole grace period.
    assert {s[1] for s in stops} == {20.0}
    calls = [c[0] for c in h.rt.calls]
    assert calls.index("stop_sandbox") > max(i for i, c in enumerate(calls) if c == "stop_container")


def test_completed_pod_stops_its_sidecars_in_reverse_order() -> None:
    h = Harness()
    spec = msgspec.to_builtins(SIDECARS_POD.spec)
    spec["restartPolicy"] = "Never"
    pod = make_pod(spec)
    _start_all(h, pod)
    for c in list(h.rt.containers.values()):
        if c.name.startswith("main"):
            h.rt.exit(c.id, 0)
    h.sync(pod)
    assert [s[0] for s in h.stops()] == ["side2", "side1"]
    assert all(s.state == "exited" for s in h.rt.sandboxes.values())


# --- Killing events carry the reason as kubelet's killContainer has it ---


class StubProbes:
    """The probe manager's side the syncer reads: a liveness failure of every running `app`, with a grace."""

    def __init__(self, rt: FakeRuntime, grace: float | None = None) -> None:
        self.rt, self.grace = rt, grace

    def failures(self, uid: str) -> dict[str, str]:
        return {c.id: "liveness" for c in self.rt.running(uid) if c.name == "app"}

    def kill_grace(self, uid: str, cid: str) -> float | None:
        return self.grace

    def sync_pod(self, pod: Pod, rt) -> None:
        pass

    def remove_pod(self, uid: str) -> None:
        pass


def killing(h: Harness) -> list[tuple[str, str]]:
    return [(e.object.field_path, e.message) for e in h.syncer._events.events() if e.reason == "Killing"]


def test_killing_event_for_a_changed_definition_says_it_will_be_restarted() -> None:
    h = Harness()
    pod = make_pod({"terminationGracePeriodSeconds": 5, "containers": [{"name": "app", "image": IMAGE}]})
    h.sync(pod)
    changed = msgspec.structs.replace(
        pod,
        spec=msgspec.structs.replace(
            pod.spec, containers=[msgspec.structs.replace(pod.spec.containers[0], args=["new"])]
        ),
    )
    h.sync(changed)
    assert killing(h) == [("spec.containers{app}", "Container app definition changed, will be restarted")]
    assert [c.attempt for c in h.rt.running()] == [1]


def test_killing_event_for_a_liveness_failure_uses_the_probe_grace() -> None:
    h = Harness()
    pod = make_pod({"terminationGracePeriodSeconds": 30, "containers": [{"name": "app", "image": IMAGE}]})
    h.sync(pod)
    h.syncer._probes = StubProbes(h.rt, grace=2)  # type: ignore[assignment]
    h.sync(pod)
    assert killing(h) == [("spec.containers{app}", "Container app failed liveness probe, will be restarted")]
    assert h.stops() == [("app", 2.0, "SIGTERM")]


def test_killing_event_for_a_liveness_failure_under_never_does_not_promise_a_restart() -> None:
    h = Harness()
    pod = make_pod({"restartPolicy": "Never", "containers": [{"name": "app", "image": IMAGE}]})
    h.sync(pod)
    h.syncer._probes = StubProbes(h.rt)  # type: ignore[assignment]
    h.sync(pod)
    assert killing(h) == [("spec.containers{app}", "Container app failed liveness probe")]


def test_killing_events_for_a_deleted_or_finished_pod_say_stopping() -> None:
    h = Harness()
    pod = make_pod({"containers": [{"name": "app", "image": IMAGE}, {"name": "web", "image": IMAGE}]})
    h.sync(pod)
    asyncio.run(h.syncer.terminate_pod(pod.metadata.uid, pod))
    assert sorted(killing(h)) == [
        ("spec.containers{app}", "Stopping container app"),
        ("spec.containers{web}", "Stopping container web"),
    ]

    # Main containers done for good: kubelet's pod worker stops the sidecars as it stops a deleted pod.
    h = Harness()
    spec = msgspec.to_builtins(SIDECARS_POD.spec)
    spec["restartPolicy"] = "Never"
    pod = make_pod(spec)
    _start_all(h, pod)
    for c in list(h.rt.containers.values()):
        if c.name.startswith("main"):
            h.rt.exit(c.id, 0)
    h.sync(pod)
    assert sorted(killing(h)) == [
        ("spec.initContainers{side1}", "Stopping container side1"),
        ("spec.initContainers{side2}", "Stopping container side2"),
    ]
