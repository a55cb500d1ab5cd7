"""The CLI's side of the local API: requests over the agent's unix socket, None when no agent answers.

Subcommands ask the running agent first (live data) and read the files the
agent leaves under the root and run dirs when it is not running.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.errors import EdgeletError

if TYPE_CHECKING:
    import httpx

TIMEOUT = 10.0


class AgentError(EdgeletError):
    """The agent answered with an error; the message is the one of its Status body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _socket(run_dir: Path | str) -> Path:
    from edgelet.server.api import socket_path

    return socket_path(run_dir)


def _client(sock: Path, read_timeout: float | None = TIMEOUT) -> httpx.Client:
    import httpx

    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(sock)),
        base_url="http://edgelet",
        timeout=httpx.Timeout(TIMEOUT, read=read_timeout),
    )


def _error(response: httpx.Response) -> AgentError:
    import msgspec

    try:
        message = msgspec.json.decode(response.read()).get("message") or response.reason_phrase
    except (msgspec.DecodeError, AttributeError):
        message = response.text.strip() or response.reason_phrase
    return AgentError(response.status_code, message)


def get(run_dir: Path | str, path: str) -> bytes | None:
    """The body of GET `path` from the agent; None when no agent listens (AgentError on an error status)."""
    import httpx

    sock = _socket(run_dir)
    if not sock.exists():
        return None
    try:
        with _client(sock) as client:
            response = client.get(path)
    except (httpx.ConnectError, FileNotFoundError):
        return None  # a stale socket of an agent that was killed
    except httpx.HTTPError as exc:
        raise AgentError(0, f"request to the agent on {sock} failed: {exc}") from exc
    if response.status_code >= 400:
        raise _error(response)
    return response.content


def post(run_dir: Path | str, path: str) -> bytes | None:
    """The body of POST `path` (no body sent); None when no agent listens (AgentError on an error status)."""
    import httpx

    sock = _socket(run_dir)
    if not sock.exists():
        return None
    try:
        with _client(sock) as client:
            response = client.post(path)
    except (httpx.ConnectError, FileNotFoundError):
        return None
    except httpx.HTTPError as exc:
        raise AgentError(0, f"request to the agent on {sock} failed: {exc}") from exc
    if response.status_code >= 400:
        raise _error(response)
    return response.content


@contextlib.contextmanager
def stream(run_dir: Path | str, path: str) -> Iterator[Iterator[bytes] | None]:
    """GET `path` streamed (no read timeout, for `logs -f`); yields None when no agent listens."""
    import httpx

    sock = _socket(run_dir)
    if not sock.exists():
        yield None
        return
    with _client(sock, read_timeout=None) as client:
        try:
            cm = client.stream("GET", path)
            response = cm.__enter__()
        except (httpx.ConnectError, FileNotFoundError):
            yield None
            return
        try:
            if response.status_code >= 400:
                raise _error(response)
            yield response.iter_bytes()
        finally:
            cm.__exit__(None, None, None)


def agent_pid(run_dir: Path | str) -> int | None:
    """The pid of the agent listening on the local API's socket (the kernel's SO_PEERCRED: no request, and no pid
    file that could name another process), or None when none listens."""
    import socket
    import struct

    sock = _socket(run_dir)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as s:
            s.settimeout(TIMEOUT)
            s.connect(str(sock))
            creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None  # none listens, or a stale socket of an agent that was killed
    pid = struct.unpack("3i", creds)[0]
    return pid if pid > 0 else None
