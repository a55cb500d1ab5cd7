"""The subprocess runner: output, errors with context, timeouts (real processes, no root needed)."""

from __future__ import annotations

import asyncio

import pytest

from edgelet.container.errors import ExecError, ExecTimeout
from edgelet.runtime._exec import run


def test_run_captures_output_and_input() -> None:
    done = asyncio.run(run(["sh", "-c", "cat; echo err >&2"], input=b"hello"))
    assert (done.returncode, done.stdout, done.stderr) == (0, b"hello", b"err\n")


def test_failure_carries_command_code_and_stderr_tail() -> None:
    with pytest.raises(ExecError) as info:
        asyncio.run(run(["sh", "-c", "for i in 1 2 3 4 5 6 7; do echo line$i >&2; done; exit 4"]))
    err = info.value
    assert err.returncode == 4 and err.argv[0] == "sh"
    assert "line7" in err.stderr and "line1" not in err.stderr


def test_no_check_returns_the_code() -> None:
    assert asyncio.run(run(["sh", "-c", "exit 5"], check=False)).returncode == 5


def test_missing_binary_is_an_exec_error() -> None:
    with pytest.raises(ExecError, match="cannot start"):
        asyncio.run(run(["/nonexistent/binary"]))


def test_timeout_kills_the_process() -> None:
    async def go() -> None:
        with pytest.raises(ExecTimeout) as info:
            await run(["sleep", "30"], timeout=0.1)
        assert info.value.timeout == 0.1

    asyncio.run(go())


def test_cancellation_kills_the_process_and_propagates() -> None:
    async def go() -> None:
        task = asyncio.create_task(run(["sleep", "30"], timeout=None))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
