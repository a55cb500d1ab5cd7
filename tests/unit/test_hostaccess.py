"""Host access a static pod is granted, and the warning event edgelet emits once per pod about it."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from edgelet.api.hostaccess import describe_host_access, is_host_root
from edgelet.api.static import make_static_pod
from edgelet.api.types import Pod
from edgelet.events import EventRecorder
from edgelet.runtime.subpath import SubPathError
from edgelet.sync.syncpod import Syncer
from edgelet.testing.fakes import FakeImageStore, FakeRuntime
from edgelet.util.backoff import Backoff
from edgelet.util.clock import FakeClock

IMAGE = "edgelet.local/busybox:1.36"


def _pod(**spec) -> Pod:
    containers = spec.pop("containers", [{"name": "c", "image": IMAGE}])
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "uid": "u1"},
        "spec": {"containers": containers, **spec},
    }
    return make_static_pod(msgspec.convert(raw, Pod), node_name="node", source="file", origin="/m/p.yaml")


def _root_volume(path: str = "/") -> list[dict]:
    return [{"name": "root", "hostPath": {"path": path}}]


@pytest.mark.parametrize(
    "path, expected",
    [("/", True), ("//", True), ("/.", True), ("/..", True), ("/etc", False), ("", False), ("relative", False)],
)
def test_is_host_root(path: str, expected: bool) -> None:
    assert is_host_root(path) is expected


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({}, []),
        ({"hostNetwork": True}, ["hostNetwork"]),
        ({"hostPID": True, "hostIPC": True}, ["hostPID", "hostIPC"]),
        (
            {
                "volumes": _root_volume(),
                "containers": [{"name": "c", "image": IMAGE, "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
            },
            ["hostPath / read-write (volume 'root' in container 'c')"],
        ),
        (
            {
                "volumes": _root_volume("//"),
                "containers": [
                    {
                        "name": "c",
                        "image": IMAGE,
                        "volumeMounts": [{"name": "root", "mountPath": "/host", "readOnly": True}],
                    }
                ],
            },
            [],
        ),  # read-only: no warning
        (
            {
                "volumes": _root_volume("/etc"),
                "containers": [{"name": "c", "image": IMAGE, "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
            },
            [],
        ),
    ],
)
def test_describe_host_access(spec: dict, expected: list[str]) -> None:
    found = describe_host_access(_pod(**spec))
    assert len(found) == len(expected)
    for got, want in zip(found, expected):
        assert got.startswith(want)


def _harness():
    clock = FakeClock()
    rt = FakeRuntime(clock)
    events = EventRecorder(clock)
    syncer = Syncer(rt, FakeImageStore(), Backoff(), clock, publish=lambda *a: None, events=events)
    return rt, syncer, events


def test_host_access_warning_is_emitted_once_per_pod() -> None:
    rt, syncer, events = _harness()
    pod = _pod(hostNetwork=True, hostPID=True)
    for _ in range(3):
        asyncio.run(syncer.sync_pod(pod))
    (event,) = [e for e in events.events() if e.reason == "HostAccess"]
    assert event.type == "Warning" and event.count == 1 and event.object.uid == pod.metadata.uid
    assert "hostNetwork" in event.message and "hostPID" in event.message
    confined = _pod()
    confined.metadata.uid = "u2"
    asyncio.run(syncer.sync_pod(confined))
    assert not [e for e in events.events("u2") if e.reason == "HostAccess"]


def test_volume_errors_are_create_container_config_errors() -> None:
    rt, syncer, events = _harness()
    published = {}
    syncer._publish = lambda pod, r, st: published.__setitem__(pod.metadata.uid, dict(st.waiting))

    async def refuse(pod, container, *a, **kw):
        raise SubPathError("default/p-node", container.name, "v", "d", "resolves outside the volume")

    rt.create_container = refuse
    pod = _pod()
    asyncio.run(syncer.sync_pod(pod))
    reason, message = published[pod.metadata.uid]["c"]
    assert reason == "CreateContainerConfigError"
    assert "volumeMount 'v' subPath 'd'" in message and "container 'c'" in message
