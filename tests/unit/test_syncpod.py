"""Syncer over FakeRuntime with the real decisions: restart policies, back-off, adoption, termination."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from edgelet.api.static import make_static_pod
from edgelet.api.types import Pod
from edgelet.container.types import PodRuntimeStatus
from edgelet.sync.syncpod import Syncer
from edgelet.testing.fakes import FakeImageStore, FakeRuntime
from edgelet.util.backoff import Backoff
from edgelet.util.clock import FakeClock

IMAGE = "edgelet.local/busybox:1.36"


def make_pod(
    name: str, restart: str = "Always", containers=("c",), image: str = IMAGE, policy: str | None = None
) -> Pod:
    spec = {
        "restartPolicy": restart,
        "containers": [
            {"name": c, "image": image, **({"imagePullPolicy": policy} if policy else {})} for c in containers
        ],
    }
    raw = msgspec.convert({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}, Pod)
    return make_static_pod(raw, node_name="node", source="file", origin=f"/m/{name}.yaml")


class Harness:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.rt = FakeRuntime(self.clock)
        self.published = {}
        self.syncer = Syncer(
            self.rt,
            FakeImageStore(),
            Backoff(),
            self.clock,
            publish=lambda pod, rt, st: self.published.__setitem__(pod.metadata.uid, (rt, dict(st.waiting))),
        )

    def sync(self, pod):
        return asyncio.run(self.syncer.sync_pod(pod))


def test_first_sync_creates_sandbox_and_starts_containers():
    h = Harness()
    pod = make_pod("web", containers=("a", "b"))
    h.sync(pod)
    assert [c[0] for c in h.rt.calls] == [
        "create_sandbox",
        "create_container",
        "start_container",
        "create_container",
        "start_container",
    ]
    assert len(h.rt.running(pod.metadata.uid)) == 2
    # A second sync changes nothing: everything runs with the right hash (this is also adoption).
    h.rt.calls.clear()
    h.sync(pod)
    assert h.rt.calls == []


def test_crash_loop_backs_off_and_counts_restarts():
    h = Harness()
    pod = make_pod("crash")
    h.sync(pod)
    (c,) = h.rt.running()
    h.rt.exit(c.id, 1)
    h.sync(pod)  # first restart is immediate (kubelet doBackOff), attempt 1
    (c1,) = h.rt.running()
    assert c1.attempt == 1
    h.rt.exit(c1.id, 1)
    res = h.sync(pod)  # now within back-off: waits
    assert not h.rt.running()
    rt, waiting = h.published[pod.metadata.uid]
    assert waiting["c"][0] == "CrashLoopBackOff"
    assert res.requeue_after is not None and res.requeue_after > 0
    h.clock.advance(res.requeue_after)
    h.sync(pod)
    (c2,) = h.rt.running()
    assert c2.attempt == 2


def test_never_does_not_restart_and_onfailure_completes():
    h = Harness()
    never = make_pod("never", restart="Never")
    h.sync(never)
    (c,) = h.rt.running(never.metadata.uid)
    h.rt.exit(c.id, 4)
    h.sync(never)
    assert not h.rt.running(never.metadata.uid)
    assert not [x for x in h.rt.calls if x[0] == "create_container" and x[2] > 0]

    ok = make_pod("ok", restart="OnFailure")
    h.sync(ok)
    (c,) = h.rt.running(ok.metadata.uid)
    h.rt.exit(c.id, 0)
    h.sync(ok)
    assert not h.rt.running(ok.metadata.uid)
    # The finished pod's pause process is stopped, its exited container kept as status.
    assert all(s.state == "exited" for s in h.rt.sandboxes.values() if s.pod_uid == ok.metadata.uid)
    assert [c for c in h.rt.containers.values() if c.pod_uid == ok.metadata.uid]


def test_missing_image_never_pull_is_a_waiting_reason_not_a_crash():
    h = Harness()
    pod = make_pod("noimg", image="edgelet.local/absent:1", policy="Never")
    h.sync(pod)
    _, waiting = h.published[pod.metadata.uid]
    assert waiting["c"][0] == "ErrImageNeverPull"
    assert "not present with pull policy of Never" in waiting["c"][1]


def test_dead_sandbox_recreated_keeps_restart_count():
    h = Harness()
    pod = make_pod("sb")
    h.sync(pod)
    (sb,) = h.rt.sandboxes.values()
    asyncio.run(h.rt.stop_sandbox(sb.id))
    (c,) = h.rt.running()
    h.rt.exit(c.id, 137)
    h.sync(pod)
    (c1,) = h.rt.running()
    assert c1.attempt == 1
    assert any(s.state == "running" and s.attempt == 1 for s in h.rt.sandboxes.values())


def test_terminate_stops_with_grace_and_removes_everything():
    h = Harness()
    pod = make_pod("gone")
    h.sync(pod)
    asyncio.run(h.syncer.terminate_pod(pod.metadata.uid, pod))
    stops = [c for c in h.rt.calls if c[0] == "stop_container"]
    assert stops and stops[0][2] == 30.0 and stops[0][3] == "SIGTERM"
    assert ("remove_pod", pod.metadata.uid) in h.rt.calls
    assert not h.rt.containers and not h.rt.sandboxes


def test_an_orphan_is_stopped_with_its_own_grace_period_not_30_s():
    """A pod removed while the agent was down: no pod object, only what the runtime kept (issue 16)."""
    h = Harness()
    raw = msgspec.convert(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "quick"},
            "spec": {"terminationGracePeriodSeconds": 3, "containers": [{"name": "c", "image": IMAGE}]},
        },
        Pod,
    )
    pod = make_static_pod(raw, node_name="node", source="file", origin="/m/quick.yaml")
    h.sync(pod)
    asyncio.run(h.syncer.terminate_pod(pod.metadata.uid, None))
    stops = [c for c in h.rt.calls if c[0] == "stop_container"]
    assert stops and stops[0][2] == 3.0


def test_a_pod_the_host_cannot_limit_is_refused_at_once_and_published_failed(tmp_path):
    from edgelet.cgroups.controllers import Admission
    from edgelet.events import EventRecorder
    from edgelet.status.publisher import StatusPublisher

    clock = FakeClock()
    rt = FakeRuntime(clock)
    publisher = StatusPublisher(tmp_path, "node", clock)
    events = EventRecorder(clock)
    verdicts = {
        "refused": Admission(True, ("memory",), "CgroupControllersMissing", "needs memory: add cgroup_enable"),
        "warned": Admission(False, ("memory",), "CgroupControllersMissing", "running without memory limits"),
    }
    syncer = Syncer(
        rt,
        FakeImageStore(),
        Backoff(),
        clock,
        publish=publisher.update,
        events=events,
        admit=lambda pod: verdicts.get(pod.metadata.name.split("-")[0]),
    )
    refused, warned = make_pod("refused"), make_pod("warned")
    for _ in range(3):
        asyncio.run(syncer.sync_pod(refused))
        asyncio.run(syncer.sync_pod(warned))
    # Refused: no sandbox, no container, Failed with the reason and its fix; one event, however often it syncs.
    assert not rt.running(refused.metadata.uid) and not any(c[1] == refused for c in rt.calls)
    status = publisher.get(refused.metadata.uid).status
    assert (status.phase, status.reason, status.message) == (
        "Failed",
        "CgroupControllersMissing",
        "Pod was rejected: needs memory: add cgroup_enable",
    )
    assert publisher.get(refused.metadata.uid).row.status == "CgroupControllersMissing"  # kubectl's STATUS column
    # Warned: runs, with one warning event.
    assert len(rt.running(warned.metadata.uid)) == 1
    reasons = [(e.object.name, e.reason) for e in events.snapshot().events]
    assert reasons.count((refused.metadata.name, "CgroupControllersMissing")) == 1
    assert reasons.count((warned.metadata.name, "CgroupControllersMissing")) == 1


def test_the_pods_checkpoint_is_written_only_when_it_changed(tmp_path):
    from edgelet.status.publisher import StatusPublisher
    from edgelet.status.snapshot import snapshot_path

    clock = FakeClock()
    rt = FakeRuntime(clock)
    publisher = StatusPublisher(tmp_path, "node", clock, host_ip="10.0.0.1")
    syncer = Syncer(rt, FakeImageStore(), Backoff(), clock, publish=publisher.update)
    pod = make_pod("web")
    asyncio.run(syncer.sync_pod(pod))
    publisher.flush()
    path = snapshot_path(tmp_path)
    first = path.stat().st_ino
    for _ in range(5):  # idle resyncs: every one publishes, none changes anything
        clock.advance(10)
        asyncio.run(syncer.sync_pod(pod))
        publisher.flush()
    assert path.stat().st_ino == first


def test_gc_removes_older_exited_instances_and_releases_the_ones_that_stay():
    h = Harness()
    pod = make_pod("gc")
    h.sync(pod)
    ids = []
    for _ in range(3):
        (c,) = h.rt.running()
        ids.append(c.id)
        h.rt.exit(c.id, 1)
        res = h.sync(pod)
        if res.requeue_after:
            h.clock.advance(res.requeue_after)
            h.sync(pod)
    h.rt.released.clear()
    h.sync(pod)
    # The oldest exited instances are gone; the lastState stays, asked to give back what it holds.
    assert ("remove_container", ids[0]) in h.rt.calls and ("remove_container", ids[1]) in h.rt.calls
    assert ("remove_container", ids[2]) not in h.rt.calls
    assert set(h.rt.released) == {ids[2]}
    names = sorted(c.attempt for c in h.rt.containers.values())
    assert names == [2, 3]


def test_a_failed_release_of_an_exited_container_asks_for_a_resync_soon():
    """Found by the chaos harness's flaky runtime: a `runc delete` that failed left the release undone until the
    pod's next event, which a settled pod may not see for a long time (its runc state and socket stayed)."""
    from edgelet.sync.syncpod import CLEANUP_RETRY

    h = Harness()
    pod = make_pod("rel", restart="Never")
    h.sync(pod)
    (c,) = h.rt.running()
    h.rt.exit(c.id, 0)

    async def failing_release(container_id: str) -> None:
        raise RuntimeError(f"container {container_id[:12]}: cannot release its resources: injected")

    h.rt.release_container = failing_release  # type: ignore[method-assign]
    res = h.sync(pod)
    assert res.requeue_after is not None and res.requeue_after <= CLEANUP_RETRY


