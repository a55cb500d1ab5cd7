"""Launching a container under conmon: the pure argv builder and the create handshake over conmon's sync pipe.

conmon double-forks (so the container's monitor outlives edgelet), runs
`runc create`, then reports on the pipe named by `_OCI_SYNCPIPE` one JSON
line: `{"data": <container pid>}` on success, `{"data": -1, "message":
"<runc stderr>"}` on failure (or nothing, and EOF, when conmon itself dies).
It then holds the container's stdio, writes the CRI-format log
(`k8s-file`), and on exit writes the exit code (128+signal when killed by a
signal) to `<exit-dir>/<id>` and to `<persist-dir>/exit`; an OOM kill leaves
a file `oom` in the persist dir.

While it runs, conmon reads control messages from the FIFO `ctl` in the
bundle dir, one line each, `<type> <height> <width>`; type 2 makes it reopen
its log file (it creates `<log>.tmp` and renames it over the log path), as
CRI-O's ReopenContainerLog asks after renaming the log away. With
`--log-size-max` conmon does the same by itself whenever it has written that
many bytes since its last own cut, dropping what the file held.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgelet.container.errors import CreateContainerError, ExecError, stderr_tail
from edgelet.runtime import _exec
from edgelet.util.crashpoint import crash_point

PIDFILE = "pidfile"
CONMON_PIDFILE = "conmon.pid"
CONTROL_FIFO = "ctl"
REOPEN_LOG_MESSAGE = b"2 0 0\n"  # conmon's REOPEN_LOGS_EVENT; height and width are unused but required


@dataclass(frozen=True)
class ConmonArgs:
    conmon: str
    runtime: str  # absolute path of runc: conmon execs it directly
    runtime_root: Path
    container_id: str
    name: str
    bundle: Path
    log_path: Path  # "/dev/null" is allowed
    exit_dir: Path
    socket_dir: Path
    log_level: str = "error"
    log_size_max: int | None = None
    # A container with `stdin: true`: conmon holds its stdin open for `kubectl attach -i` (as CRI-O does), and
    # closes it when the first attached client goes, unless `stdinOnce` is false.
    stdin: bool = False
    stdin_once: bool = False
    terminal: bool = False  # `tty: true`: conmon makes the console (runc needs its socket) and relays it
    # A descriptor conmon inherits that `runtime` names (/proc/self/fd/<n>: the runtime's sealed copy).
    runtime_fd: int | None = None


def conmon_argv(a: ConmonArgs) -> list[str]:
    """The conmon command line (runtime args are global runc flags, placed before `create`)."""
    argv = [
        a.conmon,
        "--api-version",
        "1",
        "-c",
        a.container_id,
        "-u",
        a.container_id,
        "-n",
        a.name,
        "-r",
        a.runtime,
        "--runtime-arg",
        "--root",
        "--runtime-arg",
        str(a.runtime_root),
        "-b",
        str(a.bundle),
        "-p",
        str(a.bundle / PIDFILE),
        "--conmon-pidfile",
        str(a.bundle / CONMON_PIDFILE),
        "-l",
        f"k8s-file:{a.log_path}",
        "--exit-dir",
        str(a.exit_dir),
        # The persist dir gets `exit` and `oom` files next to the bundle, so an OOM kill is visible.
        "--persist-dir",
        str(a.bundle),
        "--socket-dir-path",
        str(a.socket_dir),
        "--log-level",
        a.log_level,
    ]
    if a.log_size_max is not None:
        argv += ["--log-size-max", str(a.log_size_max)]
    if a.terminal:
        argv.append("--terminal")
    if a.stdin:
        argv += ["--stdin"] + ([] if a.stdin_once else ["--leave-stdin-open"])
    return argv


def resize_message(width: int, height: int) -> bytes:
    """conmon's control-FIFO resize of a `tty: true` container's console (RESIZE_EVENT, height, width)."""
    return f"1 {height} {width}\n".encode()


def parse_sync_message(line: bytes) -> tuple[int, str]:
    """(data, message) of one sync-pipe line; raises ValueError when it is not conmon's JSON."""
    doc = json.loads(line)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), int):
        raise ValueError(f"unexpected conmon sync message: {line[:200]!r}")
    return doc["data"], str(doc.get("message", ""))


