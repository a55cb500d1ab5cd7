"""util/proc's child watcher: children spawned from any loop are reaped with their exit codes, none left over."""

from __future__ import annotations

import asyncio
import os

from edgelet.util import proc


async def _codes() -> list[int | None]:
    ps = [await proc.spawn(["sh", "-c", f"exit {n}"]) for n in (0, 3, 7)]
    await asyncio.gather(*(p.communicate() for p in ps))
    return [p.returncode for p in ps]


def test_exit_codes_from_several_loops_and_no_zombies() -> None:
    # asyncio.run makes a new loop each time: the watcher must follow whichever loop spawned the child.
    for _ in range(3):
        assert asyncio.run(_codes()) == [0, 3, 7]
    try:
        assert os.waitpid(-1, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        pass  # no children at all


def test_a_killed_child_reports_its_signal() -> None:
    async def main() -> int | None:
        p = await proc.spawn(["sleep", "30"])
        p.kill()
        await p.wait()
        return p.returncode

    assert asyncio.run(main()) == -9
