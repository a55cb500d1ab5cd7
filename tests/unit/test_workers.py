"""PodWorkers: one serialised task per pod, newest pending update wins, terminate is final."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from edgelet.sync.workers import PodWorkers, SyncResult


def fake_pod(uid: str, version: int):
    return SimpleNamespace(metadata=SimpleNamespace(uid=uid, name=f"p-{uid}", namespace="default"), version=version)


class RecordingSyncer:
    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.active: set[str] = set()
        self.overlap = False
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_once = True

    async def sync_pod(self, pod) -> SyncResult:
        uid = pod.metadata.uid
        if uid in self.active:
            self.overlap = True
        self.active.add(uid)
        await self.gate.wait()
        await asyncio.sleep(0)
        self.active.discard(uid)
        self.log.append(("sync", uid, pod.version))
        if pod.version == 99 and self.fail_once:
            self.fail_once = False
            raise RuntimeError("boom")
        return SyncResult(requeue_after=None)

    async def terminate_pod(self, uid, pod) -> None:
        self.log.append(("terminate", uid))


def run(coro):
    return asyncio.run(coro)


def test_newest_pending_update_wins_and_syncs_are_serialised():
    async def go():
        s = RecordingSyncer()
        w = PodWorkers(s)
        s.gate.clear()
        w.sync(fake_pod("a", 1))
        await asyncio.sleep(0)
        for v in (2, 3, 4):
            w.sync(fake_pod("a", v))
        s.gate.set()
        await w.wait_idle()
        return s

    s = run(go())
    assert s.log == [("sync", "a", 1), ("sync", "a", 4)]
    assert not s.overlap


def test_pods_sync_concurrently_and_terminate_is_final():
    async def go():
        s = RecordingSyncer()
        terminated = []
        w = PodWorkers(s, on_terminated=terminated.append)
        w.sync(fake_pod("a", 1))
        w.sync(fake_pod("b", 1))
        await w.wait_idle()
        w.terminate("a", None)
        w.sync(fake_pod("a", 2))  # ignored: a terminating UID is not resurrected
        await w.wait_idle()
        return s, terminated, w

    s, terminated, w = run(go())
    assert ("terminate", "a") in s.log
    assert ("sync", "a", 2) not in s.log
    assert terminated == ["a"]
    assert "a" not in w.known()


def test_a_failing_sync_is_logged_and_requeued():
    async def go():
        s = RecordingSyncer()
        results = []
        w = PodWorkers(s, on_result=lambda uid, r: results.append((uid, r)))
        w.sync(fake_pod("x", 99))
        await w.wait_idle()
        return results

    results = run(go())
    assert results == [("x", SyncResult(requeue_after=5.0))]


def named_pod(uid: str, name: str):
    return SimpleNamespace(metadata=SimpleNamespace(uid=uid, name=name, namespace="default"), version=1)


def test_new_uid_with_the_same_name_waits_for_the_old_pod_to_terminate():
    class SlowTerminate(RecordingSyncer):
        async def terminate_pod(self, uid, pod) -> None:
            await self.gate.wait()
            await super().terminate_pod(uid, pod)

    async def go():
        s = SlowTerminate()
        w = PodWorkers(s)
        w.sync(named_pod("old", "web"))
        await w.wait_idle()
        s.gate.clear()
        w.terminate("old", named_pod("old", "web"))
        w.sync(named_pod("new", "web"))  # the edited pod, same full name
        w.sync(named_pod("x", "other"))  # another name is not held back
        await asyncio.sleep(0)
        held = "new" not in w.known()
        s.gate.set()
        await w.wait_idle()
        await w.wait_idle()
        return s, held

    s, held = run(go())
    assert held
    assert s.log.index(("terminate", "old")) < s.log.index(("sync", "new", 1))


def named(uid: str, name: str):
    return SimpleNamespace(metadata=SimpleNamespace(uid=uid, name=name, namespace="default"), version=1)


def test_a_parked_pod_told_to_terminate_never_starts():
    """The rollout went back to the running version while the new one waited for the name: it must not start."""

    class SlowStop(RecordingSyncer):
        async def terminate_pod(self, uid, pod) -> None:
            if uid == "v1":
                await self.gate.wait()  # v1 takes its grace period to stop
            self.log.append(("terminate", uid))

    async def go():
        s = SlowStop()
        w = PodWorkers(s)
        w.sync(named("v1", "app"))
        await w.wait_idle()
        s.gate.clear()
        w.terminate("v1", named("v1", "app"))
        w.sync(named("v2", "app"))  # parked: v1 still terminating
        w.terminate("v2", named("v2", "app"))
        for _ in range(5):
            await asyncio.sleep(0)
        s.gate.set()
        await w.wait_idle()
        await asyncio.sleep(0)
        await w.wait_idle()
        return s

    s = run(go())
    assert ("sync", "v2", 1) not in s.log


def test_finish_ends_the_syncs_and_lets_a_terminate_run():
    """--runonce, once judged: a sync under way is cut and none queued behind it starts, as the daemon's stop
    does; a pod told to terminate (even behind a sync) is still stopped."""

    async def go():
        s = RecordingSyncer()
        w = PodWorkers(s)
        s.gate.clear()
        w.sync(fake_pod("a", 1))
        w.sync(fake_pod("b", 1))
        await asyncio.sleep(0)
        w.sync(fake_pod("a", 2))  # queued behind a's first sync
        w.terminate("b", fake_pod("b", 1))  # queued behind b's
        finishing = asyncio.ensure_future(w.finish())
        await asyncio.sleep(0)
        s.gate.set()
        await finishing
        return s, w

    s, w = run(go())
    assert s.log == [("sync", "b", 1), ("terminate", "b")]
    assert w.known() == {"a"} and w._workers["a"].task.cancelled(), "b's worker ended with its terminate"
