"""One `kubectl port-forward` session: each forwarded connection, a pair of SPDY streams or WebSocket channels,
joined to a port on the loopback of the pod's network namespace (a socket made there by `edgelet.util.netns`).

Every connection ends with its socket closed, whichever side ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgelet.streaming import spdy
from edgelet.streaming._execio import READ_SIZE
from edgelet.streaming.remotecommand import STREAM_CREATION_TIMEOUT, Channel
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.util.clock import Clock

log = get_logger(__name__)


@dataclass
class _Pair:
    request_id: str
    data: spdy.Stream | None = None
    error: spdy.Stream | None = None
    timer: asyncio.Future[None] | None = None


async def serve_port_forward(
    conn: spdy.SpdyConnection,
    *,
    netns: str | None,
    clock: Clock,
    what: str,
    creation_timeout: float = STREAM_CREATION_TIMEOUT,
) -> None:
    """One `kubectl port-forward` session: each forwarded connection is a (data, error) stream pair sharing a
    requestID, connected to the port on the loopback of the pod's network namespace (`netns`; None: the
    agent's own, for hostNetwork pods)."""
    pairs: dict[str, _Pair] = {}
    tasks: set[asyncio.Future[Any]] = set()

    async def expire(pair: _Pair) -> None:
        await clock.sleep(creation_timeout)
        if pairs.get(pair.request_id) is pair:
            del pairs[pair.request_id]
            log.info("Port-forward stream pair incomplete; reset", target=what, request=pair.request_id)
            for s in (pair.data, pair.error):
                if s is not None:
                    await s.reset(spdy.CANCEL)

    try:
        while (stream := await conn.accept_stream()) is not None:
            rid = stream.header("requestid") or str(stream.id)
            pair = pairs.get(rid)
            if pair is None:
                pair = pairs[rid] = _Pair(rid)
                pair.timer = asyncio.ensure_future(expire(pair))
                tasks.add(pair.timer)
                pair.timer.add_done_callback(tasks.discard)
            kind = stream.header("streamtype")
            if getattr(pair, kind) is not None:
                await stream.reset(spdy.PROTOCOL_ERROR)
                continue
            setattr(pair, kind, stream)
            if pair.data is not None and pair.error is not None:
                del pairs[rid]
                if pair.timer is not None:
                    pair.timer.cancel()
                task = asyncio.ensure_future(_forward(pair.data, pair.error, netns, what))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _forward(data: spdy.Stream, error: spdy.Stream, netns: str | None, what: str) -> None:
    await forward(data, error, int(data.header("port")), netns, what)


async def forward(data: Channel, error: Channel, port: int, netns: str | None, what: str) -> None:
    """One forwarded connection: `port` on the loopback of `netns` (None: the host's) to and from `data`; a
    refused port is reported on `error`."""
    from edgelet.util.netns import connect_local

    loop = asyncio.get_running_loop()
    try:
        sock = await connect_local(netns, port)
    except OSError as exc:
        message = f"error forwarding port {port} to pod {what}: {exc.strerror or exc}"
        log.info("Port-forward connection refused", target=what, port=port, err=str(exc))
        with contextlib.suppress(spdy.StreamReset):
            await error.write(message.encode())
        await error.close()
        await data.close()
        return

    async def up() -> None:
        try:
            while chunk := await data.read():
                await loop.sock_sendall(sock, chunk)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    async def down() -> None:
        try:
            while chunk := await loop.sock_recv(sock, READ_SIZE):
                await data.write(chunk)
        except (OSError, spdy.StreamReset):
            pass
        await data.close()

    tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
    try:
        # Done when the pod's side is: kubectl waits for the error stream's end before it closes its own side,
        # so waiting for the client's half would wait forever. A client's half-close alone ends nothing; a
        # reset does (a silent listener would otherwise hold the socket and the stream).
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if not tasks[1].done() and getattr(data, "reset_status", None) is not None:
            tasks[1].cancel()
            await data.close()
        else:
            await tasks[1]
        await error.close()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        sock.close()
