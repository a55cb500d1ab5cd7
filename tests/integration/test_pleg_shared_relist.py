"""PLEG's shared relist over real runc: the after-state of several syncs from one `runc list`, and a container
that exits right after its start seen by that relist or PLEG's next one (issue 25.2)."""

from __future__ import annotations

import asyncio

from edgelet.pleg import Pleg
from edgelet.runtime.runc_runtime import RuncRuntime
from edgelet.util.clock import REAL_CLOCK
from tests.integration.test_runtime_runc import _assert_pod_gone, _c, _pod, _run, aio


def _count_lists(rt: RuncRuntime) -> list[int]:
    """How many `runc list` the runtime runs from now on (one element per list)."""
    lists: list[int] = []
    real = rt.runc._list_now

    async def counted():
        lists.append(1)
        return await real()

    rt.runc._list_now = counted  # type: ignore[method-assign]
    return lists


@aio
async def test_syncs_that_end_together_read_their_after_state_from_one_runc_list(rt: RuncRuntime, busybox) -> None:
    pods = [_pod(f"shared{i}", [_c("app", "sleep", "300")]) for i in range(3)]
    pleg = Pleg(rt, rt.paths.exit_dir, relist_period=3600, clock=REAL_CLOCK)
    try:
        await pleg.adopt()
        for p in pods:
            await _run(rt, p, busybox, p.spec.containers[0])
        ended = REAL_CLOCK.monotonic()  # the three "syncs" made their changes before this
        lists = _count_lists(rt)
        seen = await asyncio.gather(*(pleg.pods_newer_than(ended) for _ in pods))
        assert len(lists) == 1, f"{len(lists)} runc lists for three after-states"
        for view in seen:
            for p in pods:
                assert [c.state for c in view[p.metadata.uid].containers] == ["running"]
        # PLEG's cache is that relist: the next syncs' before-state, no list of their own.
        assert all(pleg.status_newer_than(p.metadata.uid, ended) is not None for p in pods)
        assert len(lists) == 1
    finally:
        for p in pods:
            await rt.remove_pod(p.metadata.uid)
    for p in pods:
        _assert_pod_gone(rt, p.metadata.uid)


@aio
async def test_a_container_that_exits_right_after_its_start_is_seen(rt: RuncRuntime, busybox) -> None:
    """Whether the sync's relist saw it running or already exited, PLEG's exit-file watch relists once conmon
    records the exit, and the sync loop hears of the pod."""
    pod = _pod("quick", [_c("quick", "sh", "-c", "exit 3")])
    uid = pod.metadata.uid
    pleg = Pleg(rt, rt.paths.exit_dir, relist_period=3600, clock=REAL_CLOCK)
    woken: list[set[str]] = []
    await pleg.adopt()
    task = asyncio.create_task(pleg.run(woken.append))
    try:
        await _run(rt, pod, busybox, pod.spec.containers[0])
        after = (await pleg.pods_newer_than(REAL_CLOCK.monotonic()))[uid]
        assert after.latest("quick") is not None and after.latest("quick").state in ("running", "exited")
        deadline = REAL_CLOCK.monotonic() + 60  # a bound, not a timing assertion
        while REAL_CLOCK.monotonic() < deadline:
            c = pleg.pods().get(uid) and pleg.pods()[uid].latest("quick")
            if c and c.state == "exited" and c.exit_code == 3:
                break
            await asyncio.sleep(0.05)
        c = pleg.pods()[uid].latest("quick")
        assert c is not None and (c.state, c.exit_code) == ("exited", 3)
        assert any(uid in uids for uids in woken), "the sync loop was told of the pod"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await rt.remove_pod(uid)
    _assert_pod_gone(rt, uid)
