"""PLEG diff: kubelet generateEvents over two relists, per container id."""

from __future__ import annotations

import pytest

from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord
from edgelet.pleg import PodLifecycleEvent, diff, generate_events, pods_with_events

E = PodLifecycleEvent


def c(cid: str, state: str, uid: str = "u1") -> ContainerRecord:
    return ContainerRecord(
        id=cid,
        pod_uid=uid,
        pod_name="p",
        pod_namespace="default",
        name="app",
        attempt=0,
        spec_hash="h",
        sandbox_id="sb",
        state=state,
        pid=None,
        created_at=1.0,  # type: ignore[arg-type]
    )


def sb(sid: str, state: str, uid: str = "u1") -> SandboxRecord:
    return SandboxRecord(
        id=sid, pod_uid=uid, pod_name="p", pod_namespace="default", attempt=0, state=state, pid=None, created_at=1.0
    )  # type: ignore[arg-type]


def pod(uid: str = "u1", *, sandboxes: tuple = (), containers: tuple = ()) -> PodRuntimeStatus:
    return PodRuntimeStatus(uid=uid, sandboxes=sandboxes, containers=containers)


# kubelet pleg/generic_test.go TestRelisting-style transitions for one container.
@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, "running", ["ContainerStarted"]),
        (None, "exited", ["ContainerDied"]),
        (None, "created", ["ContainerChanged"]),
        (None, "unknown", ["ContainerChanged"]),
        ("created", "running", ["ContainerStarted"]),
        ("running", "running", []),
        ("running", "exited", ["ContainerDied"]),
        ("running", None, ["ContainerDied", "ContainerRemoved"]),
        ("unknown", None, ["ContainerDied", "ContainerRemoved"]),
        ("exited", None, ["ContainerRemoved"]),
        ("exited", "exited", []),
        ("created", "unknown", []),  # both count as unknown for kubelet
        ("exited", "running", ["ContainerStarted"]),
    ],
)
def test_container_transitions(old: str | None, new: str | None, expected: list[str]) -> None:
    before = {"u1": pod(containers=(c("c1", old),))} if old else {}
    after = {"u1": pod(containers=(c("c1", new),))} if new else {}
    assert diff(before, after) == [E("u1", t, "c1") for t in expected]  # type: ignore[arg-type]


def test_sandboxes_count_as_containers() -> None:
    before = {"u1": pod(sandboxes=(sb("s1", "running"),), containers=(c("c1", "running"),))}
    after = {"u1": pod(sandboxes=(sb("s1", "exited"),), containers=(c("c1", "running"),))}
    assert diff(before, after) == [E("u1", "ContainerDied", "s1")]


def test_whole_pod_appears_and_vanishes() -> None:
    full = pod(sandboxes=(sb("s1", "running"),), containers=(c("c1", "running"), c("c0", "exited")))
    assert diff({}, {"u1": full}) == [
        E("u1", "ContainerStarted", "s1"),
        E("u1", "ContainerStarted", "c1"),
        E("u1", "ContainerDied", "c0"),
    ]
    assert diff({"u1": full}, {}) == [
        E("u1", "ContainerDied", "s1"),
        E("u1", "ContainerRemoved", "s1"),
        E("u1", "ContainerDied", "c1"),
        E("u1", "ContainerRemoved", "c1"),
        E("u1", "ContainerRemoved", "c0"),
    ]


def test_several_pods_in_uid_order_and_unchanged_pods_are_silent() -> None:
    same = pod("a", containers=(c("ca", "running", "a"),))
    before = {"a": same, "b": pod("b", containers=(c("cb", "running", "b"),))}
    after = {
        "c": pod("c", containers=(c("cc", "running", "c"),)),
        "b": pod("b", containers=(c("cb", "exited", "b"),)),
        "a": same,
    }
    events = diff(before, after)
    assert events == [E("b", "ContainerDied", "cb"), E("c", "ContainerStarted", "cc")]
    assert pods_with_events(events) == ["b", "c"]
    assert diff(after, after) == []


def test_generate_events_same_state_is_empty() -> None:
    assert generate_events("u", "x", "running", "running") == []


def _pinned(rec, *files):
    import dataclasses

    return dataclasses.replace(rec, pid=None, infra=False, namespaces=tuple(("ipc", f) for f in files))


