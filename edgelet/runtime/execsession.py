"""Interactive `runc exec` sessions (`edgelet exec`): the container's own process spec with the user's command,
run with the client's stdio, signalled and reaped by the agent.

The process spec is the `process` section of the container's bundle
`config.json` (env, user, cwd, capabilities, rlimits, apparmor profile,
no_new_privileges, oom score), given to `runc exec --process`, so what runs
is confined exactly as the container is; runc applies the container's
seccomp filter and namespaces itself. With a terminal, runc makes the pty,
relays it to the stdio it was given (the client's terminal, passed over the
local socket) and resizes it from that terminal on SIGWINCH. The spec carries
that terminal's size as `consoleSize`, so runc sizes the pty before the command
starts: runc's own first resize comes only after the command runs, and a shell
reading already-typed input could otherwise see a 0x0 terminal (busybox
`stty size` then fails with a stale errno such as "No child processes").
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import fcntl
import os
import signal
import struct
import termios
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgelet.container.errors import RuntimeError_

# Signals a client may forward to its command: what a terminal user sends, never SIGKILL/SIGSTOP of runc itself.
FORWARDABLE = frozenset(
    {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH, signal.SIGUSR1, signal.SIGUSR2}
)
KILL_WAIT = 10.0  # after SIGKILL of the command, runc exec is due to exit within this


class ExecSessionError(RuntimeError_):
    """An exec session could not start: no bundle, no process spec, runc missing."""


def build_exec_process(
    process: Mapping[str, Any], argv: Sequence[str], *, tty: bool, size: tuple[int, int] | None = None
) -> dict[str, Any]:
    """The container's process spec running `argv` instead, with a terminal when asked (TERM=xterm unless set,
    as containerd's exec does) of the client's `size` (width, height) when known; everything else is the
    container's."""
    if not argv:
        raise ExecSessionError("no command to run")
    spec = copy.deepcopy(dict(process))
    spec["args"] = [str(a) for a in argv]
    spec["terminal"] = tty
    spec.pop("consoleSize", None)  # the container's own, not the client's
    if tty and size is not None and size[0] > 0 and size[1] > 0:
        # runc sizes the pty before the command starts; 0x0 (no size known) would be ignored by runc anyway.
        spec["consoleSize"] = {"width": size[0], "height": size[1]}
    if tty:
        env = list(spec.get("env") or [])
        if not any(e.startswith("TERM=") for e in env):
            env.append("TERM=xterm")
        spec["env"] = env
    return spec


def copy_winsize(runtime_pid: int, command_pid: int) -> None:
    """Give the command's terminal (its stdin, the pty the runtime made inside the container) the size of the
    runtime's own (the client's terminal). Both are reached through /proc: the agent keeps no descriptor of
    either. Setting the size sends the command's foreground process group its SIGWINCH."""
    fd = os.open(f"/proc/{runtime_pid}/fd/0", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        size = fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(8))
    finally:
        os.close(fd)
    fd = os.open(f"/proc/{command_pid}/fd/0", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, size)
    finally:
        os.close(fd)


def terminal_size(fd: int) -> tuple[int, int] | None:
    """The (width, height) of the terminal `fd`; None when it is no terminal."""
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(8)))
    except OSError:
        return None
    return cols, rows


@dataclass
class ExecSession:
    """A running `runc exec`: its pid (runc's), the pid file naming the command inside the container."""

    process: asyncio.subprocess.Process
    pid_file: Path
    process_file: Path
    # The runtime does not resize the command's pty on SIGWINCH (crun 1.8's foreground terminal): the session
    # copies the size of the runtime's terminal to the command's itself.
    copy_winsize: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, signum: int) -> None:
        """Send `signum` to runc, which forwards it to the command (or resizes the pty on SIGWINCH)."""
        if signum not in FORWARDABLE:
            raise ExecSessionError(f"signal {signum} may not be forwarded")
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signum)
        if signum == signal.SIGWINCH and self.copy_winsize:
            with contextlib.suppress(OSError, ValueError):
                copy_winsize(self.process.pid, int(self.pid_file.read_text().strip()))

    async def wait(self) -> int:
        """The command's exit code as runc reports it (128+N when killed by signal N)."""
        code = await self.process.wait()
        self._cleanup()  # not on cancellation: `kill` still needs the pid file
        return code

    async def kill(self) -> None:
        """The client went away: SIGKILL the command in the container (killing runc alone would leave it
        running), then runc, and reap."""
        try:
            pid = int(self.pid_file.read_text().strip())
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass
        try:
            async with asyncio.timeout(KILL_WAIT):
                await self.process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        self.pid_file.unlink(missing_ok=True)
        self.process_file.unlink(missing_ok=True)
