"""Sync prepares each new container while its sandbox is set up (issue 25.2), and nothing prepared outlives a
failure of either half (FakeRuntime; the real runtime's half is in tests/integration/test_runtime_prepare.py)."""

from __future__ import annotations

import asyncio

from edgelet.testing.fakes import FakeImageStore, FakeRuntime
from edgelet.sync.syncpod import Syncer
from edgelet.util.backoff import Backoff
from edgelet.util.clock import FakeClock

from tests.unit.test_syncpod import Harness, make_pod


def test_new_containers_are_prepared_beside_the_sandbox_and_created_from_it() -> None:
    h = Harness()
    pod = make_pod("web", containers=("a", "b"))
    h.sync(pod)
    assert h.rt.prep_calls == [("prepare_container", "a", 0), ("prepare_container", "b", 0)]
    assert [c[0] for c in h.rt.calls] == ["run_sandbox", "create_container", "start_container",
                                          "create_container", "start_container"]
    assert h.rt.prepared == {}  # every prepared one was created
    assert len(h.rt.running(pod.metadata.uid)) == 2


def test_a_failed_sandbox_discards_what_was_prepared() -> None:
    h = Harness()
    h.rt.fail_sandbox = True
    pod = make_pod("web", containers=("a", "b"))
    h.sync(pod)
    assert sorted(h.rt.prep_calls) == sorted([("prepare_container", "a", 0), ("prepare_container", "b", 0),
                                              ("discard_prepared", "a", 0), ("discard_prepared", "b", 0)])
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
    assert [c[0] for c in h.rt.calls] == ["run_sandbox"]


def test_a_cancelled_sync_discards_what_was_prepared() -> None:
    clock = FakeClock()

    class SlowSandbox(FakeRuntime):
        async def run_sandbox(self, pod, attempt):
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