def _with_pid(rec, pid):
    import dataclasses

    return dataclasses.replace(rec, pid=pid)


@pytest.mark.parametrize(
    ("records", "alive", "expected"),
    [
        ((), set(), "alive"),
        (((_with_pid(sb("s", "running"), 10), _with_pid(c("a", "running"), 11)),), {10, 11}, "alive"),
        (((_with_pid(sb("s", "running"), 10), _with_pid(c("a", "running"), 11)),), {10}, "gone"),  # killed with conmon
        (((_with_pid(c("a", "exited"), None),),), set(), "alive"),  # exited stays exited: nothing to check
        (((_with_pid(c("a", "created"), 12),),), {12}, "between"),  # between create and start: ask runc
        # One gone beside one between: the gone one is what counts (an unexplained change).
        (((_with_pid(c("a", "created"), 12), _with_pid(c("b", "running"), 13)),), {12}, "gone"),
        (((_with_pid(c("a", "running"), None),),), set(), "gone"),  # no pid known: ask runc
        # A sandbox without an infra container lives while its namespace files do.
        (((_pinned(sb("s", "running"), "/ns/21"),),), {21}, "alive"),
        (((_pinned(sb("s", "running"), "/ns/21"),),), set(), "gone"),
        (((_pinned(sb("s", "running")),),), set(), "alive"),  # hostNetwork and hostIPC: nothing to look at
    ],
)
def test_the_process_check_looks_at_running_processes(records, alive, expected):
    from edgelet.pleg import process_check

    last = {}
    for group in records:
        sbs = tuple(r for r in group if isinstance(r, SandboxRecord))
        cs = tuple(r for r in group if isinstance(r, ContainerRecord))
        last["u1"] = pod(sandboxes=sbs, containers=cs)
    assert process_check(last, exists=lambda path: int(path.rsplit("/", 1)[1]) in alive) == expected


