"""PLEG's exit-dir watch wakes on conmon's exit files, and never on its own reads of them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from edgelet.container.types import PodRuntimeStatus
from edgelet.pleg import Pleg


class ReadingRuntime:
    """A runtime whose list reads every exit file, as RuncRuntime's does."""

    def __init__(self, exit_dir: Path) -> None:
        self.exit_dir = exit_dir
        self.lists = 0

    async def list_pods(self) -> dict[str, PodRuntimeStatus]:
        self.lists += 1
        for f in self.exit_dir.iterdir():
            f.read_text()
        await asyncio.sleep(0.01)  # as runc list takes a moment: the loop runs meanwhile
        return {}


@pytest.mark.timeout(120)  # a self-waking watch spins: fail instead of hanging the suite
def test_own_reads_do_not_wake_pleg_but_a_new_exit_file_does(tmp_path: Path) -> None:
    exits = tmp_path / "exits"
    exits.mkdir()
    (exits / "c1").write_text("0")  # an exited container's file, read by every relist

    async def main() -> tuple[int, int]:
        rt = ReadingRuntime(exits)
        pleg = Pleg(rt, exits, relist_period=3600)
        task = asyncio.create_task(pleg.run(lambda uids: None))
        try:
            await asyncio.wait_for(pleg.relisted.wait(), 60)
            await asyncio.sleep(0.5)  # a self-waking watch would relist hundreds of times meanwhile
            quiet = rt.lists
            pleg.relisted.clear()
            (exits / "c2").write_text("137")
            # A bound, not a timing assertion: inotify wakes PLEG in milliseconds, but a loaded
            # machine has been seen to take over 10 s.
            await asyncio.wait_for(pleg.relisted.wait(), 60)
            return quiet, rt.lists
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    quiet, after = asyncio.run(main())
    assert quiet == 1, f"PLEG relisted {quiet} times with nothing changing"
    assert after > quiet


@pytest.mark.timeout(120)
def test_a_cancel_that_lands_with_a_wake_still_stops_pleg(tmp_path: Path) -> None:
    """Python 3.11's wait_for swallowed a cancellation that arrived as its wait completed: PLEG then
    went on relisting after shutdown (and the test above hung in its teardown)."""
    exits = tmp_path / "exits"
    exits.mkdir()

    async def main() -> bool:
        rt = ReadingRuntime(exits)
        pleg = Pleg(rt, exits, relist_period=3600)
        task = asyncio.create_task(pleg.run(lambda uids: None))
        await asyncio.wait_for(pleg.relisted.wait(), 60)
        await asyncio.sleep(0.05)  # PLEG waits for its next wake
        pleg.kick()  # the wake and the cancellation land in the same loop iteration
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=30)
        return bool(done) and task.cancelled()

    assert asyncio.run(main()), "PLEG kept running after it was cancelled"
