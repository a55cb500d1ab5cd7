"""The probe actions: exec (`runc exec`), httpGet, tcpSocket and grpc, each giving an `Outcome` in kubelet's words.

Results follow kubelet's prober/ package: exec succeeds on exit 0 and a
timeout is a Failure (ExecProbeTimeout); httpGet succeeds on 200-399
(HTTPS not verified), following redirects to the same host, and a redirect
it does not follow is a success with a warning; tcpSocket succeeds once
connected; grpc succeeds on grpc.health.v1 SERVING. A connection error or a bad status is a Failure;
a probe that cannot be carried out at all (unknown named port, runc
missing, the pod's namespace gone) is an error, whose result kubelet
throws away.

Where the probes connect: kubelet dials the pod IP. edgelet pods have no
CNI network yet, so an httpGet, tcpSocket or grpc probe without `host`
connects to 127.0.0.1 *inside the pod's network namespace* (`netns.py`),
which reaches every server listening on the wildcard or loopback address;
hostNetwork pods use the host's loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urljoin, urlsplit

from edgelet.container.errors import ExecError, ExecTimeout
from edgelet.probes import netns
from edgelet.probes.errors import ProbeError
from edgelet.probes.machine import Result
from edgelet.probes.target import DEFAULT_HOST, USER_AGENT, Outcome, ProbeTarget

if TYPE_CHECKING:
    import ssl

    from edgelet.api.types import HTTPGetAction, Probe, TCPSocketAction
    from edgelet.container.types import Completed

MAX_OUTPUT = 10 * 1024  # kubelet probe.maxReadLength


class Executor(Protocol):
    async def exec_sync(self, container_id: str, argv: Sequence[str], timeout: float | None) -> Completed: ...


def resolve_port(port: int | str, target: ProbeTarget) -> int:
    """kubelet ResolveContainerPort: a number, or the name of one of the container's ports."""
    if isinstance(port, str):
        if port.isdigit():
            value = int(port)
        elif port in target.ports:
            value = target.ports[port]
        else:
            raise ProbeError(f"couldn't find port: {port} in container")
    else:
        value = port
    if not 0 < value < 65536:
        raise ProbeError(f"invalid port number: {value}")
    return value


def _go_quote(text: str) -> str:
    return json.dumps(text)


# ------------------------------------------------------------------ exec


async def exec_probe(runtime: Executor, target: ProbeTarget, command: Sequence[str], timeout: float) -> Outcome:
    """`runc exec` the command with the probe's timeout; the process is killed when it runs over."""
    try:
        done = await runtime.exec_sync(target.container_id, list(command), timeout)
    except ExecTimeout:
        # kubelet (ExecProbeTimeout): a timeout is a Failure whose output is the timeout error.
        return Outcome(Result.FAILURE, f"command {_go_quote(' '.join(command))} timed out")
    except ExecError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    output = (done.stdout + done.stderr)[:MAX_OUTPUT].decode(errors="replace")
    return Outcome(Result.SUCCESS if done.returncode == 0 else Result.FAILURE, output)


# ------------------------------------------------------------------ tcp


async def _open(target: ProbeTarget, host: str, port: int, timeout: float) -> socket.socket:
    """Connected socket to host:port from the pod's namespace; names are resolved on the host, as kubelet does."""
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        addr = host
    except OSError:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addr = str(infos[0][4][0])
    return await netns.connect(target.netns, addr, port, timeout)