class _FlakyRuntime:
    """A runtime whose `runc list` fails the first `failures` times (found by the chaos harness: one failed
    list at start made the agent exit 1, issue 16)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def list_pods(self):
        from edgelet.container.errors import ExecError

        self.calls += 1
        if self.calls <= self.failures:
            raise ExecError(["runc", "list"], 1, "injected")
        return {}


def test_adoption_at_start_retries_a_failed_relist(tmp_path):
    import asyncio

    from edgelet.pleg import Pleg
    from edgelet.util.clock import FakeClock

    rt = _FlakyRuntime(failures=2)
    pleg = Pleg(rt, tmp_path, clock=FakeClock())
    asyncio.run(pleg.adopt())
    assert rt.calls == 3 and pleg.relisted.is_set()


def test_adoption_gives_up_when_the_runtime_keeps_failing(tmp_path):
    import asyncio

    from edgelet.container.errors import ExecError
    from edgelet.pleg import ADOPT_ATTEMPTS, Pleg
    from edgelet.util.clock import FakeClock

    rt = _FlakyRuntime(failures=1000)
    with pytest.raises(ExecError):
        asyncio.run(Pleg(rt, tmp_path, clock=FakeClock()).adopt())
    assert rt.calls == ADOPT_ATTEMPTS


@pytest.mark.parametrize(
    ("current", "surprised", "expected"),
    [
        (6, False, 12),  # a full relist saw nothing surprising: the next one waits twice as long
        (12, False, 24),
        (24, False, 30),  # up to FULL_RELIST_MAX_EVERY (5 minutes at 10 s)
        (30, False, 30),
        (30, True, 6),  # it did: back to every minute
        (12, True, 6),
    ],
)
def test_the_full_relist_stretches_while_nothing_surprises(current, surprised, expected):
    from edgelet.pleg import FULL_RELIST_EVERY, FULL_RELIST_MAX_EVERY, next_full_every

    assert (FULL_RELIST_EVERY, FULL_RELIST_MAX_EVERY) == (6, 30)
    assert next_full_every(current, surprised=surprised) == expected


def _ev(kind):
    from edgelet.pleg import PodLifecycleEvent

    return PodLifecycleEvent("u1", kind, "c1")


@pytest.mark.parametrize(
    ("cause", "kinds", "expected"),
    [
        ("periodic", [], False),
        ("periodic", ["ContainerStarted"], False),  # the agent's own starts, seen first by this relist
        ("asked", [], False),  # an exit file whose death a sync's relist had already seen: nothing new
        ("between", ["ContainerStarted", "ContainerStarted"], False),  # containers the agent was starting
        # A death its exit file reported (a job done, a crash): known for what it is. A settled node's first full
        # relist came a minute after the bench's completed pod exited, in every idle window after a 40 s settle.
        ("asked", ["ContainerDied", "ContainerStarted"], False),
        ("periodic", ["ContainerDied"], True),  # a death no exit file told of
        ("between", ["ContainerDied"], True),
        ("asked", ["ContainerDied", "ContainerRemoved"], True),  # a removal
        ("periodic", ["ContainerStarted", "ContainerRemoved"], True),
        ("periodic", ["ContainerChanged"], True),
        ("gone", [], True),  # a process gone without an exit file (killed with its conmon)
    ],
)
def test_a_relist_surprises_with_what_nothing_told_the_agent(cause, kinds, expected):
    from edgelet.pleg import surprising

    assert surprising(cause, [_ev(k) for k in kinds]) is expected


def test_a_relist_serves_a_pods_state_only_when_it_asked_runc_after_the_given_time(tmp_path):
    import asyncio

    from edgelet.pleg import Pleg
    from edgelet.util.clock import FakeClock

    class _Runtime:
        async def list_pods(self):
            return {"u1": pod("u1", containers=(c("a", "running"),))}

    clock = FakeClock()
    pleg = Pleg(_Runtime(), tmp_path, clock=clock)
    assert pleg.status_newer_than("u1", 0.0) is None  # no relist yet
    before = clock.monotonic()
    clock.advance(1)
    asyncio.run(pleg.relist())
    assert pleg.status_newer_than("u1", before).containers[0].id == "a"
    assert pleg.status_newer_than("u2", before) == pod("u2")  # nothing of that pod: an empty status
    assert pleg.status_newer_than("u1", clock.monotonic()) is None  # a sync ended since it asked


# Which relist shows everything done before `since` (issue 25.2: a sync's after-state from the shared relist).
@pytest.mark.parametrize(
    ("since", "last_asked", "running", "started", "expected"),
    [
        (5.0, None, None, 0, 1),  # never relisted: the first one
        (5.0, 6.0, None, 3, None),  # the last one asked after: it serves, no wait
        (5.0, 5.0, None, 3, 4),  # asked at the same reading: the order is unknown, so not taken
        (5.0, 4.0, None, 3, 4),  # older: the next
        (5.0, 4.0, (4, 6.0), 4, 4),  # the running one asked after: wait for it
        (5.0, 4.0, (4, 5.0), 4, 5),  # the running one asked at the same reading: the one after it
        (5.0, 4.0, (4, 3.0), 4, 5),  # the running one asked before: the one after it
        (5.0, 7.0, (4, 8.0), 4, None),  # the last done serves already: not the running one
    ],
)
def test_which_relist_serves_a_state_newer_than_a_time(since, last_asked, running, started, expected):
    from edgelet.pleg import relist_needed

    assert relist_needed(since, last_asked, running, started) == expected


class _GatedRuntime:
    """list_pods waits until the test releases it (each call its own future); counts the calls."""

    def __init__(self) -> None:
        import asyncio

        self.waiting: list[asyncio.Future] = []
        self.pods: dict = {}

    async def list_pods(self):
        import asyncio

        fut = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        result = await fut
        if isinstance(result, Exception):
            raise result
        return dict(result)


async def _settle() -> None:
    import asyncio

    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.timeout(60)
def test_syncs_waiting_for_a_relist_share_one_that_started_after_their_changes(tmp_path):
    """A relist running when a sync asks may have read runc before the sync's changes: the sync waits for the
    next one, and every sync that asked meanwhile shares that one (one `runc list`, not one each)."""
    import asyncio

    from edgelet.pleg import Pleg
    from edgelet.util.clock import FakeClock

    async def main():
        rt = _GatedRuntime()
        clock = FakeClock()
        pleg = Pleg(rt, tmp_path, clock=clock)
        first = asyncio.ensure_future(pleg.pods_newer_than(clock.monotonic()))
        await _settle()
        assert len(rt.waiting) == 1
        # Two more syncs end their changes while that relist runs (the clock does not even move).
        later = [asyncio.ensure_future(pleg.pods_newer_than(clock.monotonic())) for _ in range(2)]
        await _settle()
        assert len(rt.waiting) == 1, "one relist at a time"
        rt.waiting[0].set_result({"u1": pod("u1", containers=(c("a", "running"),))})
        assert (await first)["u1"].containers[0].state == "running"
        await _settle()
        assert len(rt.waiting) == 2 and not any(t.done() for t in later), "the others wait for a newer relist"
        rt.waiting[1].set_result({"u1": pod("u1", containers=(c("a", "exited"),))})
        for t in later:
            assert (await t)["u1"].containers[0].state == "exited"
        assert len(rt.waiting) == 2
        # A relist that asked after a time serves it from the cache, without a wait.
        clock.advance(1)
        since = clock.monotonic()
        clock.advance(1)
        running = asyncio.ensure_future(pleg.relist())
        await _settle()
        waiter = asyncio.ensure_future(pleg.pods_newer_than(since))
        await _settle()
        assert len(rt.waiting) == 3, "the running relist asked after `since`: it serves, no other starts"
        rt.waiting[2].set_result({})
        await running
        assert await waiter == {}
        assert pleg.status_newer_than("u1", since) == pod("u1")
        assert await pleg.pods_newer_than(since) == {} and len(rt.waiting) == 3

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_a_failed_relist_fails_only_those_it_was_for(tmp_path):
    import asyncio

    from edgelet.container.errors import ExecError
    from edgelet.pleg import Pleg
    from edgelet.util.clock import FakeClock

    async def main():
        rt = _GatedRuntime()
        clock = FakeClock()
        pleg = Pleg(rt, tmp_path, clock=clock)
        first = asyncio.ensure_future(pleg.pods_newer_than(clock.monotonic()))
        await _settle()
        second = asyncio.ensure_future(pleg.pods_newer_than(clock.monotonic()))
        await _settle()
        rt.waiting[0].set_result(ExecError(["runc", "list"], 1, "injected"))
        with pytest.raises(ExecError):
            await first
        await _settle()
        assert len(rt.waiting) == 2, "the waiter of the next relist runs it"
        rt.waiting[1].set_result({"u1": pod("u1")})
        assert "u1" in await second
        # A waiter cancelled (its sync cut short) leaves the relist to the others.
        clock.advance(1)
        since = clock.monotonic() - 0.5  # after the last relist asked, before the next one asks
        a = asyncio.ensure_future(pleg.pods_newer_than(since))
        await _settle()
        b = asyncio.ensure_future(pleg.pods_newer_than(since))
        await _settle()
        a.cancel()
        await _settle()
        rt.waiting[2].set_result({"u2": pod("u2")})
        assert "u2" in await b

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_the_events_of_a_syncs_relist_reach_the_sync_loop(tmp_path):
    """A relist a sync asked for is PLEG's: its events go to the sync loop (sent once PLEG runs, if it did not
    yet), and the relist at start (adoption) sends none, as before."""
    import asyncio

    from edgelet.pleg import Pleg
    from edgelet.util.clock import FakeClock

    class _Runtime:
        def __init__(self):
            self.pods = {}

        async def list_pods(self):
            return dict(self.pods)

    async def main():
        rt = _Runtime()
        rt.pods = {"u0": pod("u0", containers=(c("z", "running", "u0"),))}
        clock = FakeClock()
        pleg = Pleg(rt, tmp_path, relist_period=3600, clock=clock)
        await pleg.adopt()
        rt.pods["u1"] = pod("u1", containers=(c("a", "running"),))
        await pleg.pods_newer_than(clock.monotonic())  # before PLEG runs: kept
        sent: list[set[str]] = []
        task = asyncio.create_task(pleg.run(sent.append))
        try:
            await _settle()
            assert sent[0] == {"u1"}, "adoption's events are not sent, a sync's are"
            rt.pods["u2"] = pod("u2", containers=(c("b", "running", "u2"),))
            await pleg.pods_newer_than(clock.monotonic())
            assert sent[-1] == {"u2"}
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
