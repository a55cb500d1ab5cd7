"""The descriptors between an exec session and `runc exec`: pipes, or a pty whose slave is runc's terminal, read
and written without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import struct
import subprocess
import termios
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgelet.streaming.remotecommand import ExecOptions

READ_SIZE = 32 * 1024


async def _wait_fd(fd: int, write: bool) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def read_fd(fd: int) -> bytes:
    """The next bytes of a non-blocking descriptor; b"" at EOF (EIO is a pty whose other side is gone)."""
    while True:
        try:
            return os.read(fd, READ_SIZE)
        except BlockingIOError:
            await _wait_fd(fd, False)
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""
            raise


async def write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
            view = view[n:]
        except BlockingIOError:
            await _wait_fd(fd, True)


@dataclass
class ExecIO:
    """The descriptors between the session and `runc exec`: pipes, or a pty whose slave is runc's terminal
    (runc makes it raw and relays it to the container's own pty, resizing that from it on SIGWINCH)."""

    child: tuple[int, int, int]  # runc's stdin, stdout, stderr
    stdin: int | None = None  # ours: write end (pipe) or the pty master
    stdout: int | None = None
    stderr: int | None = None
    master: int | None = None
    _mine: list[int] = field(default_factory=list)
    _theirs: list[int] = field(default_factory=list)

    @classmethod
    def open(cls, opts: ExecOptions) -> ExecIO:
        if opts.tty:
            master, slave = os.openpty()
            os.set_blocking(master, False)
            return cls(
                (slave, slave, slave),
                master if opts.stdin else None,
                master if opts.stdout else None,
                None,
                master,
                [master],
                [slave],
            )
        mine, theirs = [], []
        child = []
        ours: list[int | None] = []
        for wanted, ours_is_write in ((opts.stdin, True), (opts.stdout, False), (opts.stderr, False)):
            if not wanted:
                child.append(subprocess.DEVNULL)
                ours.append(None)
                continue
            r, w = os.pipe2(os.O_CLOEXEC)
            mine_fd, their_fd = (w, r) if ours_is_write else (r, w)
            os.set_blocking(mine_fd, False)
            mine.append(mine_fd)
            theirs.append(their_fd)
            child.append(their_fd)
            ours.append(mine_fd)
        return cls((child[0], child[1], child[2]), ours[0], ours[1], ours[2], None, mine, theirs)

    def close_theirs(self) -> None:
        for fd in self._theirs:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._theirs.clear()

    def close_stdin(self) -> None:
        """EOF to the command's stdin (pipes only: closing a pty master would hang the terminal up)."""
        if self.stdin is not None and self.master is None:
            with contextlib.suppress(OSError):
                os.close(self.stdin)
            self._mine.remove(self.stdin)
            self.stdin = None

    def resize(self, width: int, height: int) -> None:
        if self.master is not None:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))

    def close(self) -> None:
        self.close_theirs()
        for fd in self._mine:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._mine.clear()
