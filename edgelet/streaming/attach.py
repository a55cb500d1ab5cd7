"""One `kubectl attach` session, over SPDY streams or WebSocket channels: what the container writes, read from
conmon's attach socket, its stdin when it keeps one open, and its console resized.

The session ends when the container exits or the client goes, with the
socket closed either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from edgelet.streaming import spdy
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
    from edgelet.util.clock import Clock

log = get_logger(__name__)

RESIZE_BURST = 0.2  # resize messages this close together are one (conmon's FIFO takes one per read)
ATTACH_PACKET = 8192 + 1  # conmon's attach packets: one byte naming the pipe, then up to 8 KiB of it
_ATTACH_PIPES = {2: "stdout", 3: "stderr"}


async def serve_attach(
    conn: spdy.SpdyConnection,
    *,
    opts: ExecOptions,
    protocol: str,
    socket_path: os.PathLike[str],
    clock: Clock,
    what: str,
    creation_timeout: float = STREAM_CREATION_TIMEOUT,
    resize: Callable[[int, int], None] | None = None,
) -> None:
    """One `kubectl attach` session over SPDY: its streams, then `run_attach`."""
    streams = await session_streams(
        conn, opts, protocol, clock, creation_timeout, what, "Attach session without its streams"
    )
    if streams is not None:
        await run_attach(streams, opts=opts, protocol=protocol, socket_path=socket_path, what=what, resize=resize)


async def run_attach(
    streams: Mapping[str, Channel],
    *,
    opts: ExecOptions,
    protocol: str,
    socket_path: os.PathLike[str],
    what: str,
    resize: Callable[[int, int], None] | None = None,
) -> None:
    """What the container writes from now on, read from conmon's attach socket, until the container exits or
    the client goes, and the client's stdin to the container's when it has one (`stdin: true`: conmon holds it
    open; kubectl itself sends none to other containers); a `tty: true` container's console is resized
    through `resize`."""
    error = streams["error"]
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    sock.setblocking(False)
    tasks: list[asyncio.Future[Any]] = []
    try:
        try:
            await _connect_long(sock, os.fspath(socket_path))
        except OSError as exc:
            message = f"cannot attach to {what}: conmon's attach socket: {exc.strerror or exc}"
            await error.write(error_stream_body(protocol, ["attach"], None, message))
            await error.close()
            return
        log.info("Attach session started", target=what, protocol=protocol)
        if "stdin" in streams:
            tasks.append(asyncio.ensure_future(_attach_stdin(streams["stdin"], sock)))
        if "resize" in streams and resize is not None:
            tasks.append(asyncio.ensure_future(_attach_resize(streams["resize"], resize)))
        while packet := await loop.sock_recv(sock, ATTACH_PACKET):
            name = _ATTACH_PIPES.get(packet[0])
            if name is None:
                continue
            target = streams.get(name) or (streams.get("stdout") if opts.tty else None)
            if target is not None and len(packet) > 1:
                await target.write(packet[1:])
        for name in ("stdout", "stderr"):
            if name in streams:
                await streams[name].close()
        log.info("Attach session ended: the container exited", target=what)
        with contextlib.suppress(spdy.StreamReset):
            await error.write(error_stream_body(protocol, ["attach"], 0))
        await error.close()
    except (spdy.StreamReset, ConnectionError):
        log.info("Attach client went away", target=what)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        sock.close()


async def _connect_long(sock: socket.socket, path: str) -> None:
    """Connect to a unix socket whose path may pass the 108-byte limit: through /proc/self/fd of its directory,
    as conmon binds it."""
    loop = asyncio.get_running_loop()
    if len(path.encode()) < 100:
        await loop.sock_connect(sock, path)
        return
    dirfd = os.open(os.path.dirname(path), os.O_PATH | os.O_CLOEXEC)
    try:
        await loop.sock_connect(sock, f"/proc/self/fd/{dirfd}/{os.path.basename(path)}")
    finally:
        os.close(dirfd)


async def _attach_resize(stream: Channel, resize: Callable[[int, int], None]) -> None:
    decoder = ResizeDecoder()
    while data := await stream.read():
        # Only the last of a burst: conmon takes one message per read of its FIFO, and kubectl attach sends
        # the size plus one, then the size (to make the program redraw) back to back.
        sizes = decoder.feed(data)
        with contextlib.suppress(TimeoutError):
            while more := await asyncio.wait_for(stream.read(), RESIZE_BURST):
                sizes += decoder.feed(more)
        if sizes:
            with contextlib.suppress(OSError):
                resize(*sizes[-1])


async def _attach_stdin(stream: Channel, sock: socket.socket) -> None:
    """The client's stdin to conmon, which passes it on when it holds the container's stdin (`stdin: true`) and
    drops it otherwise; the client's EOF is the attached client leaving, which closes a `stdinOnce` stdin."""
    loop = asyncio.get_running_loop()
    try:
        while data := await stream.read():
            for i in range(0, len(data), 8192):
                await loop.sock_sendall(sock, data[i : i + 8192])
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
