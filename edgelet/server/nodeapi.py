"""The node API on TCP (kubelet's port 10250): TLS always, every request authenticated and authorized, kubelet's
paths and JSON: /healthz, /pods, /runningpods/, /metrics, /metrics/resource, /metrics/cadvisor, /stats/summary,
/containerLogs/{namespace}/{pod}/{container}, and the streaming /exec/{namespace}/{pod}/{container} and
/portForward/{namespace}/{pod} over SPDY/3.1 (edgelet.streaming).

It is what `kubectl logs`, `exec`, `cp` and `port-forward` reach through the apiserver and what
metrics-server scrapes. The handlers of the local API are reused (the same
PodList, health rules and log reading); what is added here is the
authentication, the authorization (edgelet.server.auth) and the endpoints
only kubelet's TCP port has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import msgspec

from edgelet.server.auth import Grant, Identity, authenticate, authorize, forbidden_message, request_attributes
from edgelet.server.http import JSON, HttpServer, Request, Response, ServerError, Upgrade
from edgelet.server.routes import HttpError, parse_log_options
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    import ssl

    from edgelet.container.types import PodRuntimeStatus
    from edgelet.server.api import Api
    from edgelet.server.metrics import Metrics
    from edgelet.stats.collector import StatsCollector
    from edgelet.streaming.spdy import Limits as SpdyLimits
    from edgelet.util.clock import Clock

log = get_logger(__name__)

DEFAULT_PORT = 10250
MAX_FOLLOWS = 8  # concurrent `logs -f` streams; each holds a connection and a poll loop
MAX_CONNECTIONS = 32
MAX_SESSIONS = 16  # exec and port-forward sessions at once; each holds a connection (and a runc exec)
IDLE_TIMEOUT = 30.0
RETRY = 10.0  # seconds between attempts to open the port while it is taken


@dataclass(frozen=True)
class NodeRoute:
    endpoint: str
    params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)


def match_node_route(method: str, target: str) -> NodeRoute:
    """The node API endpoint of `method target`; HttpError 404/405/400 when there is none."""
    from urllib.parse import parse_qs

    parts = urlsplit(target)
    segs = [unquote(s) for s in parts.path.split("/") if s]
    try:
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    except ValueError as exc:
        raise HttpError(400, f"malformed query string: {exc}") from exc
    simple = {
        ("healthz",): "healthz",
        ("pods",): "pods",
        ("runningpods",): "runningpods",
        ("metrics",): "metrics",
        ("metrics", "resource"): "metrics_resource",
        ("metrics", "cadvisor"): "metrics_cadvisor",
        ("stats", "summary"): "stats_summary",
    }
    route = None
    if tuple(segs) in simple:
        route = NodeRoute(simple[tuple(segs)], query=query)
    elif segs[:1] == ["containerLogs"]:
        if len(segs) != 4 or not all(segs[1:]):
            raise HttpError(400, "expected /containerLogs/{namespace}/{pod}/{container}")
        route = NodeRoute("container_logs", {"namespace": segs[1], "pod": segs[2], "container": segs[3]}, query)
    elif segs[:1] in (["exec"], ["portForward"], ["attach"]):
        return _streaming_route(method, segs, query, parts.path)
    if route is None:
        raise HttpError(404, f"the server could not find the requested resource: {parts.path or '/'}")
    if method not in ("GET", "HEAD"):
        raise HttpError(405, f"method {method} is not allowed on {parts.path}", headers=(("Allow", "GET, HEAD"),))
    return route


def _streaming_route(method: str, segs: list[str], query: dict[str, str], path: str) -> NodeRoute:
    """kubelet's streaming paths: /exec/{ns}/{pod}/{container} and /portForward/{ns}/{pod} (the pod's UID may
    follow, as in kubelet's paths), GET or POST."""
    if method not in ("GET", "POST"):
        raise HttpError(405, f"method {method} is not allowed on {path}", headers=(("Allow", "GET, POST"),))
    if segs[0] in ("exec", "attach"):
        if len(segs) not in (4, 5) or not all(segs[1:]):
            raise HttpError(400, f"expected /{segs[0]}/{{namespace}}/{{pod}}/{{container}}")
        return NodeRoute(segs[0], {"namespace": segs[1], "pod": segs[2], "container": segs[-1]}, query)
    if len(segs) not in (3, 4) or not all(segs[1:]):
        raise HttpError(400, "expected /portForward/{namespace}/{pod}")
    return NodeRoute("port_forward", {"namespace": segs[1], "pod": segs[2]}, query)