def test_an_instance_created_by_a_killed_agent_is_started_not_replaced():
    """issue 21: killed between `runc create` and `runc start`, the next agent starts the instance that is there."""
    h = Harness()
    pod = make_pod("web")
    asyncio.run(h.rt.run_sandbox(pod, 0))
    sandbox = next(iter(h.rt.sandboxes.values()))
    cid = asyncio.run(h.rt.create_container(pod, pod.spec.containers[0], sandbox, FakeImageStore().get(IMAGE), 0))
    h.rt.calls.clear()
    h.sync(pod)  # a fresh Syncer: the new agent
    assert h.rt.calls == [("start_container", cid)]
    (c,) = h.rt.running()
    assert (c.id, c.attempt) == (cid, 0)


def test_a_created_instance_whose_start_fails_is_replaced_at_the_next_sync():
    h = Harness()
    pod = make_pod("web")
    h.rt.fail_start.add("c")
    h.sync(pod)
    (created,) = h.rt.containers.values()
    assert created.state == "created"
    assert h.published[pod.metadata.uid][1]["c"][0] == "RunContainerError"
    h.rt.fail_start.clear()
    h.rt.calls.clear()
    h.clock.advance(60)
    h.sync(pod)
    assert [c[0] for c in h.rt.calls] == ["stop_container", "create_container", "start_container"]
    (c,) = h.rt.running()
    assert c.id != created.id and c.attempt == 0


