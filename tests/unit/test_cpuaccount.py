"""The event loop's CPU account: which subsystem a callback, a task's children and its to_thread work are
charged to, `charged` stretches moved out of their callback, wakeups counted, nothing when not installed."""

from __future__ import annotations

import asyncio

import pytest

from edgelet.util import cpuaccount
from edgelet.util.cpuaccount import AccountedExecutor, AccountedLoop, charged, subsystem_of


@pytest.mark.parametrize(
    "name, expected",
    [
        ("pleg", "pleg"),
        ("mirror-lease", "mirror-lease"),
        ("pod-worker-0b1c", "pod-worker"),
        ("rollout-write-default/web", "rollout-write"),
        ("source-file-2", "source-file"),
        ("Task-12", None),  # unnamed: its creator's line
    ],
)
def test_subsystem_of_a_task_name(name, expected):
    assert subsystem_of(name) == expected


@pytest.fixture
def account():
    acc = cpuaccount.install()
    yield acc
    cpuaccount.uninstall()


def _burn() -> int:
    return sum(i * i for i in range(2000))


def test_callbacks_children_and_thread_work_are_charged_to_their_task(account):
    async def child() -> None:
        _burn()

    async def pleg() -> None:
        _burn()
        await asyncio.create_task(child())  # unnamed: charged to pleg
        await asyncio.to_thread(_burn)
        with charged("gates"):
            _burn()

    async def worker() -> None:
        await asyncio.sleep(0.05)  # a timer: the loop sleeps, then wakes

    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(AccountedExecutor(max_workers=1))
        await asyncio.gather(
            asyncio.create_task(pleg(), name="pleg"),
            asyncio.create_task(worker(), name="pod-worker-uid1"),
            asyncio.create_task(worker(), name="pod-worker-uid2"),
        )

    with asyncio.Runner(loop_factory=AccountedLoop) as runner:
        runner.run(main())
    snap = account.snapshot()
    lines = snap["subsystems"]
    assert isinstance(lines, dict)
    assert lines["pleg"]["calls"] >= 3  # its steps, and its child's
    assert lines["pleg (thread)"]["calls"] == 1
    assert lines["gates"]["calls"] == 1
    assert lines["pod-worker"]["calls"] >= 4  # both workers, two steps each: one line per family
    assert "Task-1" not in lines and "other" in lines  # the main task keeps no line of its own
    assert all(v["cpu"] >= 0 for v in lines.values())
    assert isinstance(snap["wakeups"], int) and snap["wakeups"] >= 1
    assert set(snap) == {"wakeups", "loop_cpu", "process_cpu", "subsystems"}


def test_a_charged_stretch_leaves_its_callback(account):
    """The CPU of a `charged` stretch is the stretch's line's alone: its callback's line keeps the rest."""

    async def syncloop() -> None:
        with charged("gates"):
            for _ in range(50):
                _burn()

    async def main() -> None:
        await asyncio.create_task(syncloop(), name="syncloop")

    with asyncio.Runner(loop_factory=AccountedLoop) as runner:
        runner.run(main())
    assert account.lines["gates"].calls == 1 and account.lines["syncloop"].calls == 1
    assert account.lines["syncloop"].cpu < account.lines["gates"].cpu


def test_nothing_is_counted_without_an_account():
    assert cpuaccount.current() is None

    async def main() -> None:
        with charged("gates"):
            await asyncio.to_thread(_burn)

    with asyncio.Runner(loop_factory=AccountedLoop) as runner:
        runner.run(main())
    assert cpuaccount.current() is None