def _dial_error(host: str, port: int, exc: BaseException) -> str:
    """Go's net.Dial error text ("dial tcp 127.0.0.1:80: connect: connection refused")."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return f"dial tcp {where}: i/o timeout"
    if isinstance(exc, OSError) and exc.errno:
        # asyncio rewrites strerror ("Connect call failed ..."); Go prints the errno's text.
        return f"dial tcp {where}: connect: {os.strerror(exc.errno).lower()}"
    return f"dial tcp {where}: {exc}"


async def tcp_probe(action: TCPSocketAction, target: ProbeTarget, timeout: float) -> Outcome:
    try:
        port = resolve_port(action.port, target)
    except ProbeError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    host = action.host or DEFAULT_HOST
    try:
        sock = await _open(target, host, port, timeout)
    except netns.NetnsError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    except (TimeoutError, OSError) as exc:
        return Outcome(Result.FAILURE, _dial_error(host, port, exc))
    sock.close()
    return Outcome(Result.SUCCESS)


# ------------------------------------------------------------------ http

_insecure: ssl.SSLContext | None = None


def _insecure_context() -> ssl.SSLContext:
    global _insecure
    if _insecure is None:
        import ssl  # only for an https probe: an agent without one never loads OpenSSL (util/openssl.py)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # kubelet: probes skip TLS verification
        _insecure = ctx
    return _insecure


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes
    location: str | None = None  # the Location header, for redirects


@dataclass(frozen=True)
class HttpRequest:
    """One GET a probe or hook sends; `headers` are the action's, a Host header included when it sets one."""

    scheme: str  # "http" | "https"
    host: str
    port: int
    path: str  # path and query
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def hostport(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.hostport}{self.path}"


def _path(action: HTTPGetAction) -> str:
    path = action.path or "/"
    return path if path.startswith("/") else "/" + path


def request_for(
    action: HTTPGetAction, target: ProbeTarget, host: str | None = None, port: int | None = None
) -> HttpRequest:
    """The request an httpGet action makes (to `host`/`port` when given); raises ProbeError for an unknown port name."""
    return HttpRequest(
        scheme=(action.scheme or "HTTP").lower(),
        host=host or action.host or DEFAULT_HOST,
        port=port if port is not None else resolve_port(action.port, target),
        path=_path(action),
        headers=tuple((h.name, h.value) for h in action.http_headers or []),
    )


def encode_request(req: HttpRequest) -> bytes:
    """The GET kubelet sends: its User-Agent and Accept unless the request sets them, and the request's headers."""
    headers: dict[str, tuple[str, str]] = {
        "host": ("Host", req.hostport),
        "user-agent": ("User-Agent", USER_AGENT),
        "accept": ("Accept", "*/*"),
    }
    extra: list[tuple[str, str]] = []
    for name, value in req.headers:
        if name.lower() in headers:
            headers[name.lower()] = (name, value)
        else:
            extra.append((name, value))
    lines = [
        f"GET {req.path} HTTP/1.1",
        *(f"{n}: {v}" for n, v in headers.values()),
        *(f"{n}: {v}" for n, v in extra),
        "Connection: close",
    ]
    for line in lines:
        if "\r" in line or "\n" in line:
            raise ProbeError(f"invalid header or path: {line!r}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def build_request(action: HTTPGetAction, host: str, port: int) -> bytes:
    """The bytes of the GET an httpGet action sends to host:port."""
    return encode_request(request_for(action, ProbeTarget("", None), host, port))


async def send(req: HttpRequest, target: ProbeTarget, timeout: float | None) -> HttpResponse:
    """One GET from inside the pod's namespace; raises OSError, ssl.SSLError, ConnectionError or TimeoutError."""
    payload = encode_request(req)
    https = req.scheme == "https"

    async def exchange() -> HttpResponse:
        sock = await _open(target, req.host, req.port, timeout if timeout is not None else 3600.0)
        try:
            reader, writer = await asyncio.open_connection(
                sock=sock,
                ssl=_insecure_context() if https else None,
                server_hostname=req.host if https else None,
                limit=MAX_OUTPUT * 8,
            )
        except BaseException:
            sock.close()
            raise
        try:
            writer.write(payload)
            await writer.drain()
            status_line = await reader.readline()
            parts = status_line.decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise ConnectionError(f"malformed HTTP response: {status_line[:80]!r}")
            location = None
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "location":
                    location = value.strip()
            body = await reader.read(MAX_OUTPUT)
            return HttpResponse(int(parts[1]), body, location)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:  # ssl.SSLError included
                pass

    if timeout is None:
        return await exchange()
    async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancellation
        return await exchange()


async def http_get(action: HTTPGetAction, target: ProbeTarget, timeout: float | None) -> HttpResponse:
    """One GET of an httpGet action (lifecycle hooks); raises ProbeError (bad port), OSError or TimeoutError."""
    return await send(request_for(action, target), target, timeout)


REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})  # the ones Go's http.Client follows
MAX_REDIRECTS = 10


