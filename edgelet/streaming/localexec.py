"""The agent's side of `edgelet exec`: one session on the upgraded local socket, from hello to exit.

The protocol is described in `edgelet.streaming.execproto`; the command itself
is started by the runtime (`RuncRuntime.start_exec`), handed in as a
callable so this module starts no process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from edgelet.errors import EdgeletError
from edgelet.streaming import execproto as proto
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.runtime.execsession import ExecSession

log = get_logger(__name__)

HELLO_TIMEOUT = 10.0  # an upgraded connection that sends no hello within this is dropped


class StartExec(Protocol):
    def __call__(
        self, container_id: str, argv: Sequence[str], *, tty: bool, stdin: int, stdout: int, stderr: int
    ) -> Awaitable[ExecSession]: ...


async def serve_session(sock: socket.socket, container_id: str, start: StartExec, what: str) -> None:
    """One exec session on the upgraded `sock`: hello with descriptors, start, control lines, exit."""
    loop = asyncio.get_running_loop()
    buffer = proto.LineBuffer()
    try:
        async with asyncio.timeout(HELLO_TIMEOUT):
            lines, fds = await proto.recv_with_fds(sock, buffer)
    except (TimeoutError, proto.ProtocolError, OSError) as exc:
        log.warning("Exec session dropped before its hello", target=what, err=str(exc) or type(exc).__name__)
        return
    try:
        hello = proto.decode_hello(lines[0])
        if len(fds) != proto.FDS:
            raise proto.ProtocolError(f"the hello carried {len(fds)} descriptors, expected {proto.FDS}")
        session = await start(
            container_id,
            hello.command,
            tty=hello.tty,
            stdin=fds[0] if hello.stdin else subprocess.DEVNULL,
            stdout=fds[1],
            stderr=fds[2],
        )
    except (proto.ProtocolError, EdgeletError) as exc:
        with contextlib.suppress(OSError):
            await loop.sock_sendall(sock, proto.encode(proto.Message(error=str(exc))))
        return
    finally:
        for fd in fds:  # runc has its own copies now; the agent keeps none of the client's terminal
            with contextlib.suppress(OSError):
                os.close(fd)
    log.info("Exec session started", target=what, command=hello.command[0], tty=hello.tty, pid=session.pid)
    pending = lines[1:]
    waiter = asyncio.ensure_future(session.wait())
    try:
        code = await _relay(sock, session, waiter, buffer, pending)
    except BaseException:
        waiter.cancel()
        await session.kill()
        raise
    if code is None:
        log.info("Exec client went away; command killed", target=what)
        return
    log.info("Exec session ended", target=what, exit_code=code)
    with contextlib.suppress(OSError):
        await loop.sock_sendall(sock, proto.encode(proto.Message(exit=code)))


async def _relay(
    sock: socket.socket,
    session: ExecSession,
    waiter: asyncio.Future[int],
    buffer: proto.LineBuffer,
    pending: list[bytes],
) -> int | None:
    """Apply the client's control lines until the command exits (its code) or the client hangs up (None,
    the command killed)."""
    loop = asyncio.get_running_loop()
    for line in pending:
        _apply(session, line)
    while True:
        reader: asyncio.Future[bytes] = asyncio.ensure_future(loop.sock_recv(sock, 4096))
        futures: list[asyncio.Future[Any]] = [reader, waiter]
        done, _ = await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
        if waiter in done:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            return waiter.result()
        try:
            data = reader.result()
        except OSError:
            data = b""
        try:
            lines = buffer.feed(data) if data else None
        except proto.ProtocolError:
            lines = None
        if lines is None:
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
            await session.kill()
            return None
        for line in lines:
            _apply(session, line)


def _apply(session: ExecSession, line: bytes) -> None:
    try:
        msg = proto.decode_message(line)
        if msg.signal is not None:
            session.signal(msg.signal)
    except (proto.ProtocolError, EdgeletError) as exc:
        log.warning("Exec control line ignored", err=str(exc))