def open_control(bundle: Path) -> int | None:
    """A write end of conmon's control FIFO, or None when no conmon reads it (exited, or never made it).

    Non-blocking: opening a FIFO nobody reads fails at once (ENXIO) instead of
    waiting, which is also how a live conmon is told from a dead one.
    """
    try:
        return os.open(bundle / CONTROL_FIFO, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return None
        raise


def request_log_reopen(fd: int) -> None:
    """Ask the conmon behind `fd` (from open_control) to reopen its log file (one atomic FIFO write)."""
    os.write(fd, REOPEN_LOG_MESSAGE)


def read_pidfile(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def conmon_pid(bundle: Path) -> int | None:
    return read_pidfile(bundle / CONMON_PIDFILE)


def is_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it no longer runs.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def kill_conmon(bundle: Path) -> None:
    """SIGKILL the conmon of a bundle (only used to undo a failed create)."""
    pid = conmon_pid(bundle)
    if pid and is_alive(pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return
        # Guard against pid reuse: only kill a conmon that names this bundle.
        if str(bundle).encode() in cmdline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


async def create(
    a: ConmonArgs,
    *,
    timeout: float = 30,
    runner: _exec.Runner = _exec.run,
    start: asyncio.Future[Any] | None = None,
    on_spawn: Callable[[int], Awaitable[None]] | None = None,
) -> int:
    """Start conmon, which runs `runc create`; returns the container's pid once runc created it.

    On failure raises CreateContainerError with runc's stderr; the caller undoes the rest.

    `start`: the caller is still finishing the bundle (its config.json). conmon is started at once and waits
    on its start pipe (`_OCI_STARTPIPE`, read before it forks anything) until `start` is done, so its own
    start-up (exec, libraries, options) overlaps that work. If `start` fails, that conmon is killed before it
    did anything and `start`'s exception is raised.

    `on_spawn` (with `start`): awaited with that waiting conmon's pid, beside `start`; conmon goes on once both
    ended. What it does to conmon (its move into the pod's cgroup) then holds for everything conmon forks.
    """
    r, w = os.pipe()
    env = {**os.environ, "_OCI_SYNCPIPE": str(w)}
    fds = [w] if a.runtime_fd is None else [w, a.runtime_fd]
    gate_r = gate_w = -1
    if start is not None:
        gate_r, gate_w = os.pipe()
        env["_OCI_STARTPIPE"] = str(gate_r)
        fds.append(gate_r)
    argv = conmon_argv(a)
    first_pid: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def spawned(pid: int) -> None:
        if not first_pid.done():
            first_pid.set_result(pid)

    try:
        # The first conmon exits at once after forking the monitor (after the start pipe says go).
        run = asyncio.ensure_future(
            runner(
                argv,
                timeout=timeout,
                env=env,
                cwd=a.bundle,
                pass_fds=tuple(fds),
                daemonizes=True,
                spawned=spawned if on_spawn is not None else None,
            )
        )
        beside = None
        if start is not None and on_spawn is not None:
            beside = asyncio.ensure_future(_beside(start, run, first_pid, on_spawn))
        try:
            if start is not None:
                await _open_gate(run, beside or start, gate_w)
            await run
        finally:
            for task in (run, beside):
                if task is not None and not task.done():
                    task.cancel()  # conmon is killed before it forked; `start` stays the caller's
            await asyncio.gather(run, *([beside] if beside is not None else []), return_exceptions=True)
            # Only now: a conmon still waiting would read the end of its start pipe as a go.
            for fd in (w, gate_r, gate_w):
                if fd >= 0:
                    os.close(fd)
        crash_point("conmon.answer")
        async with asyncio.timeout(timeout):
            line = await _read_line(r)
    except ExecError as exc:
        raise CreateContainerError(f"conmon for {a.name} ({a.container_id[:12]}) failed: {exc}") from exc
    except TimeoutError as exc:
        raise CreateContainerError(
            f"conmon for {a.name} ({a.container_id[:12]}): no answer from runc create within {timeout:g}s"
        ) from exc
    finally:
        os.close(r)
    if not line:
        raise CreateContainerError(f"conmon for {a.name} ({a.container_id[:12]}) exited without creating the container")
    try:
        pid, message = parse_sync_message(line)
    except ValueError as exc:
        raise CreateContainerError(f"conmon for {a.name}: {exc}") from exc
    if pid <= 0:
        raise CreateContainerError(f"runc create {a.name} ({a.container_id[:12]}) failed: {stderr_tail(message)}")
    return pid


async def _beside(
    start: asyncio.Future[Any],
    run: asyncio.Future[Any],
    pid: asyncio.Future[int],
    on_spawn: Callable[[int], Awaitable[None]],
) -> None:
    """`start`, with `on_spawn(conmon's pid)` beside it once conmon runs (not when conmon ended first: it could
    not start, and awaiting it says why); the first failure of the two is raised once both ended."""
    await asyncio.wait({run, pid}, return_when=asyncio.FIRST_COMPLETED)
    joining = asyncio.ensure_future(on_spawn(pid.result())) if pid.done() else None
    try:
        await asyncio.shield(start)  # the caller's work: a cancelled create leaves it to the caller
    finally:
        if joining is not None:
            await joining


async def _open_gate(run: asyncio.Future[Any], start: asyncio.Future[Any], gate_w: int) -> None:
    """Wait for `start` (raising what it raises) while conmon starts up, then tell conmon to go on. A conmon
    that exits before (it could not start) is let through: awaiting it raises its error."""
    await asyncio.wait({run, start}, return_when=asyncio.FIRST_COMPLETED)
    if not start.done():
        await asyncio.gather(start, return_exceptions=True)  # the caller's work ends; conmon's error wins
        return
    start.result()
    if not run.done():
        os.write(gate_w, b"1")


async def _read_line(fd: int) -> bytes:
    """One line from the sync pipe without blocking the loop; b"" on EOF."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    # Duplicate so the transport can own (and close) its own fd; the caller closes `fd`.
    pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        return await reader.readline()
    finally:
        transport.close()
