"""Sockets that live in a pod's network namespace, opened from a thread that entered it.

A socket belongs to the network namespace it was created in, whichever
thread later uses it. So a short-lived thread enters the pod's namespace
(`setns` through `/proc/<sandbox pid>/ns/net`), creates the socket and
exits; the event loop then connects and talks on it as on any socket. The
thread is never reused, so no pool thread is ever left in a pod's namespace.
`netns=None` means the host's namespace (hostNetwork pods).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading

from edgelet.probes.errors import NetnsError
from edgelet.util import linux


def socket_in(netns: str | None, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM) -> socket.socket:
    """A new non-blocking socket in the namespace at path `netns` (the host's when None)."""
    if netns is None:
        sock = socket.socket(family, type)
        sock.setblocking(False)
        return sock
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def enter_and_create() -> None:
        try:
            fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
            try:
                linux.setns(fd)
            finally:
                os.close(fd)
            made.append(socket.socket(family, type))
        except OSError as exc:
            failed.append(exc)

    # The thread only makes a syscall or three; joining it costs about what a to_thread hop would.
    thread = threading.Thread(target=enter_and_create, name="edgelet-netns", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise NetnsError(netns, failed[0]) from failed[0]
    sock = made[0]
    sock.setblocking(False)
    return sock


async def connect(netns: str | None, host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to host:port from inside `netns`; raises OSError (TimeoutError on timeout)."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket_in(netns, family)
    try:
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), timeout)
    except BaseException:
        sock.close()
        raise
    return sock
