"""The probe actions: exec (`runc exec`), httpGet, tcpSocket and grpc, each giving an `Outcome` in kubelet's words.

Results follow kubelet's prober/ package: exec succeeds on exit 0 and a
timeout is a Failure (ExecProbeTimeout); httpGet succeeds on 200-399
(HTTPS not verified); tcpSocket succeeds once connected; grpc succeeds on
grpc.health.v1 SERVING. A connection error or a bad status is a Failure;
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
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

from edgelet.probes import netns
from edgelet.probes.errors import ProbeError
from edgelet.probes.machine import Result
from edgelet.runtime.errors import ExecError, ExecTimeout

if TYPE_CHECKING:
    from edgelet.api.types import Container, HTTPGetAction, Probe, TCPSocketAction
    from edgelet.runtime._exec import Completed

MAX_OUTPUT = 10 * 1024  # kubelet probe.maxReadLength
USER_AGENT = "kube-probe/1.31"
DEFAULT_HOST = "127.0.0.1"


class Executor(Protocol):
    async def exec_sync(self, container_id: str, argv: Sequence[str], timeout: float | None) -> "Completed": ...


@dataclass(frozen=True)
class Outcome:
    """One probe run: the result and kubelet's output text; `error` means the result must be discarded."""

    result: Result
    message: str = ""
    error: bool = False


@dataclass(frozen=True)
class ProbeTarget:
    """Where a container's probes go: the container (exec) and its pod's network namespace (None = host)."""

    container_id: str
    netns: str | None
    ports: Mapping[str, int] = field(default_factory=dict)  # named container ports


def target_for(container_id: str, container: "Container", sandbox_pid: int | None, host_network: bool) -> ProbeTarget:
    """The probe target of one container instance, from its sandbox's pause process."""
    ns = None if host_network or sandbox_pid is None else f"/proc/{sandbox_pid}/ns/net"
    ports = {p.name: p.container_port for p in container.ports or [] if p.name}
    return ProbeTarget(container_id=container_id, netns=ns, ports=ports)


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
        addr = infos[0][4][0]
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


async def tcp_probe(action: "TCPSocketAction", target: ProbeTarget, timeout: float) -> Outcome:
    try:
        port = resolve_port(action.port, target)
    except ProbeError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    host = action.host or DEFAULT_HOST
    try:
        sock = await _open(target, host, port, timeout)
    except netns.NetnsError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    except (OSError, asyncio.TimeoutError) as exc:
        return Outcome(Result.FAILURE, _dial_error(host, port, exc))
    sock.close()
    return Outcome(Result.SUCCESS)


# ------------------------------------------------------------------ http

_insecure: ssl.SSLContext | None = None


def _insecure_context() -> ssl.SSLContext:
    global _insecure
    if _insecure is None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # kubelet: probes skip TLS verification
        _insecure = ctx
    return _insecure


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes


def http_url(action: "HTTPGetAction", host: str, port: int) -> str:
    scheme = (action.scheme or "HTTP").lower()
    path = action.path or "/"
    if not path.startswith("/"):
        path = "/" + path
    hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"{scheme}://{hostport}{path}"


def build_request(action: "HTTPGetAction", host: str, port: int) -> bytes:
    """The GET kubelet sends: its User-Agent and Accept unless the probe sets them, and the probe's headers."""
    path = action.path or "/"
    if not path.startswith("/"):
        path = "/" + path
    headers: dict[str, tuple[str, str]] = {
        "host": ("Host", f"[{host}]:{port}" if ":" in host else f"{host}:{port}"),
        "user-agent": ("User-Agent", USER_AGENT),
        "accept": ("Accept", "*/*"),
    }
    extra: list[tuple[str, str]] = []
    for h in action.http_headers or []:
        if h.name.lower() in headers:
            headers[h.name.lower()] = (h.name, h.value)
        else:
            extra.append((h.name, h.value))
    lines = [f"GET {path} HTTP/1.1", *(f"{n}: {v}" for n, v in headers.values()), *(f"{n}: {v}" for n, v in extra),
             "Connection: close"]
    for line in lines:
        if "\r" in line or "\n" in line:
            raise ProbeError(f"invalid header or path: {line!r}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def http_get(action: "HTTPGetAction", target: ProbeTarget, timeout: float | None) -> HttpResponse:
    """One GET from inside the pod's namespace; raises ProbeError (bad port), OSError or TimeoutError."""
    port = resolve_port(action.port, target)
    host = action.host or DEFAULT_HOST
    request = build_request(action, host, port)

    async def exchange() -> HttpResponse:
        sock = await _open(target, host, port, timeout if timeout is not None else 3600.0)
        https = (action.scheme or "HTTP").upper() == "HTTPS"
        try:
            reader, writer = await asyncio.open_connection(
                sock=sock, ssl=_insecure_context() if https else None, server_hostname=host if https else None,
                limit=MAX_OUTPUT * 8,
            )
        except BaseException:
            sock.close()
            raise
        try:
            writer.write(request)
            await writer.drain()
            status_line = await reader.readline()
            parts = status_line.decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise ConnectionError(f"malformed HTTP response: {status_line[:80]!r}")
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            body = await reader.read(MAX_OUTPUT)
            return HttpResponse(int(parts[1]), body)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass

    if timeout is None:
        return await exchange()
    return await asyncio.wait_for(exchange(), timeout)


async def http_probe(action: "HTTPGetAction", target: ProbeTarget, timeout: float) -> Outcome:
    """kubelet prober/http: 200-399 success (a redirect is not followed: 3xx counts as success, see below)."""
    host = action.host or DEFAULT_HOST
    try:
        port = resolve_port(action.port, target)
        url = http_url(action, host, port)
        response = await http_get(action, target, timeout)
    except netns.NetnsError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    except ProbeError as exc:
        return Outcome(Result.UNKNOWN, str(exc), error=True)
    except (asyncio.TimeoutError, TimeoutError):
        return Outcome(Result.FAILURE, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)')
    except (OSError, ssl.SSLError) as exc:
        return Outcome(Result.FAILURE, f'Get "{url}": {_dial_error(host, port, exc)}')
    # edgelet: kubelet follows redirects to the same host and judges the final response; edgelet does not
    # follow them and, like kubelet for a redirect elsewhere, counts a 3xx as success.
    if 200 <= response.status < 400:
        return Outcome(Result.SUCCESS, response.body.decode(errors="replace"))
    return Outcome(Result.FAILURE, f"HTTP probe failed with statuscode: {response.status}")


# ------------------------------------------------------------------ dispatch


async def run_probe(probe: "Probe", target: ProbeTarget, runtime: Executor) -> Outcome:
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
