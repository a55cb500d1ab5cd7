"""How the runtime runs runc and conmon: to completion, with a timeout, and errors that carry the command and stderr.

Processes themselves are started by `edgelet.util.proc`.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from edgelet.container.errors import ExecError, ExecTimeout
from edgelet.container.types import Completed
from edgelet.util import proc as proc_


class Runner(Protocol):
    """The signature of `run`: what the runtime calls to run runc and conmon, so unit tests can script them."""

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = 30,
        input: bytes | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        pass_fds: Sequence[int] = (),
        daemonizes: bool = False,
        spawned: Callable[[int], None] | None = None,
    ) -> Completed: ...


async def run(
    argv: Sequence[str],
    *,
    timeout: float | None = 30,
    input: bytes | None = None,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    pass_fds: Sequence[int] = (),
    daemonizes: bool = False,
    spawned: Callable[[int], None] | None = None,
) -> Completed:
    """Run `argv` to completion and capture its output.

    Raises ExecError (with the command, exit code and stderr tail) when it exits
    non-zero and `check` is set, ExecTimeout after killing it when `timeout`
    passes. `env` replaces the environment; `pass_fds` are inherited by the child.

    `daemonizes`: the command forks a long-lived child (conmon) that may keep
    inherited stdio open, so its output goes to a temp file instead of pipes and
    only the direct child's exit is awaited (with pipes, waiting for EOF would
    wait for the daemon). `spawned` is called with the child's pid as soon as
    it runs (conmon's, while it waits on its start pipe).
    """
    argv = tuple(str(a) for a in argv)
    if daemonizes:
        return await _run_daemonizing(
            argv, timeout=timeout, check=check, env=env, cwd=cwd, pass_fds=pass_fds, spawned=spawned
        )
    try:
        proc = await proc_.spawn(
            argv, stdin=proc_.PIPE if input is not None else proc_.DEVNULL, env=env, cwd=cwd, pass_fds=pass_fds
        )
    except OSError as exc:
        raise ExecError(argv, None, message=f"cannot start: {exc}") from exc
    if spawned is not None:
        spawned(proc.pid)
    try:
        async with asyncio.timeout(timeout):
            stdout, stderr = await proc.communicate(input)
    except TimeoutError as exc:
        await _kill(proc)
        raise ExecTimeout(argv, timeout or 0.0) from exc
    except asyncio.CancelledError:
        # Shutdown: do not leave a half-finished runc/conmon invocation behind us.
        await _kill(proc)
        raise
    assert proc.returncode is not None
    done = Completed(argv, proc.returncode, stdout, stderr)
    if check and proc.returncode != 0:
        raise ExecError(argv, proc.returncode, stderr or stdout)
    return done


async def start(argv: Sequence[str], *, stdin: int, stdout: int, stderr: int) -> asyncio.subprocess.Process:
    """Start `argv` on the given descriptors and return at once (an interactive `runc exec`: the caller waits,
    signals and kills it); ExecError when it cannot start."""
    argv = tuple(str(a) for a in argv)
    try:
        return await proc_.spawn(argv, stdin=stdin, stdout=stdout, stderr=stderr)
    except OSError as exc:
        raise ExecError(argv, None, message=f"cannot start: {exc}") from exc


async def _run_daemonizing(argv, *, timeout, check, env, cwd, pass_fds, spawned) -> Completed:
    with tempfile.TemporaryFile() as out:
        try:
            proc = await proc_.spawn(argv, stdout=out, stderr=out, env=env, cwd=cwd, pass_fds=pass_fds)
        except OSError as exc:
            raise ExecError(argv, None, message=f"cannot start: {exc}") from exc
        if spawned is not None:
            spawned(proc.pid)
        try:
            async with asyncio.timeout(timeout):
                await proc.wait()
        except TimeoutError as exc:
            await _kill(proc)
            raise ExecTimeout(argv, timeout or 0.0) from exc
        except asyncio.CancelledError:
            await _kill(proc)
            raise
        out.seek(0)
        output = out.read(64 * 1024)
    assert proc.returncode is not None
    if check and proc.returncode != 0:
        raise ExecError(argv, proc.returncode, output)
    return Completed(argv, proc.returncode, b"", output)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    # Reap it (and close its pipes) so no zombie or ResourceWarning is left.
    await asyncio.shield(proc.wait())