def running_pods(pods: Mapping[str, PodRuntimeStatus]) -> dict:
    """kubelet's /runningpods/: a PodList of what runs, from the runtime (name, namespace, uid, running containers)."""
    items = []
    for uid, rt in sorted(pods.items(), key=lambda kv: (kv[1].namespace, kv[1].name)):
        running = sorted((c for c in rt.containers if c.state == "running"), key=lambda c: c.name)
        if not running and not any(s.state == "running" for s in rt.sandboxes):
            continue
        items.append(
            {
                "metadata": {"name": rt.name, "namespace": rt.namespace, "uid": uid},
                "spec": {"containers": [{"name": c.name, "image": c.image} for c in running]},
                "status": {},
            }
        )
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}


@dataclass
class NodeApiConfig:
    """Who may come in: the TLS context, the static tokens (by digest) and the grants."""

    ssl: ssl.SSLContext
    tokens: Mapping[bytes, Identity]
    grants: tuple[Grant, ...]
    node_name: str


class NodeApi:
    """The request handler: authenticate, authorize, then serve."""

    def __init__(
        self,
        api: Api,
        config: NodeApiConfig,
        *,
        stats: StatsCollector,
        runtime_pods: Callable[[], Mapping[str, PodRuntimeStatus]],
        metrics: Metrics | None,
        cgroup_root: str,
        max_follows: int = MAX_FOLLOWS,
        max_sessions: int = MAX_SESSIONS,
        spdy_limits: SpdyLimits | None = None,
    ) -> None:
        self._api = api
        self._c = config
        self._stats = stats
        self._runtime_pods = runtime_pods
        self._metrics = metrics
        self._cgroup_root = cgroup_root
        self._max_follows = max_follows
        self.follows = 0
        self._max_sessions = max_sessions
        self.sessions = 0  # open exec and port-forward sessions
        from edgelet.streaming.spdy import Limits

        self._spdy_limits = spdy_limits or Limits()

    @property
    def clock(self) -> Clock:
        return self._api.clock

    async def handle(self, request: Request) -> Response:
        ident = authenticate(request.peer_cert, request.headers, self._c.tokens)
        if ident is None:
            raise HttpError(
                401,
                "Unauthorized: a client certificate signed by the client CA or a bearer token is required",
                headers=(("WWW-Authenticate", 'Bearer realm="edgelet"'),),
            )
        path = urlsplit(request.target).path
        attrs = request_attributes(request.method, path)
        if not authorize(ident, attrs, self._c.grants):
            log.info("Node API request forbidden", user=ident.user, subresource=attrs.subresource, path=path)
            raise HttpError(403, forbidden_message(ident, attrs, self._c.node_name))
        route = match_node_route(request.method, request.target)
        if route.endpoint in ("exec", "attach", "port_forward"):
            from edgelet.streaming.errors import RequestRefused

            try:
                return self._streaming(route, request)
            except RequestRefused as exc:
                raise HttpError(exc.status, str(exc)) from exc
        return await self._serve(route)

    def _streaming(self, route: NodeRoute, request: Request) -> Response:
        """kubectl exec / port-forward: check the request, pick the protocol, then switch to SPDY (the session
        runs in edgelet.streaming)."""
        from urllib.parse import parse_qs

        from edgelet.streaming import attach, portforward, remotecommand, remoteexec, spdy, wschannel

        websocket = wschannel.is_websocket_upgrade(request.headers)
        if not websocket and not remotecommand.is_spdy_upgrade(request.headers):
            raise HttpError(
                400, f"Upgrade request required (Connection: Upgrade, Upgrade: {spdy.UPGRADE} or websocket)"
            )
        if websocket:
            return self._websocket_exec(route, request)
        p = route.params
        what = f"{p['namespace']}/{p['pod']}"
        offered = remotecommand.client_protocols(request.headers)
        runner: Callable[[spdy.SpdyConnection], Awaitable[None]]
        accept: Callable[[Mapping[str, str]], bool]
        if route.endpoint == "exec":
            protocol = remotecommand.negotiate(offered, remotecommand.EXEC_PROTOCOLS)
            query = parse_qs(urlsplit(request.target).query, keep_blank_values=True)
            opts = remotecommand.parse_exec_options(query)
            start = self._api.start_exec
            if start is None:
                raise HttpError(404, "exec is not available in this agent")
            cid = self._api.running_container(p["namespace"], p["pod"], p["container"])
            what = f"{what}/{p['container']}"
            expected = remotecommand.expected_streams(opts, protocol)
            accept = remotecommand.accept_exec_stream(expected, set())
            clock = self.clock

            async def runner(conn: spdy.SpdyConnection) -> None:
                await remoteexec.serve_exec(
                    conn, opts=opts, protocol=protocol, container_id=cid, start=start, clock=clock, what=what
                )
        elif route.endpoint == "attach":
            protocol = remotecommand.negotiate(offered, remotecommand.EXEC_PROTOCOLS)
            query = parse_qs(urlsplit(request.target).query, keep_blank_values=True)
            opts = remotecommand.parse_exec_options({**query, "command": ["(attach)"]})
            cid = self._api.running_container(p["namespace"], p["pod"], p["container"])
            sock_path = self._api.attach_socket(cid)
            what = f"{what}/{p['container']}"
            expected = remotecommand.expected_streams(opts, protocol)
            accept = remotecommand.accept_exec_stream(expected, set())
            clock = self.clock

            api = self._api

            async def runner(conn: spdy.SpdyConnection) -> None:
                await attach.serve_attach(
                    conn,
                    opts=opts,
                    protocol=protocol,
                    socket_path=sock_path,
                    clock=clock,
                    what=what,
                    resize=lambda w, h: api.attach_resize(cid, w, h),
                )
        else:
            protocol = remotecommand.negotiate(offered, remotecommand.PORT_FORWARD_PROTOCOLS)
            netns = self._pod_netns(p["namespace"], p["pod"])
            accept = remotecommand.accept_port_forward_stream
            clock = self.clock

            async def runner(conn: spdy.SpdyConnection) -> None:
                await portforward.serve_port_forward(conn, netns=netns, clock=clock, what=what)

        self._check_session_room()
        limits = self._spdy_limits

        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, initial: bytes) -> None:
            conn = spdy.SpdyConnection(
                reader,
                writer,
                clock=clock,
                accept=accept,
                limits=limits,
                initial=initial,
                name=f"{route.endpoint} {what}",
            )
            await self._counted_session(lambda: conn.run(runner), writer)

        return Upgrade(101, headers=[(remotecommand.PROTOCOL_HEADER, protocol)], protocol=spdy.UPGRADE, run_streams=run)

    def _websocket_exec(self, route: NodeRoute, request: Request) -> Response:
        """exec and attach over kubelet's WebSocket channel protocols (edgelet.streaming.wschannel)."""
        from urllib.parse import parse_qs

        from edgelet.streaming import attach, remotecommand, remoteexec, wschannel

        if route.endpoint == "port_forward":
            return self._websocket_port_forward(route, request)
        p = route.params
        subprotocol = wschannel.negotiate(request.headers)
        headers = wschannel.response_headers(request.headers, subprotocol)
        query = parse_qs(urlsplit(request.target).query, keep_blank_values=True)
        attaching = route.endpoint == "attach"
        opts = remotecommand.parse_exec_options({**query, "command": ["(attach)"]} if attaching else query)
        start = self._api.start_exec
        if start is None and not attaching:
            raise HttpError(404, "exec is not available in this agent")
        cid = self._api.running_container(p["namespace"], p["pod"], p["container"])
        api = self._api
        what = f"{p['namespace']}/{p['pod']}/{p['container']}"
        protocol = wschannel.exec_protocol(subprotocol)
        self._check_session_room()
        clock = self.clock

        async def handler(session: wschannel.WsSession) -> None:
            channels = {name: session.channel(name) for name in remotecommand.expected_streams(opts, protocol)}
            if attaching:
                await attach.run_attach(
                    channels,
                    opts=opts,
                    protocol=protocol,
                    socket_path=api.attach_socket(cid),
                    what=what,
                    resize=lambda w, h: api.attach_resize(cid, w, h),
                )
                return
            assert start is not None
            await remoteexec.run_exec(channels, opts=opts, protocol=protocol, container_id=cid, start=start, what=what)

        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, initial: bytes) -> None:
            session = wschannel.WsSession(
                reader,
                writer,
                subprotocol=subprotocol,
                clock=clock,
                initial=initial,
                name=f"{route.endpoint} {what}",
                idle_timeout=self._spdy_limits.idle_timeout,
            )
            await self._counted_session(lambda: session.run(handler), writer)

        return Upgrade(101, headers=headers, protocol="websocket", run_streams=run)

    def _websocket_port_forward(self, route: NodeRoute, request: Request) -> Response:
        """kubelet's WebSocket port-forward: the ports in the query, channels 2i (data) and 2i+1 (error) for the
        i-th, each opened with the port in two little-endian bytes, one connection per port."""
        from urllib.parse import parse_qs

        from edgelet.streaming import portforward, wschannel

        p = route.params
        what = f"{p['namespace']}/{p['pod']}"
        subprotocol = wschannel.negotiate(request.headers, wschannel.PORT_FORWARD_PROTOCOLS)
        headers = wschannel.response_headers(request.headers, subprotocol)
        ports = wschannel.parse_ports(parse_qs(urlsplit(request.target).query, keep_blank_values=True))
        netns = self._pod_netns(p["namespace"], p["pod"])
        self._check_session_room()
        clock = self.clock

        async def handler(session: wschannel.WsSession) -> None:
            tasks = []
            try:
                for i, port in enumerate(ports):
                    data, error = session.channels[2 * i], session.channels[2 * i + 1]
                    for ch in (data, error):
                        await ch.write(port.to_bytes(2, "little"))
                    tasks.append(asyncio.ensure_future(portforward.forward(data, error, port, netns, what)))
                await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, initial: bytes) -> None:
            session = wschannel.WsSession(
                reader,
                writer,
                subprotocol=subprotocol,
                clock=clock,
                initial=initial,
                name=f"portforward {what}",
                idle_timeout=self._spdy_limits.idle_timeout,
                channels=2 * len(ports),
                readable=frozenset(range(0, 2 * len(ports), 2)),
            )
            await self._counted_session(lambda: session.run(handler), writer)

        return Upgrade(101, headers=headers, protocol="websocket", run_streams=run)

    def _check_session_room(self) -> None:
        """HttpError 429 when `max_sessions` exec, attach and port-forward sessions are already open."""
        if self.sessions >= self._max_sessions:
            raise HttpError(
                429,
                f"too many exec and port-forward sessions are open ({self._max_sessions}); try again later",
                headers=(("Retry-After", "5"),),
            )

    async def _counted_session(self, session: Callable[[], Awaitable[None]], writer: asyncio.StreamWriter) -> None:
        """Run one SPDY or WebSocket session, counted in `sessions` while it runs. The room is checked again
        here, where it is counted in the same step: upgrades checked at once all passed the first check before
        the first was counted; one beyond the cap ends its connection."""
        if self.sessions >= self._max_sessions:
            log.info("Streaming session refused: too many open", max_sessions=self._max_sessions)
            writer.close()
            return
        self.sessions += 1
        try:
            await session()
        finally:
            self.sessions -= 1

    def _pod_netns(self, namespace: str, pod: str) -> str | None:
        """The network namespace of a pod's running sandbox (None: the host's, for hostNetwork); HttpError
        404 or 409 when there is no such pod or it has no running sandbox."""
        found = [rt for rt in self._runtime_pods().values() if rt.namespace == namespace and rt.name == pod]
        if not found:
            raise HttpError(404, f'pods "{pod}" not found in namespace {namespace}')
        running = [s for rt in found for s in rt.sandboxes if s.state == "running"]
        if not running:
            raise HttpError(409, f"pod {namespace}/{pod} has no running sandbox")
        sandbox = max(running, key=lambda s: (s.attempt, s.created_at))
        if sandbox.host_network:
            return None
        netns = sandbox.netns_path()
        if netns is None:
            raise HttpError(409, f"pod {namespace}/{pod}: its sandbox has no process to find its network in")
        return netns

    async def _serve(self, route: NodeRoute) -> Response:
        e = route.endpoint
        if e == "healthz":
            return self._api.healthz(verbose="verbose" in route.query)
        if e == "pods":
            return self._api.pods()
        if e == "runningpods":
            return Response(200, msgspec.json.encode(running_pods(self._runtime_pods())), JSON)
        if e == "metrics":
            if self._metrics is None:
                raise HttpError(404, "metrics are not enabled")
            from edgelet.server.metrics import CONTENT_TYPE

            return Response(200, self._metrics.render("kubelet"), CONTENT_TYPE)
        if e in ("metrics_resource", "metrics_cadvisor", "stats_summary"):
            from edgelet.stats import summary

            snap = await asyncio.to_thread(self._stats.snapshot)
            if e == "stats_summary":
                return Response(200, msgspec.json.encode(summary.summary(snap)), JSON)
            body = (
                summary.resource_metrics(snap)
                if e == "metrics_resource"
                else summary.cadvisor_metrics(snap, self._cgroup_root)
            )
            return Response(200, body, summary.CONTENT_TYPE)
        p = route.params
        opts = parse_log_options(route.query)
        if opts.follow and not opts.previous:
            if self.follows >= self._max_follows:
                raise HttpError(
                    429,
                    f"too many log streams are open ({self._max_follows}); try again later",
                    headers=(("Retry-After", "5"),),
                )
            response = await self._api.container_logs(p["namespace"], p["pod"], p["container"], opts)
            if not isinstance(response.body, bytes):
                response.body = _Counted(self, response.body)
            return response
        return await self._api.container_logs(p["namespace"], p["pod"], p["container"], opts)


