"""kubelet's streaming endpoints on the node API, over SPDY sessions: `kubectl exec` (remotecommand, channel
protocols v1-v4) and `kubectl port-forward` (portforward.k8s.io), from the negotiation to the last byte.

The decisions (which protocol, which streams a request needs, what the
error stream says) are pure functions; a session's side effects are the
runtime's `start_exec` (the same `runc exec` with the container's process
spec that `edgelet exec` uses), the pipes or pty between it and the
streams, and sockets made inside the pod's network namespace
(edgelet.util.netns). Every session ends with its process killed and
reaped, its descriptors and sockets closed, whichever side ends it (the
command exits, the client goes, the agent stops: `SpdyConnection.run`
cancels the session).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import signal
import socket
import struct
import subprocess
import termios
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from edgelet.errors import EdgeletError
from edgelet.streaming import spdy
from edgelet.streaming.errors import RequestRefused
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.runtime.execsession import ExecSession
    from edgelet.streaming.localexec import StartExec
    from edgelet.util.clock import Clock

log = get_logger(__name__)

PROTOCOL_HEADER = "X-Stream-Protocol-Version"
# What kubelet's remotecommand server speaks, newest first (v1 is the bare name).
EXEC_PROTOCOLS = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
PORT_FORWARD_PROTOCOLS = ("portforward.k8s.io",)
STREAM_CREATION_TIMEOUT = 30.0  # kubelet's: the streams a request needs must all be open by then
OUTPUT_DRAIN = 5.0  # after the command exits, what it (or a child holding its stdout) still writes, at most this
READ_SIZE = 32 * 1024
RESIZE_BURST = 0.2  # resize messages this close together are one (attach: conmon's FIFO takes one per read)
FIRST_RESIZE_WAIT = 5.0  # for the terminal's size before the command starts (kubectl sends it at once)


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


# ---------------------------------------------------------------------------------------------- descriptors


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


# ---------------------------------------------------------------------------------------------------- sessions


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
    streams = await _session_streams(
        conn, opts, protocol, clock, creation_timeout, what, "Exec session without its streams"
    )
    if streams is not None:
        await run_exec(streams, opts=opts, protocol=protocol, container_id=container_id, start=start, what=what)


async def _session_streams(
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
    streams = await _session_streams(
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
