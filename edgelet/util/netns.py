"""Sockets made inside another network namespace (a pod's), for port-forward and for watching a pod's links: the
socket is created by a short-lived thread that enters the namespace, so the agent itself never leaves its own and
no listener is opened anywhere."""

from __future__ import annotations

import asyncio
import os
import socket
import threading

from edgelet.util import linux


def _make(netns: str, family: int, kind: int, proto: int) -> socket.socket:
    target = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            linux.setns(target)
            try:
                return socket.socket(family, kind, proto)
            finally:
                # Only this thread moved; it ends right after, so even a failed return harms no one.
                linux.setns(own)
        finally:
            os.close(own)
    finally:
        os.close(target)


def _fail(done: asyncio.Future[socket.socket], exc: BaseException) -> None:
    if not done.done():
        done.set_exception(exc)


def _succeed(done: asyncio.Future[socket.socket], sock: socket.socket) -> None:
    if done.done():  # the caller was cancelled meanwhile
        sock.close()
    else:
        done.set_result(sock)


async def socket_in(
    netns: str | None, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM, proto: int = 0
) -> socket.socket:
    """A non-blocking socket (TCP unless told) of the namespace at `netns` (a /proc/PID/ns/net or a bind-mounted
    file); the agent's own namespace when None. OSError when the namespace cannot be entered."""
    if netns is None:
        sock = socket.socket(family, kind, proto)
    else:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[socket.socket] = loop.create_future()

        def run() -> None:
            try:
                result = _make(netns, family, kind, proto)
            except BaseException as exc:  # handed to the awaiting task, raised there
                loop.call_soon_threadsafe(_fail, done, exc)
                return
            loop.call_soon_threadsafe(_succeed, done, result)

        # A thread of its own, not a pool's: a thread that changed namespace is never reused.
        threading.Thread(target=run, name="netns-socket", daemon=True).start()
        sock = await done
    sock.setblocking(False)
    return sock


async def connect_local(netns: str | None, port: int) -> socket.socket:
    """A connection to `port` on the loopback of the namespace (IPv4, then IPv6, as kubelet tries); OSError
    naming both attempts when neither answers."""
    loop = asyncio.get_running_loop()
    errors = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            sock = await socket_in(netns, family)
        except OSError as exc:
            if family == socket.AF_INET6:  # no IPv6 in there: the IPv4 answer stands
                errors.append(f"{host}: {exc.strerror or exc}")
                continue
            raise OSError(
                exc.errno, f"cannot make a socket in the network namespace {netns}: {exc.strerror or exc}"
            ) from exc
        try:
            await loop.sock_connect(sock, (host, port))
            return sock
        except asyncio.CancelledError:
            sock.close()  # the session ended mid-connect: the descriptor goes with it
            raise
        except OSError as exc:
            sock.close()
            # asyncio's message ("Connect call failed") hides the reason; errno has it.
            errors.append(f"dial {host} port {port}: {os.strerror(exc.errno) if exc.errno else exc}")
    raise OSError(f"failed to connect to localhost:{port}: {'; '.join(errors)}")