class _Counted:
    """A streamed body counted in `owner.follows` from its creation until it ends or is closed (even unstarted)."""

    def __init__(self, owner: NodeApi, body: AsyncIterator[bytes]) -> None:
        self._owner = owner
        self._body = body
        self._open = True
        owner.follows += 1

    def _release(self) -> None:
        if self._open:
            self._open = False
            self._owner.follows -= 1

    def __aiter__(self) -> _Counted:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._body.__anext__()
        except BaseException:
            self._release()
            raise

    async def aclose(self) -> None:
        self._release()
        await self._body.aclose()  # type: ignore[attr-defined]


class NodeApiServer:
    """The TCP listener; a taken port is logged and retried (kubelet would exit; a device keeps its pods served)."""

    def __init__(
        self, api: NodeApi, config: NodeApiConfig, address: str, port: int, *, after: asyncio.Event | None = None
    ) -> None:
        self._api = api
        self._config = config
        self._address = address
        self._port = port
        # An address a tunnel brings (--node-api-address on it): listen once it is up, bound with IP_FREEBIND so
        # the listener outlives the interface going and coming back.
        self._after = after
        self._server = HttpServer(api.handle, max_connections=MAX_CONNECTIONS, idle_timeout=IDLE_TIMEOUT)
        self.port: int | None = None  # the bound port, once listening

    async def start(self) -> bool:
        """Try once to listen; False (logged) when the port is taken."""
        try:
            self.port = await self._server.listen_tcp(
                self._address, self._port, ssl=self._config.ssl, freebind=self._after is not None
            )
        except ServerError as exc:
            log.error("Cannot open the node API port; retrying", exc, retry_in=RETRY)
            return False
        log.info("Node API listening (TLS)", address=self._address, port=self.port)
        return True

    async def run(self) -> None:
        try:
            if self._after is not None and self.port is None:
                await self._after.wait()
            while self.port is None and not await self.start():
                await self._api.clock.sleep(RETRY)
            await asyncio.Event().wait()
        finally:
            await self._server.close()


async def build_config(
    *,
    node_name: str,
    root_dir: Path,
    addresses: list[str],
    cert: Path | None,
    key: Path | None,
    client_ca: Path | None,
    token_file: Path | None,
    grants: tuple[str, ...],
    required: Sequence[str] = (),
) -> NodeApiConfig:
    """The TLS context (the given pair, else a self-signed one under ROOT_DIR/pki), tokens and grants."""
    from edgelet.server.auth import load_token_file, parse_grant
    from edgelet.server.tls import ensure_self_signed, server_context

    if (cert is None) != (key is None):
        from edgelet.server.tls import TlsError

        raise TlsError("--tls-cert-file and --tls-private-key-file go together: give both or neither")
    if cert is None or key is None:
        cert, key = await ensure_self_signed(root_dir / "pki", node_name, addresses, required=required)
    return NodeApiConfig(
        ssl=server_context(cert, key, client_ca),
        tokens=load_token_file(token_file) if token_file is not None else {},
        grants=tuple(parse_grant(g) for g in grants),
        node_name=node_name,
    )