class TooManyRedirects(ProbeError):
    """Go's "stopped after 10 redirects"; `url` is the request whose response was the redirect too many."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__("stopped after 10 redirects")


def next_request(first: HttpRequest, current: HttpRequest, response: HttpResponse, followed: int) -> HttpRequest | None:
    """Where a probe goes after `response`, or None when `response` is the one to judge (pure).

    kubelet's prober client (prober/http.go RedirectChecker(false) over Go's
    http.Client): 301, 302, 303, 307 and 308 with a Location are followed,
    but only to the host of the first request (ports and schemes may differ),
    and at most 10 times, the 11th is an error; a redirect elsewhere is not
    followed, and the caller judges the 3xx itself. The headers go along; a
    Host header the probe set only when the Location is relative, as Go does.
    `followed` is how many redirects were followed before `response`.
    """
    if response.status not in REDIRECT_STATUSES or not response.location:
        return None
    absolute = bool(urlsplit(response.location).scheme)
    target = urlsplit(urljoin(current.url, response.location))
    if target.scheme not in ("http", "https") or not target.hostname:
        return None
    if target.hostname != urlsplit(first.url).hostname:
        return None
    if followed >= MAX_REDIRECTS:
        raise TooManyRedirects(current.url)
    try:
        port = target.port or (443 if target.scheme == "https" else 80)
    except ValueError:
        return None
    path = (target.path or "/") + (f"?{target.query}" if target.query else "")
    headers = tuple((n, v) for n, v in current.headers if not (absolute and n.lower() == "host"))
    return HttpRequest(target.scheme, target.hostname, port, path, headers)


async def http_probe(action: HTTPGetAction, target: ProbeTarget, timeout: float) -> Outcome:
    """kubelet prober/http: 200-399 success, redirects to the same host followed (`next_request`).

    A 3xx that ends the chain (a redirect to another host, or one Go does not
    follow) is a success with a warning, kubelet's probe.Warning, which the
    manager reports as a ProbeWarning event. The timeout covers the whole chain.
    """
    try:
        first = request_for(action, target)
    except ProbeError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    current = first

    async def chain() -> HttpResponse:
        nonlocal current
        followed = 0
        while True:
            response = await send(current, target, None)
            nxt = next_request(first, current, response, followed)
            if nxt is None:
                return response
            current, followed = nxt, followed + 1

    try:
        async with asyncio.timeout(timeout):
            response = await chain()
    except TooManyRedirects as exc:  # before ProbeError, its base: a failure of the probe, not of the prober
        return Outcome(Result.FAILURE, f'Get "{exc.url}": {exc}')
    except netns.NetnsError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    except ProbeError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    except TimeoutError:
        return Outcome(
            Result.FAILURE,
            f'Get "{current.url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)',
        )
    except OSError as exc:  # ssl.SSLError included
        return Outcome(Result.FAILURE, f'Get "{current.url}": {_dial_error(current.host, current.port, exc)}')
    body = response.body.decode(errors="replace")
    if 300 <= response.status < 400:
        return Outcome(Result.SUCCESS, f"Probe terminated redirects, Response body: {body}", warning=True)
    if 200 <= response.status < 300:
        return Outcome(Result.SUCCESS, body)
    return Outcome(Result.FAILURE, f"HTTP probe failed with statuscode: {response.status}")


# ------------------------------------------------------------------ dispatch


async def run_probe(probe: Probe, target: ProbeTarget, runtime: Executor) -> Outcome:
    """Run whichever action the probe has, with its timeout."""
    timeout = float(probe.timeout_seconds or 1)
    if probe.exec is not None:
        return await exec_probe(runtime, target, probe.exec.command or [], timeout)
    if probe.http_get is not None:
        return await http_probe(probe.http_get, target, timeout)
    if probe.tcp_socket is not None:
        return await tcp_probe(probe.tcp_socket, target, timeout)
    if probe.grpc is not None:
        from edgelet.probes.grpc import grpc_probe

        return await grpc_probe(probe.grpc, target, timeout)
    return Outcome(Result.UNKNOWN, "probe has no action", error=True)