def test_a_sync_takes_its_before_state_from_a_relist_newer_than_its_last_sync():
    """kubelet's pod workers read the PLEG cache newer than their last sync; so does the syncer (issue 25.2)."""
    clock = FakeClock()
    rt = FakeRuntime(clock)
    listed = []
    real_status = rt.pod_status

    async def pod_status(uid):
        listed.append(uid)
        return await real_status(uid)

    rt.pod_status = pod_status
    relist: dict = {}  # what "PLEG" saw, and when it asked
    syncer = Syncer(
        rt,
        FakeImageStore(),
        Backoff(),
        clock,
        publish=lambda pod, status, st: None,
        newer_than=lambda uid, since: relist["pods"].get(uid) if relist.get("at", -1) > since else None,
    )
    pod = make_pod("web")
    asyncio.run(syncer.sync_pod(pod))
    assert listed, "its first sync lists: no relist yet"
    listed.clear()
    clock.advance(1)
    relist.update(at=clock.monotonic(), pods=asyncio.run(rt.list_pods()))
    listed.clear()  # the fake lists pod by pod
    asyncio.run(syncer.sync_pod(pod))
    assert listed == [], "a relist newer than the last sync is the before-state"
    asyncio.run(syncer.sync_pod(pod))
    assert listed == [], "the sync just done changed nothing and published that relist: it still serves"
    (c,) = rt.running(pod.metadata.uid)
    rt.exit(c.id, 1)
    clock.advance(1)
    relist.update(at=clock.monotonic(), pods=asyncio.run(rt.list_pods()))  # PLEG's relist after the exit file
    listed.clear()
    asyncio.run(syncer.sync_pod(pod))  # a restart from that relist: it changed something after it
    assert listed == [pod.metadata.uid], "its after-state (no relist to wait for here)"
    assert len(rt.running(pod.metadata.uid)) == 1
    listed.clear()
    asyncio.run(syncer.sync_pod(pod))
    assert listed == [pod.metadata.uid], "that relist is older than the last sync's changes: list"


