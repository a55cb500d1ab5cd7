"""One `kubectl exec` session, over SPDY streams or WebSocket channels: `runc exec` on pipes or a pty, the copying
between it and the streams, and its exit status on the error stream.

The command is started by the runtime's `start_exec` (the same `runc exec`
with the container's process spec that `edgelet exec` uses), handed in as a
callable. Every session ends with its process killed and reaped and its
descriptors closed, whichever side ends it (the command exits, the client
goes, the agent stops: `SpdyConnection.run` cancels the session).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from edgelet.errors import EdgeletError
from edgelet.streaming import spdy
from edgelet.streaming._execio import ExecIO, read_fd, write_fd
from edgelet.streaming.remotecommand import (
    STREAM_CREATION_TIMEOUT,
    Channel,
    ExecOptions,
    ResizeDecoder,
    error_stream_body,
    session_streams,
)
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.runtime.execsession import ExecSession
    from edgelet.streaming.localexec import StartExec
    from edgelet.util.clock import Clock

log = get_logger(__name__)

OUTPUT_DRAIN = 5.0  # after the command exits, what it (or a child holding its stdout) still writes, at most this
FIRST_RESIZE_WAIT = 5.0  # for the terminal's size before the command starts (kubectl sends it at once)


async def serve_exec(
    conn: spdy.SpdyConnection,
    *,
    opts: ExecOptions,
    protocol: str,
    container_id: str,
    start: StartExec,
    clock: Clock,
    what: str,
    creation_timeout: float = STREAM_CREATION_TIMEOUT,
) -> None:
    """One `kubectl exec` session over SPDY: its streams, then `run_exec`."""
    streams = await session_streams(
        conn, opts, protocol, clock, creation_timeout, what, "Exec session without its streams"
    )
    if streams is not None:
        await run_exec(streams, opts=opts, protocol=protocol, container_id=container_id, start=start, what=what)


async def run_exec(
    streams: Mapping[str, Channel], *, opts: ExecOptions, protocol: str, container_id: str, start: StartExec, what: str
) -> None:
    """`runc exec`, the copying between it and the streams (`error` and those `opts` asks for), and the exit
    status on the error stream."""
    error = streams["error"]
    stopping = False
    io = ExecIO.open(opts)
    session: ExecSession | None = None
    tasks: list[asyncio.Future[Any]] = []
    decoder = ResizeDecoder()
    try:
        if "resize" in streams:
            # kubectl sends the terminal's size first: on the pty before runc starts, where the runtime reads it
            # into the process spec, so the command starts with it (a SIGWINCH before runc handles it is lost).
            with contextlib.suppress(TimeoutError):
                first = await asyncio.wait_for(streams["resize"].read(), FIRST_RESIZE_WAIT)
                for width, height in decoder.feed(first):
                    with contextlib.suppress(OSError):
                        io.resize(width, height)
        try:
            session = await start(
                container_id, opts.command, tty=opts.tty, stdin=io.child[0], stdout=io.child[1], stderr=io.child[2]
            )
        except EdgeletError as exc:
            log.info("Exec session could not start its command", target=what, err=str(exc))
            await error.write(error_stream_body(protocol, opts.command, None, str(exc)))
            await error.close()
            return
        finally:
            io.close_theirs()  # runc has its own copies; ours would hold the pipes open past its exit
        log.info(
            "Exec session started",
            target=what,
            command=opts.command[0],
            tty=opts.tty,
            pid=session.pid,
            protocol=protocol,
        )
        outputs = [
            asyncio.ensure_future(_pump_out(fd, streams[name]))
            for name, fd in (("stdout", io.stdout), ("stderr", io.stderr))
            if fd is not None and name in streams
        ]
        tasks += outputs
        if "stdin" in streams:
            tasks.append(asyncio.ensure_future(_pump_in(streams["stdin"], io)))
        if "resize" in streams:
            tasks.append(asyncio.ensure_future(_pump_resize(streams["resize"], io, session, decoder)))
        code = await session.wait()
        session = None  # reaped
        if outputs:
            # The command is gone; what it wrote is in the pipe. A background child holding stdout open
            # must not keep the session: bounded.
            await asyncio.wait(outputs, timeout=OUTPUT_DRAIN)
        for name in ("stdout", "stderr"):
            if name in streams:
                await streams[name].close()
        log.info("Exec session ended", target=what, exit_code=code)
        with contextlib.suppress(spdy.StreamReset):
            await error.write(error_stream_body(protocol, opts.command, code))
        await error.close()
    except spdy.StreamReset:
        log.info("Exec client went away", target=what)
    except asyncio.CancelledError:
        stopping = True
        raise
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if session is not None:
            # The client went (or the agent stops) before the command exited: kill it, not only runc.
            await asyncio.shield(session.kill())
            log.info("Exec session ended early; command killed", target=what)
        io.close()
        if stopping and not error.local_closed:
            # Say so, rather than let the client take a closed connection for a clean exit.
            body = error_stream_body(protocol, opts.command, None, "the node agent is stopping; the command was killed")
            with contextlib.suppress(spdy.StreamReset, TimeoutError):
                await asyncio.wait_for(asyncio.shield(_last_words(error, body)), 2.0)


async def _last_words(stream: Channel, body: bytes) -> None:
    await stream.write(body)
    await stream.close()


async def _pump_out(fd: int, stream: Channel) -> None:
    while data := await read_fd(fd):
        await stream.write(data)


async def _pump_in(stream: Channel, io: ExecIO) -> None:
    try:
        while data := await stream.read():
            if io.stdin is None:
                continue
            try:
                await write_fd(io.stdin, data)
            except (BrokenPipeError, OSError):
                io.close_stdin()
    finally:
        io.close_stdin()


async def _pump_resize(stream: Channel, io: ExecIO, session: ExecSession, decoder: ResizeDecoder) -> None:
    while data := await stream.read():
        for width, height in decoder.feed(data):
            with contextlib.suppress(OSError):
                io.resize(width, height)
            with contextlib.suppress(EdgeletError):
                session.signal(signal.SIGWINCH)
