"""`edgelet exec [-i] [-t] POD [-c CONTAINER] -- CMD...`: a command in a running container, through the agent.

The CLI runs no runc itself: it asks the agent over the local socket
(edgelet.server.execproto) and hands over its own stdin, stdout and stderr,
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
from types import FrameType
from typing import TYPE_CHECKING, Sequence, TextIO
from urllib.parse import quote

from edgelet.cli.common import EXIT_USAGE, PROG, CommandError, from_agent

if TYPE_CHECKING:
    from edgelet.server.execproto import Hello
    from edgelet.settings import Settings

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


def pick_container(names: Sequence[str], requested: str | None, pod: str) -> tuple[str, str | None]:
    """The container to run in, and a note when one was chosen for the user (kubectl defaults to the first)."""
    if requested is not None:
        if requested not in names:
            raise ExecCommandError(f"container {requested!r} not found in pod {pod} (it has: {', '.join(names)})")
        return requested, None
    if not names:
        raise ExecCommandError(f"pod {pod} has no containers")
    if len(names) == 1:
        return names[0], None
    return names[0], f'Defaulted container "{names[0]}" out of: {", ".join(names)}'


def _upgrade(sock: socket.socket, target: str) -> bytes:
    """Send the Upgrade request; the bytes already read past the 101, or ExecCommandError with the agent's
    message."""
    import h11
    import msgspec

    from edgelet.server.execproto import UPGRADE

    conn = h11.Connection(h11.CLIENT)
    sock.sendall(conn.send(h11.Request(method="POST", target=target, headers=[
        ("Host", "edgelet"), ("Upgrade", UPGRADE), ("Connection", "Upgrade"), ("Content-Length", "0")]))
        + conn.send(h11.EndOfMessage()))
    status, body = 0, b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
            continue
        if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
            return conn.trailing_data[0]
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


def run_session(sock_path: str, target: str, hello: "Hello", fds: Sequence[int] = (0, 1, 2)) -> int:
    """Run one exec session (see edgelet.server.execproto); returns the command's exit code."""
    import termios

    from edgelet.server import execproto as proto

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(sock_path)
    except OSError as exc:
        sock.close()
        raise ExecCommandError(f"cannot reach the agent on {sock_path}: {exc.strerror or exc}") from exc
    saved = None
    previous: dict[int, object] = {}
    try:
        leftover = _upgrade(sock, target)
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


def cmd_exec(settings: "Settings", args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import msgspec

    from edgelet.cli.describe import find_pods
    from edgelet.server.api import socket_path
    from edgelet.server.execproto import Hello
    from edgelet.status.snapshot import PodsSnapshot

    command = command_of(args.command_argv)
    if not command:
        print(f"{PROG}: exec: no command given (edgelet exec POD [-c CONTAINER] -- COMMAND [ARG...])", file=err)
        return EXIT_USAGE
    data = from_agent(settings, "/pods/table")
    if data is None:
        raise ExecCommandError(f"edgelet is not running (no agent on {socket_path(settings.run_dir)}): "
                               "exec needs the agent")
    snapshot = msgspec.json.decode(data, type=PodsSnapshot)
    found = find_pods(snapshot, args.pod, args.namespace)
    if not found:
        raise ExecCommandError(f'pods "{args.pod}" not found')
    if len(found) > 1:
        spaces = ", ".join(sorted(r.namespace for r in found))
        raise ExecCommandError(f'pods "{args.pod}" exist in several namespaces ({spaces}): name one with -n')
    row = found[0]
    spec = (row.pod or {}).get("spec") or {}
    names = [c["name"] for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]
    container, note = pick_container(names, args.container, f"{row.namespace}/{row.name}")
    if note:
        print(note, file=err)
    tty, warning = decide_tty(args.tty, args.stdin, os.isatty(0))
    if warning:
        print(warning, file=err)
    for stream in (out, err, sys.stdout, sys.stderr):
        stream.flush()  # the command writes to the same descriptors next
    target = "/exec/" + "/".join(quote(x, safe="") for x in (row.namespace, row.name, container))
    return run_session(str(socket_path(settings.run_dir)), target, Hello(command=command, tty=tty, stdin=args.stdin))