class _Relists:
    """PLEG stand-in over a FakeRuntime: `after` is Pleg.pods_newer_than's role (a relist that asks after the
    time given, as a real clock would read a moment later), `newer_than` Pleg.status_newer_than's."""

    def __init__(self, clock, rt, fail: bool = False) -> None:
        self.clock, self.rt, self.fail = clock, rt, fail
        self.asked: list[float] = []  # the `since` of every after-state read
        self.at = None
        self.pods: dict = {}

    async def after(self, uid, since):
        from edgelet.container.errors import ExecError

        self.asked.append(since)
        if self.fail:
            raise ExecError(["runc", "list"], 1, "injected")
        self.clock.advance(0.001)
        self.at = self.clock.monotonic()
        self.pods = await self.list()
        return self.pods.get(uid) or PodRuntimeStatus(uid=uid)

    async def list(self):
        """FakeRuntime.list_pods, without the pod_status calls a test counts."""
        rt = self.rt
        uids = {s.pod_uid for s in rt.sandboxes.values()} | {c.pod_uid for c in rt.containers.values()}
        return {u: await FakeRuntime.pod_status(rt, u) for u in uids}

    def newer_than(self, uid, since):
        return self.pods.get(uid) if self.at is not None and self.at > since else None


def _counting(rt):
    listed = []
    real = rt.pod_status

    async def pod_status(uid):
        listed.append(uid)
        return await real(uid)

    rt.pod_status = pod_status
    return listed


def test_a_sync_publishes_a_relist_newer_than_its_changes_and_that_relist_serves_the_next_sync():
    """issue 25.2: no `runc list` of its own for the after-state; the relist it shares is PLEG's, newer than its
    changes, so the resync PLEG's events cause reads it too (kubelet: the pod worker reads the PLEG cache)."""
    clock = FakeClock()
    rt = FakeRuntime(clock)
    listed = _counting(rt)
    relists = _Relists(clock, rt)
    published = []
    syncer = Syncer(
        rt,
        FakeImageStore(),
        Backoff(),
        clock,
        publish=lambda pod, status, st: published.append(status),
        newer_than=relists.newer_than,
        relisted_after=relists.after,
    )
    pod = make_pod("web", containers=("a", "b"))
    uid = pod.metadata.uid
    before = clock.monotonic()
    result = asyncio.run(syncer.sync_pod(pod))
    assert listed == [uid], "only the before-state of a pod no relist has seen"
    assert result.changed and result.relisted, "PLEG has seen the changes: no kick for another relist"
    assert len(relists.asked) == 1 and relists.asked[0] >= before
    assert {c.state for c in published[-1].containers} == {"running"} and len(published[-1].containers) == 2
    assert syncer.state(uid).synced_at == relists.asked[0], "its changes ended where it read the after-state"
    listed.clear()
    result = asyncio.run(syncer.sync_pod(pod))  # the resync that relist's ContainerStarted events cause
    assert listed == [] and not result.changed and len(relists.asked) == 1
    clock.advance(0.5)
    asyncio.run(syncer.sync_pod(pod))  # one more (a probe verdict, a rollout round): nothing changed since
    assert listed == [], "a sync that changed nothing and read the cache leaves the cache fresh for the next"

    # A container that dies: the next relist shows it, and the sync restarts it from that state.
    (a, _) = rt.running(uid)
    rt.exit(a.id, 1)
    clock.advance(1)
    relists.at, relists.pods = clock.monotonic(), asyncio.run(relists.list())
    result = asyncio.run(syncer.sync_pod(pod))
    assert listed == [] and result.relisted and len(rt.running(uid)) == 2


