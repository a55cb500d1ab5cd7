"""kubelet's remote command protocols on the node API (remotecommand channel protocols v1-v4 for exec and attach,
portforward.k8s.io), as pure decisions: which protocol, which streams a request needs, what the error stream says,
and the gathering of a SPDY session's streams before its command starts.

The sessions themselves are `remoteexec.py`, `attach.py` and `portforward.py`,
over SPDY streams or WebSocket channels alike (`Channel`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from edgelet.streaming import spdy
from edgelet.streaming.errors import RequestRefused
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.util.clock import Clock

log = get_logger(__name__)

PROTOCOL_HEADER = "X-Stream-Protocol-Version"
# What kubelet's remotecommand server speaks, newest first (v1 is the bare name).
EXEC_PROTOCOLS = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
PORT_FORWARD_PROTOCOLS = ("portforward.k8s.io",)
STREAM_CREATION_TIMEOUT = 30.0  # kubelet's: the streams a request needs must all be open by then


class SessionError(spdy.SpdyError):
    """A streaming session could not be carried out (its streams did not all come in time)."""


# ------------------------------------------------------------------------------------------------- decisions


def client_protocols(headers: Iterable[tuple[str, str]]) -> list[str]:
    """Every protocol the client offers, in its order (repeated headers and comma-separated values)."""
    out = []
    for name, value in headers:
        if name.lower() == PROTOCOL_HEADER.lower():
            out += [p.strip() for p in value.split(",") if p.strip()]
    return out


def negotiate(offered: Sequence[str], supported: Sequence[str]) -> str:
    """The first protocol the client offers that we speak, as kubelet's httpstream.Handshake picks it; an
    offer of nothing means the oldest; RequestRefused 403 when none fits (kubelet's status)."""
    if not offered:
        return supported[-1]
    for p in offered:
        if p in supported:
            return p
    raise RequestRefused(
        403,
        f"unable to upgrade: unable to negotiate protocol: client supports {list(offered)}, "
        f"server supports {list(supported)}",
    )


def is_spdy_upgrade(headers: Iterable[tuple[str, str]]) -> bool:
    h: dict[str, list[str]] = {}
    for k, v in headers:
        h.setdefault(k.lower(), []).append(v)
    connection = ",".join(h.get("connection", [])).lower()
    upgrade = ",".join(h.get("upgrade", [])).lower()
    return "upgrade" in connection and spdy.UPGRADE.lower() in [u.strip() for u in upgrade.split(",")]


@dataclass(frozen=True)
class ExecOptions:
    command: tuple[str, ...]
    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False


def _flag(query: Mapping[str, Sequence[str]], *names: str) -> bool:
    for name in names:
        for v in query.get(name, ()):
            if v.lower() in ("1", "true", ""):
                return True
    return False


def parse_exec_options(query: Mapping[str, Sequence[str]]) -> ExecOptions:
    """kubelet's remotecommand options: `command` (repeated), and `input`/`output`/`error`/`tty` as the
    apiserver sends them (`stdin`/`stdout`/`stderr` accepted too); RequestRefused 400 naming what is wrong."""
    command = tuple(query.get("command", ()))
    if not command or not command[0]:
        raise RequestRefused(400, "exec: no command given (the `command` query parameter)")
    opts = ExecOptions(
        command,
        stdin=_flag(query, "input", "stdin"),
        stdout=_flag(query, "output", "stdout"),
        stderr=_flag(query, "error", "stderr"),
        tty=_flag(query, "tty"),
    )
    if not (opts.stdin or opts.stdout or opts.stderr):
        raise RequestRefused(400, "you must specify at least 1 of stdin, stdout, stderr")
    if opts.tty and opts.stderr:
        # With a terminal, stderr is the terminal: kubelet drops the stream, as kubectl expects.
        opts = ExecOptions(command, opts.stdin, opts.stdout, False, True)
    return opts


def expected_streams(opts: ExecOptions, protocol: str) -> frozenset[str]:
    """The stream types a session waits for before it starts the command."""
    wanted = {"error"}
    if opts.stdin:
        wanted.add("stdin")
    if opts.stdout:
        wanted.add("stdout")
    if opts.stderr:
        wanted.add("stderr")
    if opts.tty and protocol in ("v4.channel.k8s.io", "v3.channel.k8s.io"):
        wanted.add("resize")
    return frozenset(wanted)


def exit_message(command: Sequence[str], code: int) -> str:
    return f"command terminated with non-zero exit code: error executing command {list(command)}, exit code {code}"


def error_stream_body(protocol: str, command: Sequence[str], code: int | None, error: str | None = None) -> bytes:
    """What the error stream carries at the end: v4 a metav1.Status (Success; NonZeroExitCode with an ExitCode
    cause, which kubectl turns into its own exit code; InternalError), older protocols the error text alone."""
    if protocol == "v4.channel.k8s.io":
        if error is not None:
            status: dict[str, Any] = {
                "metadata": {},
                "status": "Failure",
                "message": f"Internal error occurred: {error}",
                "reason": "InternalError",
                "code": 500,
                "details": {"causes": [{"message": error}]},
            }
        elif code == 0:
            status = {"metadata": {}, "status": "Success"}
        else:
            status = {
                "metadata": {},
                "status": "Failure",
                "message": exit_message(command, code or 0),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }
        return msgspec.json.encode(status)
    if error is not None:
        return error.encode()
    return b"" if code == 0 else exit_message(command, code or 0).encode()


class ResizeDecoder:
    """The resize stream: concatenated JSON objects `{"Width": W, "Height": H}` (Go's json.Decoder stream)."""

    MAX = 4096

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[tuple[int, int]]:
        self._buf += data
        out = []
        while True:
            start = self._buf.find(b"{")
            end = self._buf.find(b"}", start)
            if start < 0 or end < 0:
                break
            raw, self._buf = self._buf[start : end + 1], self._buf[end + 1 :]
            try:
                msg = msgspec.json.decode(raw)
                w, h = int(msg.get("Width", 0)), int(msg.get("Height", 0))
            except (msgspec.DecodeError, AttributeError, TypeError, ValueError):
                continue
            if 0 < w < 65536 and 0 < h < 65536:
                out.append((w, h))
        if len(self._buf) > self.MAX:
            self._buf = b""
        return out


def accept_exec_stream(expected: frozenset[str], seen: set[str]) -> Callable[[Mapping[str, str]], bool]:
    def accept(headers: Mapping[str, str]) -> bool:
        kind = headers.get("streamtype", "")
        if kind not in expected or kind in seen:
            return False
        seen.add(kind)
        return True

    return accept


def accept_port_forward_stream(headers: Mapping[str, str]) -> bool:
    if headers.get("streamtype") not in ("data", "error"):
        return False
    port = headers.get("port", "")
    return port.isdigit() and 0 < int(port) < 65536


# ---------------------------------------------------------------------------------------------------- streams


async def collect_streams(
    conn: spdy.SpdyConnection, expected: frozenset[str], clock: Clock, timeout: float = STREAM_CREATION_TIMEOUT
) -> dict[str, spdy.Stream]:
    """Wait until the client has opened every stream in `expected`; SessionError after `timeout` (the
    Clock's) or when the connection ends first."""
    got: dict[str, spdy.Stream] = {}

    async def gather() -> None:
        while set(got) != expected:
            stream = await conn.accept_stream()
            if stream is None:
                raise SessionError(f"the client went away after opening {sorted(got) or 'no'} stream(s)")
            got[stream.header("streamtype")] = stream

    task = asyncio.ensure_future(gather())
    timer = asyncio.ensure_future(clock.sleep(timeout))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            raise SessionError(
                f"timed out waiting for streams: got {sorted(got) or 'none'} of {sorted(expected)} within {timeout:g}s"
            )
        task.result()
        return got
    finally:
        for t in (task, timer):
            t.cancel()
        await asyncio.gather(task, timer, return_exceptions=True)


class Channel(Protocol):
    """One stream of a session as the exec code uses it: a SPDY stream or a WebSocket channel."""

    local_closed: bool

    async def read(self) -> bytes: ...

    async def write(self, data: bytes) -> None: ...

    async def close(self) -> None: ...


async def session_streams(
    conn: spdy.SpdyConnection,
    opts: ExecOptions,
    protocol: str,
    clock: Clock,
    creation_timeout: float,
    what: str,
    missing: str,
) -> dict[str, Channel] | None:
    """The streams an exec or attach session needs; None, logged as `missing`, when they never all come."""
    try:
        streams = await collect_streams(conn, expected_streams(opts, protocol), clock, creation_timeout)
    except SessionError as exc:
        log.info(missing, target=what, err=str(exc))
        return None
    return dict(streams)
