"""The node API on TCP (kubelet's port 10250): TLS always, every request authenticated and authorized, kubelet's
paths and JSON: /healthz, /pods, /runningpods/, /metrics, /metrics/resource, /metrics/cadvisor, /stats/summary,
/containerLogs/{namespace}/{pod}/{container}.

It is what `kubectl logs` reaches through the apiserver and what
metrics-server scrapes. The handlers of the local API are reused (the same
PodList, health rules and log reading); what is added here is the
authentication, the authorization (edgelet.server.auth) and the endpoints
only kubelet's TCP port has.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator, Callable, Mapping
from urllib.parse import unquote, urlsplit

import msgspec

from edgelet.server.auth import (Grant, Identity, authenticate, authorize, forbidden_message, request_attributes)
from edgelet.server.http import JSON, HttpServer, Request, Response, ServerError
from edgelet.server.routes import HttpError, parse_log_options
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    import ssl

    from edgelet.container.types import PodRuntimeStatus
    from edgelet.server.api import Api
    from edgelet.server.metrics import Metrics
    from edgelet.stats.collector import StatsCollector
    from edgelet.util.clock import Clock

log = get_logger(__name__)

DEFAULT_PORT = 10250
MAX_FOLLOWS = 8  # concurrent `logs -f` streams; each holds a connection and a poll loop
MAX_CONNECTIONS = 32
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
    simple = {("healthz",): "healthz", ("pods",): "pods", ("runningpods",): "runningpods",
              ("metrics",): "metrics", ("metrics", "resource"): "metrics_resource",
              ("metrics", "cadvisor"): "metrics_cadvisor", ("stats", "summary"): "stats_summary"}
    route = None
    if tuple(segs) in simple:
        route = NodeRoute(simple[tuple(segs)], query=query)
    elif segs[:1] == ["containerLogs"]:
        if len(segs) != 4 or not all(segs[1:]):
            raise HttpError(400, "expected /containerLogs/{namespace}/{pod}/{container}")
        route = NodeRoute("container_logs", {"namespace": segs[1], "pod": segs[2], "container": segs[3]}, query)
    if route is None:
        raise HttpError(404, f"the server could not find the requested resource: {parts.path or '/'}")
    if method not in ("GET", "HEAD"):
        raise HttpError(405, f"method {method} is not allowed on {parts.path}", headers=(("Allow", "GET, HEAD"),))
    return route


def running_pods(pods: Mapping[str, "PodRuntimeStatus"]) -> dict:
    """kubelet's /runningpods/: a PodList of what runs, from the runtime (name, namespace, uid, running containers)."""
    items = []
    for uid, rt in sorted(pods.items(), key=lambda kv: (kv[1].namespace, kv[1].name)):
        running = sorted((c for c in rt.containers if c.state == "running"), key=lambda c: c.name)
        if not running and not any(s.state == "running" for s in rt.sandboxes):
            continue
        items.append({"metadata": {"name": rt.name, "namespace": rt.namespace, "uid": uid},
                      "spec": {"containers": [{"name": c.name, "image": c.image} for c in running]},
                      "status": {}})
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}


@dataclass
class NodeApiConfig:
    """Who may come in: the TLS context, the static tokens (by digest) and the grants."""

    ssl: "ssl.SSLContext"
    tokens: Mapping[bytes, Identity]
    grants: tuple[Grant, ...]
    node_name: str


class NodeApi:
    """The request handler: authenticate, authorize, then serve."""

    def __init__(self, api: "Api", config: NodeApiConfig, *, stats: "StatsCollector",
                 runtime_pods: Callable[[], Mapping[str, "PodRuntimeStatus"]], metrics: "Metrics | None",
                 cgroup_root: str, max_follows: int = MAX_FOLLOWS) -> None:
        self._api = api
        self._c = config
        self._stats = stats
        self._runtime_pods = runtime_pods
        self._metrics = metrics
        self._cgroup_root = cgroup_root
        self._max_follows = max_follows
        self.follows = 0

    @property
    def clock(self) -> "Clock":
        return self._api.clock

    async def handle(self, request: Request) -> Response:
        ident = authenticate(request.peer_cert, request.headers, self._c.tokens)
        if ident is None:
            raise HttpError(401, "Unauthorized: a client certificate signed by the client CA or a bearer token "
                                 "is required", headers=(("WWW-Authenticate", 'Bearer realm="edgelet"'),))
        path = urlsplit(request.target).path
        attrs = request_attributes(request.method, path)
        if not authorize(ident, attrs, self._c.grants):
            log.info("Node API request forbidden", user=ident.user, subresource=attrs.subresource, path=path)
            raise HttpError(403, forbidden_message(ident, attrs, self._c.node_name))
        route = match_node_route(request.method, request.target)
        return await self._serve(route)

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
            body = summary.resource_metrics(snap) if e == "metrics_resource" else \
                summary.cadvisor_metrics(snap, self._cgroup_root)
            return Response(200, body, summary.CONTENT_TYPE)
        p = route.params
        opts = parse_log_options(route.query)
        if opts.follow and not opts.previous:
            if self.follows >= self._max_follows:
                raise HttpError(429, f"too many log streams are open ({self._max_follows}); try again later",
                                headers=(("Retry-After", "5"),))
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

    def __aiter__(self) -> "_Counted":
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

    def __init__(self, api: NodeApi, config: NodeApiConfig, address: str, port: int) -> None:
        self._api = api
        self._config = config
        self._address = address
        self._port = port
        self._server = HttpServer(api.handle, max_connections=MAX_CONNECTIONS, idle_timeout=IDLE_TIMEOUT)
        self.port: int | None = None  # the bound port, once listening

    async def start(self) -> bool:
        """Try once to listen; False (logged) when the port is taken."""
        try:
            self.port = await self._server.listen_tcp(self._address, self._port, ssl=self._config.ssl)
        except ServerError as exc:
            log.error("Cannot open the node API port; retrying", exc, retry_in=RETRY)
            return False
        log.info("Node API listening (TLS)", address=self._address, port=self.port)
        return True

    async def run(self) -> None:
        try:
            while self.port is None and not await self.start():
                await self._api.clock.sleep(RETRY)
            await asyncio.Event().wait()
        finally:
            await self._server.close()


async def build_config(*, node_name: str, root_dir: Path, addresses: list[str], cert: Path | None, key: Path | None,
                       client_ca: Path | None, token_file: Path | None, grants: tuple[str, ...]) -> NodeApiConfig:
    """The TLS context (the given pair, else a self-signed one under ROOT_DIR/pki), tokens and grants."""
    from edgelet.server.auth import load_token_file, parse_grant
    from edgelet.server.tls import ensure_self_signed, server_context

    if (cert is None) != (key is None):
        from edgelet.server.tls import TlsError

        raise TlsError("--tls-cert-file and --tls-private-key-file go together: give both or neither")
    if cert is None or key is None:
        cert, key = await ensure_self_signed(root_dir / "pki", node_name, addresses)
    return NodeApiConfig(ssl=server_context(cert, key, client_ca),
                         tokens=load_token_file(token_file) if token_file is not None else {},
                         grants=tuple(parse_grant(g) for g in grants), node_name=node_name)