def test_a_relist_that_fails_leaves_the_sync_its_own_read_and_pleg_a_kick():
    clock = FakeClock()
    rt = FakeRuntime(clock)
    listed = _counting(rt)
    relists = _Relists(clock, rt, fail=True)
    published = []
    syncer = Syncer(
        rt,
        FakeImageStore(),
        Backoff(),
        clock,
        publish=lambda pod, status, st: published.append(status),
        newer_than=relists.newer_than,
        relisted_after=relists.after,
    )
    pod = make_pod("web")
    result = asyncio.run(syncer.sync_pod(pod))
    assert relists.asked and listed == [pod.metadata.uid] * 2, "before-state, then the after-state read alone"
    assert result.changed and not result.relisted
    assert [c.state for c in published[-1].containers] == ["running"]


def test_a_sandbox_that_fails_publishes_from_a_relist_too():
    clock = FakeClock()
    rt = FakeRuntime(clock)
    rt.fail_sandbox = True
    listed = _counting(rt)
    relists = _Relists(clock, rt)
    syncer = Syncer(
        rt,
        FakeImageStore(),
        Backoff(),
        clock,
        publish=lambda pod, status, st: None,
        newer_than=relists.newer_than,
        relisted_after=relists.after,
    )
    pod = make_pod("web")
    result = asyncio.run(syncer.sync_pod(pod))
    assert result.relisted and result.requeue_after is not None
    assert listed == [pod.metadata.uid] and len(relists.asked) == 1


def test_stopping_a_pods_containers_reads_them_from_the_shared_relist_not_a_list_each():
    clock = FakeClock()
    rt = FakeRuntime(clock)
    relists = _Relists(clock, rt)
    syncer = Syncer(
        rt,
        FakeImageStore(),
        Backoff(),
        clock,
        publish=lambda pod, status, st: None,
        newer_than=relists.newer_than,
        relisted_after=relists.after,
    )
    pod = make_pod("web", containers=("a", "b", "c"))
    asyncio.run(syncer.sync_pod(pod))
    full_lists = []
    real = rt.list_pods

    async def list_pods():
        full_lists.append(1)
        return await real()

    rt.list_pods = list_pods
    listed = _counting(rt)
    asked = len(relists.asked)
    asyncio.run(syncer.terminate_pod(pod.metadata.uid, pod))
    assert not rt.running(pod.metadata.uid)
    assert full_lists == [] and listed == [], "the before-state from the cache, each stop's record from a relist"
    assert len(relists.asked) == asked + 4  # a relist per stop, and one after the removal: PLEG forgets the pod


def test_a_sync_that_read_the_runtime_itself_is_not_followed_by_an_older_cached_state():
    """A sync that listed on its own (no relist newer than the last) published a state newer than PLEG's cache:
    the next one must not publish that older cache."""
    clock = FakeClock()
    rt = FakeRuntime(clock)
    listed = _counting(rt)
    relists = _Relists(clock, rt)
    syncer = Syncer(
        rt,
        FakeImageStore(),
        Backoff(),
        clock,
        publish=lambda pod, status, st: None,
        newer_than=relists.newer_than,
        relisted_after=relists.after,
    )
    pod = make_pod("web")
    asyncio.run(syncer.sync_pod(pod))
    clock.advance(1)
    # A sync after a change the relists never saw (the cache is older than its last sync): it lists itself...
    syncer.state(pod.metadata.uid).synced_at = clock.monotonic()
    listed.clear()
    asyncio.run(syncer.sync_pod(pod))
    assert listed == [pod.metadata.uid]
    # ...and so does the next: that cache is still older than what the last one published.
    asyncio.run(syncer.sync_pod(pod))
    assert listed == [pod.metadata.uid] * 2


@pytest.mark.parametrize(
    ("settled_at", "now", "expected"),
    [
        (5.0, 9.0, 5.0),  # its changes ended at 5 (or, changing nothing, its cached state was fresh against 5)
        (None, 9.0, 9.0),  # it read the runtime itself (or failed): nothing older than now may follow
    ],
)
def test_a_syncs_synced_at(settled_at, now, expected):
    from edgelet.sync.syncpod import next_synced_at

    assert next_synced_at(settled_at, now) == expected
