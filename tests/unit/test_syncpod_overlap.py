"""Sync prepares each new container while its sandbox is set up (issue 25.2), and nothing prepared outlives a
failure of either half (FakeRuntime; the real runtime's half is in tests/integration/test_runtime_prepare.py)."""

from __future__ import annotations

import asyncio

from edgelet.sync.syncpod import Syncer
from edgelet.testing.fakes import FakeImageStore, FakeRuntime
from edgelet.util.backoff import Backoff
from edgelet.util.clock import FakeClock
from tests.unit.test_syncpod import Harness, make_pod


def test_new_containers_are_prepared_beside_the_sandbox_and_created_from_it() -> None:
    h = Harness()
    pod = make_pod("web", containers=("a", "b"))
    h.sync(pod)
    assert h.rt.prep_calls == [("prepare_container", "a", 0), ("prepare_container", "b", 0)]
    assert [c[0] for c in h.rt.calls] == [
        "create_sandbox",
        "create_container",
        "start_container",
        "create_container",
        "start_container",
    ]
    assert h.rt.prepared == {}  # every prepared one was created
    assert len(h.rt.running(pod.metadata.uid)) == 2


def test_a_failed_sandbox_discards_what_was_prepared() -> None:
    h = Harness()
    h.rt.fail_sandbox = True
    pod = make_pod("web", containers=("a", "b"))
    h.sync(pod)
    assert sorted(h.rt.prep_calls) == sorted(
        [
            ("prepare_container", "a", 0),
            ("prepare_container", "b", 0),
            ("discard_prepared", "a", 0),
            ("discard_prepared", "b", 0),
        ]
    )
    assert h.rt.prepared == {} and h.rt.containers == {}
    rt, waiting = h.published[pod.metadata.uid]
    assert waiting["a"][0] == "ContainerCreating" and "sandbox failed" in waiting["a"][1]
    # The next sync, with the sandbox working, prepares and creates afresh.
    h.rt.fail_sandbox = False
    h.clock.advance(60)
    h.sync(pod)
    assert len(h.rt.running(pod.metadata.uid)) == 2 and h.rt.prepared == {}


def test_a_failed_preparation_leaves_the_container_to_its_own_create() -> None:
    h = Harness()
    h.rt.fail_prepare = {"a"}
    pod = make_pod("web", containers=("a", "b"))
    h.sync(pod)
    # "a" was created the usual way (its create prepares again); "b" from what was prepared.
    assert [c[0] for c in h.rt.calls].count("create_container") == 2
    assert len(h.rt.running(pod.metadata.uid)) == 2 and h.rt.prepared == {}


def test_a_missing_image_found_ahead_is_reported_as_before() -> None:
    h = Harness()
    pod = make_pod("web", containers=("a",), image="edgelet.local/missing:1", policy="Never")
    h.sync(pod)
    assert h.rt.prep_calls == [] and h.rt.prepared == {}
    _, waiting = h.published[pod.metadata.uid]
    assert waiting["a"][0] == "ErrImageNeverPull"
    assert [c[0] for c in h.rt.calls] == ["create_sandbox"]


def test_a_cancelled_sync_discards_what_was_prepared() -> None:
    clock = FakeClock()

    class SlowSandbox(FakeRuntime):
        async def create_sandbox(self, pod, attempt):
            await asyncio.sleep(3600)

    rt = SlowSandbox(clock)
    syncer = Syncer(rt, FakeImageStore(), Backoff(), clock, publish=lambda *a: None)
    pod = make_pod("web", containers=("a",))

    async def main() -> None:
        task = asyncio.ensure_future(syncer.sync_pod(pod))
        for _ in range(3000):  # image resolution may hop to a thread: poll with a generous deadline
            if rt.prep_calls:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    assert rt.prep_calls[0] == ("prepare_container", "a", 0)
    assert rt.prepared == {} and ("discard_prepared", "a", 0) in rt.prep_calls


# --- issue 25: the first container's create beside the sandbox's CNI ADD ---------------------------------------


def _network_harness() -> Harness:
    h = Harness()
    h.rt.network = True  # create_sandbox returns the sandbox created, its ADD left to start_sandbox
    return h


def test_with_a_network_the_first_container_is_created_beside_add_and_started_after_it() -> None:
    h = _network_harness()
    pod = make_pod("web", containers=("a", "b"))
    h.sync(pod)
    names = [c[0] for c in h.rt.calls]
    assert names[0] == "create_sandbox"
    assert sorted(names[1:3]) == ["create_container", "start_sandbox"]  # beside each other, either order
    assert names[3:] == ["start_container", "create_container", "start_container"]
    assert h.rt.calls[names.index("create_container")][1] == "a"  # the first container only
    assert len(h.rt.running(pod.metadata.uid)) == 2 and h.rt.prepared == {}
    (sb,) = h.rt.sandboxes.values()
    assert sb.state == "running"


