"""`edgelet exec [-i] [-t] POD [-c CONTAINER] -- CMD...`: a command in a running container, through the agent.

The CLI runs no runc itself: in one request over the local socket
(edgelet.streaming.execproto; the agent resolves the pod's short name and the
default container) it hands over its own stdin, stdout and stderr,
on which the agent starts `runc exec` with the container's process spec.
The CLI then only forwards signals (SIGWINCH as a resize) and waits for the
exit code, which becomes its own.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, TextIO
from urllib.parse import quote, urlencode

from edgelet.cli.common import EXIT_USAGE, PROG, CommandError

if TYPE_CHECKING:
    from edgelet.settings import Settings
    from edgelet.streaming.execproto import Hello

# Forwarded to the command when the CLI gets them (without a TTY; with one, the terminal sends ^C as a byte).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class ExecCommandError(CommandError):
    """The pod or container cannot be told, is not running, or the session broke; the message says which."""


def command_of(argv: Sequence[str]) -> list[str]:
    """The command after `--` (argparse may leave the separator in)."""
    args = list(argv)
    if args[:1] == ["--"]:
        args = args[1:]
    return args


def decide_tty(want_tty: bool, want_stdin: bool, stdin_is_tty: bool) -> tuple[bool, str | None]:
    """Whether the session gets a terminal, and the warning to show when -t cannot be honoured (kubectl's)."""
    if not want_tty:
        return False, None
    if not want_stdin:
        return False, "Unable to use a TTY - input is not connected (add -i)"
    if not stdin_is_tty:
        return False, "Unable to use a TTY - input is not a terminal or the right kind of file"
    return True, None


def _upgrade(sock: socket.socket, target: str) -> tuple[bytes, dict[str, str]]:
    """Send the Upgrade request; the bytes already read past the 101 and its headers, or ExecCommandError
    with the agent's message."""
    import h11
    import msgspec

    from edgelet.streaming.execproto import UPGRADE

    conn = h11.Connection(h11.CLIENT)
    sock.sendall(
        conn.send(
            h11.Request(
                method="POST",
                target=target,
                headers=[("Host", "edgelet"), ("Upgrade", UPGRADE), ("Connection", "Upgrade"), ("Content-Length", "0")],
            )
        )
        + conn.send(h11.EndOfMessage())
    )
    status, body = 0, b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
            continue
        if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            headers = {k.decode("latin-1").lower(): v.decode("utf-8", "replace") for k, v in event.headers}
            return conn.trailing_data[0], headers
        if isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)) or event is h11.PAUSED:
            break
    try:
        message = msgspec.json.decode(body).get("message") or f"HTTP {status}"
    except (msgspec.DecodeError, AttributeError):
        message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    raise ExecCommandError(message)


def run_session(
    sock_path: str, target: str, hello: Hello, fds: Sequence[int] = (0, 1, 2), err: TextIO | None = None
) -> int:
    """Run one exec session (see edgelet.streaming.execproto); returns the command's exit code. The agent's
    note (a defaulted container) goes to `err`."""
    import termios

    from edgelet.streaming import execproto as proto

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(sock_path)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        raise ExecCommandError(f"edgelet is not running (no agent on {sock_path}): exec needs the agent") from exc
    except OSError as exc:
        sock.close()
        raise ExecCommandError(f"cannot reach the agent on {sock_path}: {exc.strerror or exc}") from exc
    saved = None
    previous: dict[int, object] = {}
    try:
        leftover, headers = _upgrade(sock, target)
        note = headers.get(proto.NOTE_HEADER.lower())
        if note and err is not None:
            print(note, file=err)
            err.flush()
        if hello.tty:
            saved = termios.tcgetattr(fds[0])  # runc restores the terminal itself; this is for when it cannot

        def forward(signum: int, _frame: FrameType | None) -> None:
            try:
                sock.sendall(proto.encode(proto.Message(signal=signum)))
            except OSError:
                pass

        for sig in (*FORWARDED, *((signal.SIGWINCH,) if hello.tty else ())):
            previous[sig] = signal.signal(sig, forward)
        socket.send_fds(sock, [proto.encode(hello)], list(fds))
        buffer = proto.LineBuffer()
        data = leftover
        while True:
            for line in buffer.feed(data):
                msg = proto.decode_message(line)
                if msg.error is not None:
                    raise ExecCommandError(msg.error)
                if msg.exit is not None:
                    return msg.exit
            data = sock.recv(4096)
            if not data:
                raise ExecCommandError("the agent closed the exec session without an exit status")
    except proto.ProtocolError as exc:
        raise ExecCommandError(f"exec session: {exc}") from exc
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        if saved is not None:
            try:
                termios.tcsetattr(fds[0], termios.TCSADRAIN, saved)
            except termios.error:
                pass
        sock.close()


def exec_target(pod: str, namespace: str | None, container: str | None) -> str:
    """The request path: the pod as typed, namespace and container only when given (the agent resolves)."""
    query = {k: v for k, v in (("namespace", namespace), ("container", container)) if v}
    return f"/exec/{quote(pod, safe='')}" + (f"?{urlencode(query)}" if query else "")


def cmd_exec(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from edgelet.server.api import socket_path
    from edgelet.streaming.execproto import Hello

    command = command_of(args.command_argv)
    if not command:
        print(f"{PROG}: exec: no command given (edgelet exec POD [-c CONTAINER] -- COMMAND [ARG...])", file=err)
        return EXIT_USAGE
    tty, warning = decide_tty(args.tty, args.stdin, os.isatty(0))
    if warning:
        print(warning, file=err)
    for stream in (out, err, sys.stdout, sys.stderr):
        stream.flush()  # the command writes to the same descriptors next
    return run_session(
        str(socket_path(settings.run_dir)),
        exec_target(args.pod, args.namespace, args.container),
        Hello(command=command, tty=tty, stdin=args.stdin),
        err=err,
    )
