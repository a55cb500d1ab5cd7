"""Pure request parsing for the local API: which endpoint a method and target name, its parameters, error bodies.

Errors are `HttpError`s carrying the status code and a Kubernetes `Status`
reason, rendered as a v1 Status JSON body as the kubelet and the apiserver
do, so clients that speak Kubernetes understand them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import msgspec

from edgelet.errors import EdgeletError

# Endpoints and the methods they answer; HEAD is GET without the body.
ENDPOINTS = (
    "healthz",
    "pods",
    "pods_table",
    "events",
    "metrics",
    "node",
    "container_logs",
    "stats_summary",
    "exec",
    "node_conditions",
    "rollout",
    "rollout_retry",
)
# What the TCP healthz listener may serve: nothing with pod data leaves the unix socket.
PUBLIC_ENDPOINTS = frozenset({"healthz"})
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    429: "TooManyRequests",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class HttpError(EdgeletError):
    """A request the API refuses; `status` is the HTTP code, the message goes into the Status body."""

    def __init__(self, status: int, message: str, *, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers

    @property
    def reason(self) -> str:
        return _REASONS.get(self.status, "Unknown")


class StatusBody(msgspec.Struct, kw_only=True):
    """meta/v1 Status as a failure body (only the fields edgelet fills)."""

    kind: str = "Status"
    apiVersion: str = "v1"
    metadata: dict = msgspec.field(default_factory=dict)
    status: str = "Failure"
    message: str
    reason: str
    code: int


def status_body(err: HttpError) -> bytes:
    return msgspec.json.encode(StatusBody(message=err.message, reason=err.reason, code=err.status))


@dataclass(frozen=True)
class LogOptions:
    """kubelet's /containerLogs query (a subset of v1.PodLogOptions)."""

    tail_lines: int | None = None
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    limit_bytes: int | None = None


@dataclass(frozen=True)
class Route:
    endpoint: str
    params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)


def _segments(path: str) -> list[str]:
    # Split before unquoting so an encoded slash cannot forge another segment.
    return [unquote(s) for s in path.split("/") if s]


def match_route(method: str, target: str) -> Route:
    """The endpoint `method target` names; HttpError 404/405/400 when there is none."""
    parts = urlsplit(target)
    segs = _segments(parts.path)
    try:
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True, strict_parsing=False).items()}
    except ValueError as exc:
        raise HttpError(400, f"malformed query string: {exc}") from exc
    route: Route | None = None
    if segs == ["healthz"]:
        route = Route("healthz", query=query)
    elif segs == ["pods"]:
        route = Route("pods", query=query)
    elif segs == ["pods", "table"]:
        route = Route("pods_table", query=query)
    elif segs == ["events"]:
        route = Route("events", query=query)
    elif segs == ["metrics"]:
        route = Route("metrics", query=query)
    elif segs == ["node"]:
        route = Route("node", query=query)
    elif segs == ["node", "conditions"]:
        route = Route("node_conditions", query=query)
    elif segs == ["stats", "summary"]:
        route = Route("stats_summary", query=query)
    elif segs[:1] == ["containerLogs"]:
        if len(segs) != 4 or not all(segs[1:]):
            raise HttpError(400, "expected /containerLogs/{namespace}/{pod}/{container}")
        route = Route("container_logs", {"namespace": segs[1], "pod": segs[2], "container": segs[3]}, query)
    elif segs in (["configmaps"], ["secrets"]):
        route = Route("objects", {"kind": "ConfigMap" if segs[0] == "configmaps" else "Secret"}, query)
    elif segs == ["rollout"]:
        route = Route("rollout", query=query)
    elif segs == ["debug", "cpu"]:
        route = Route("debug_cpu", query=query)
    elif segs[:2] == ["rollout", "retry"]:
        if len(segs) != 4 or not all(segs[2:]):
            raise HttpError(400, "expected /rollout/retry/{namespace}/{pod}")
        if method != "POST":
            raise HttpError(405, f"method {method} is not allowed on {parts.path}", headers=(("Allow", "POST"),))
        return Route("rollout_retry", {"namespace": segs[2], "pod": segs[3]}, query)
    elif segs[:1] == ["exec"]:
        if len(segs) != 2 or not segs[1]:
            raise HttpError(400, "expected /exec/{pod}[?namespace=NS&container=C]")
        if method != "POST":
            raise HttpError(405, f"method {method} is not allowed on {parts.path}", headers=(("Allow", "POST"),))
        return Route("exec", {"pod": segs[1]}, query)
    if route is None:
        raise HttpError(404, f"the server could not find the requested resource: {parts.path or '/'}")
    if method not in ("GET", "HEAD"):
        raise HttpError(405, f"method {method} is not allowed on {parts.path}", headers=(("Allow", "GET, HEAD"),))
    return route


def _bool_param(query: dict[str, str], name: str) -> bool:
    value = query.get(name)
    if value is None:
        return False
    low = value.lower()
    if low in ("", "true", "1"):  # `?follow` alone means true, as in kubectl's URLs
        return True
    if low in ("false", "0"):
        return False
    raise HttpError(400, f"{name}: expected true or false, got {value!r}")


def _int_param(query: dict[str, str], name: str, minimum: int) -> int | None:
    raw = query.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(400, f"{name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise HttpError(
            400, f"{name}: must be {'zero or more' if minimum == 0 else f'at least {minimum}'}, got {value}"
        )
    return value


def parse_log_options(query: dict[str, str]) -> LogOptions:
    """tailLines, follow, previous, timestamps, sinceSeconds and limitBytes; a bad value is a 400 naming it."""
    return LogOptions(
        tail_lines=_int_param(query, "tailLines", 0),
        since_seconds=_int_param(query, "sinceSeconds", 1),
        limit_bytes=_int_param(query, "limitBytes", 1),
        follow=_bool_param(query, "follow"),
        previous=_bool_param(query, "previous"),
        timestamps=_bool_param(query, "timestamps"),
    )