def test_the_created_container_never_starts_before_add_succeeded() -> None:
    clock = FakeClock()
    released = asyncio.Event()

    class SlowAdd(FakeRuntime):
        async def start_sandbox(self, pod, sandbox):
            await released.wait()  # ADD "in the plugin chain" until the test lets it end
            return await super().start_sandbox(pod, sandbox)

    rt = SlowAdd(clock)
    rt.network = True
    syncer = Syncer(rt, FakeImageStore(), Backoff(), clock, publish=lambda *a: None)
    pod = make_pod("web", containers=("a",))

    async def main() -> None:
        task = asyncio.ensure_future(syncer.sync_pod(pod))
        for _ in range(3000):  # image resolution may hop to a thread: poll with a generous deadline
            if rt.containers:
                break
            await asyncio.sleep(0.01)
        for _ in range(50):
            await asyncio.sleep(0)  # every chance to start what it should not
        assert [c.state for c in rt.containers.values()] == ["created"]
        assert "start_container" not in [c[0] for c in rt.calls]
        released.set()
        await task

    asyncio.run(main())
    assert [c.state for c in rt.containers.values()] == ["running"]


def test_a_failed_add_removes_the_created_container_then_the_sandbox() -> None:
    h = _network_harness()
    h.rt.fail_network = True
    pod = make_pod("web", containers=("a", "b"))
    h.sync(pod)
    removed = [c[1] for c in h.rt.calls if c[0] == "remove_container"]
    created = [c for c in h.rt.calls if c[0] == "create_container"]
    assert len(created) == 1 and len(removed) == 2
    assert removed[0].startswith("c") and removed[1].startswith("sb")  # the container first, then its sandbox
    assert "start_container" not in [c[0] for c in h.rt.calls]
    assert h.rt.containers == {} and h.rt.sandboxes == {} and h.rt.prepared == {}
    _, waiting = h.published[pod.metadata.uid]
    assert waiting["a"][0] == "ContainerCreating" and "network failed" in waiting["a"][1]
    reasons = [e.reason for e in h.syncer._events.events(pod.metadata.uid)]
    assert "FailedCreatePodSandBox" in reasons
    assert "Created" not in reasons  # the container went with the failed network: never reported created
    h.rt.fail_network = False
    h.clock.advance(60)
    h.sync(pod)
    assert len(h.rt.running(pod.metadata.uid)) == 2


def test_a_failed_add_and_a_failed_create_leave_nothing() -> None:
    h = _network_harness()
    h.rt.fail_network = True
    h.rt.fail_create = {"a"}
    pod = make_pod("web", containers=("a",))
    h.sync(pod)
    assert h.rt.containers == {} and h.rt.sandboxes == {} and h.rt.prepared == {}
    assert [c[0] for c in h.rt.calls if c[0] == "remove_container"] == ["remove_container"]  # the sandbox only


def test_a_failed_create_beside_a_good_add_is_the_containers_failure_as_before() -> None:
    h = _network_harness()
    h.rt.fail_create = {"a"}
    pod = make_pod("web", containers=("a", "b"))
    h.sync(pod)
    _, waiting = h.published[pod.metadata.uid]
    assert waiting["a"][0] == "CreateContainerError" and "create failed for a" in waiting["a"][1]
    (sb,) = h.rt.sandboxes.values()
    assert sb.state == "running"  # the sandbox stays for the retry
    assert [c.name for c in h.rt.running(pod.metadata.uid)] == ["b"]


def test_a_first_container_whose_image_is_missing_is_not_created_and_reported_as_before() -> None:
    h = _network_harness()
    pod = make_pod("web", containers=("a",), image="edgelet.local/missing:1", policy="Never")
    h.sync(pod)
    assert "create_container" not in [c[0] for c in h.rt.calls]
    _, waiting = h.published[pod.metadata.uid]
    assert waiting["a"][0] == "ErrImageNeverPull"
    (sb,) = h.rt.sandboxes.values()
    assert sb.state == "running"


def test_a_sync_cancelled_during_add_removes_the_created_container_and_the_sandbox() -> None:
    clock = FakeClock()

    class HangingAdd(FakeRuntime):
        async def start_sandbox(self, pod, sandbox):
            self.calls.append(("start_sandbox", sandbox.id))
            await asyncio.sleep(3600)

    rt = HangingAdd(clock)
    rt.network = True
    syncer = Syncer(rt, FakeImageStore(), Backoff(), clock, publish=lambda *a: None)
    pod = make_pod("web", containers=("a",))

    async def main() -> None:
        task = asyncio.ensure_future(syncer.sync_pod(pod))
        for _ in range(3000):
            if rt.containers:
                break
            await asyncio.sleep(0.01)
        assert rt.containers
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    assert rt.containers == {} and rt.sandboxes == {} and rt.prepared == {}
    removed = [c[1] for c in rt.calls if c[0] == "remove_container"]
    assert removed[0].startswith("c") and removed[-1].startswith("sb")
