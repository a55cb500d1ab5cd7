"""The `edgelet exec` protocol on the local socket: an HTTP Upgrade, then the client's descriptors and JSON lines.

1. The client sends `POST /exec/{pod}?namespace=NS&container=C` (both
   optional: a static pod's short name, the only namespace that has it, the
   first container) with `Upgrade: edgelet-exec/1`; the agent answers an
   error Status (404 no such pod or container, 409 ambiguous or not
   running) or `101 Switching Protocols` naming the container it chose (and
   a note when it defaulted one) in headers.
2. The client sends one hello line, `{"command": [...], "tty": bool,
   "stdin": bool}`, carrying its stdin, stdout and stderr as SCM_RIGHTS: the
   agent starts `runc exec` on them, so no byte of the session passes through
   the agent (runc relays the pty itself and sizes it from the client's
   terminal), and the socket carries only control lines.
3. Client to agent: `{"signal": N}` (SIGWINCH on a resize, SIGINT... when
   forwarded). Agent to client: `{"exit": CODE}` once the command has exited,
   or `{"error": MESSAGE}` when it could not start; then the agent closes.
   A client that hangs up kills its command.

The socket is root's only (0600), so passing descriptors adds no reach; this
works only locally, which is all `edgelet exec` needs (kubectl exec's SPDY
streams are not served, see docs/kubelet-differences.md).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import msgspec

from edgelet.streaming.errors import StreamingError

UPGRADE = "edgelet-exec/1"
CONTAINER_HEADER = "X-Edgelet-Container"  # on the 101: the container the agent chose
NOTE_HEADER = "X-Edgelet-Note"  # on the 101: what to tell the user (the defaulted container)
MAX_LINE = 64 * 1024  # a hello with a long command still fits; anything longer is refused
FDS = 3  # stdin, stdout, stderr


class ProtocolError(StreamingError):
    """The peer broke the protocol: a line too long or not JSON, a hello without its descriptors."""


class Hello(msgspec.Struct, forbid_unknown_fields=True):
    command: list[str]
    tty: bool = False
    stdin: bool = False


@dataclass(frozen=True)
class Message:
    """One control line; exactly one field is set."""

    signal: int | None = None
    exit: int | None = None
    error: str | None = None


def encode(value: Hello | Message) -> bytes:
    if isinstance(value, Hello):
        return msgspec.json.encode(value) + b"\n"
    return msgspec.json.encode({k: v for k, v in vars(value).items() if v is not None}) + b"\n"


def decode_hello(line: bytes) -> Hello:
    try:
        hello = msgspec.json.decode(line, type=Hello)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"bad hello: {exc}") from exc
    if not hello.command:
        raise ProtocolError("bad hello: no command")
    return hello


def decode_message(line: bytes) -> Message:
    try:
        raw = msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"bad message: {exc}") from exc
    if not isinstance(raw, dict) or len(raw) != 1:
        raise ProtocolError(f"bad message: {line[:80]!r}")
    ((key, value),) = raw.items()
    if key in ("signal", "exit") and isinstance(value, int) and not isinstance(value, bool):
        return Message(signal=value) if key == "signal" else Message(exit=value)
    if key == "error" and isinstance(value, str):
        return Message(error=value)
    raise ProtocolError(f"bad message: {line[:80]!r}")


class LineBuffer:
    """Splits a byte stream into lines; ProtocolError when a line outgrows MAX_LINE."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        if len(self._buf) > MAX_LINE:
            raise ProtocolError(f"a line longer than {MAX_LINE} bytes")
        return [line for line in lines if line.strip()]


async def _readable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


async def recv_with_fds(sock: socket.socket, buffer: LineBuffer) -> tuple[list[bytes], list[int]]:
    """Read from the non-blocking `sock` until a whole line is in, with any descriptors sent along;
    returns (lines, fds). ProtocolError at EOF before a line."""
    fds: list[int] = []
    while True:
        try:
            data, got, _flags, _addr = socket.recv_fds(sock, MAX_LINE, FDS)
        except BlockingIOError:
            await _readable(sock)
            continue
        except BaseException:
            for fd in fds:
                _close(fd)
            raise
        fds.extend(got)
        if not data:
            for fd in fds:
                _close(fd)
            raise ProtocolError("the client closed the connection before its hello")
        try:
            lines = buffer.feed(data)
        except ProtocolError:
            for fd in fds:
                _close(fd)
            raise
        if lines:
            return lines, fds


def _close(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass
