"""The local API bound to a running agent: handlers for each endpoint, and the listeners' lifetime.

Listeners (kubelet-like; see KUBELET-SEMANTICS "Local HTTP API hardening"):
a unix socket `<run_dir>/edgelet.sock`, mode 0600, serves every endpoint;
TCP `healthz_bind_address:healthz_port` (127.0.0.1:10248) serves /healthz
only, so no pod data is served unauthenticated off the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from edgelet import logs
from edgelet.api.pod import meta
from edgelet.api.pod import spec as pod_spec
from edgelet.api.pod import uid as pod_uid
from edgelet.server.health import check_health, render_health
from edgelet.server.http import JSON, HttpServer, Request, Response, ServerError, Upgrade
from edgelet.server.routes import PUBLIC_ENDPOINTS, HttpError, LogOptions, match_route, parse_log_options
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import ContainerStatus
    from edgelet.events import EventRecorder
    from edgelet.runtime.layout import RuntimePaths
    from edgelet.server.metrics import Metrics
    from edgelet.stats.collector import StatsCollector
    from edgelet.status.publisher import PodEntry, StatusPublisher
    from edgelet.streaming.localexec import StartExec
    from edgelet.util.clock import Clock

log = get_logger(__name__)

SOCKET_NAME = "edgelet.sock"
TCP_RETRY = 10.0  # seconds between attempts to open the healthz port while it is taken


def socket_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / SOCKET_NAME


@dataclass
class ApiSources:
    """What the handlers read; the health times are monotonic seconds (None: never happened)."""

    publisher: StatusPublisher
    events: EventRecorder
    paths: RuntimePaths
    clock: Clock
    last_sync_iteration: Callable[[], float | None]
    last_relist: Callable[[], float | None]
    metrics: Metrics | None = None
    node_state: Callable[[], object] | None = None  # the apiserver link (edgelet.mirror), with --kubeconfig
    node_conditions: Callable[[], object] | None = None  # the Node's conditions, with or without an apiserver
    stats: StatsCollector | None = None
    start_exec: StartExec | None = None  # the runtime's interactive exec, for `edgelet exec`
    # The rollout records (edgelet.rollout.decide.Record) and `edgelet rollout retry` (edgelet.rollout.errors).
    rollout_records: Callable[[], list] | None = None
    rollout_retry: Callable[[str], Awaitable[object]] | None = None
    # The accepted ConfigMaps and Secrets with their users (api.configobjects.ObjectReport: keys and sizes only).
    config_objects: Callable[[], list] | None = None


def _json(value: object) -> Response:
    return Response(200, msgspec.json.encode(value), JSON)


class Api:
    """The request handler: `handle` for the unix socket, `handle_public` for the TCP healthz listener."""

    def __init__(self, sources: ApiSources, *, follow_poll: float = logs.FOLLOW_POLL) -> None:
        self._s = sources
        self._poll = follow_poll

    @property
    def clock(self) -> Clock:
        return self._s.clock

    async def handle_public(self, request: Request) -> Response:
        route = match_route(request.method, request.target)
        if route.endpoint not in PUBLIC_ENDPOINTS:
            raise HttpError(
                404,
                f"the server could not find the requested resource: {route.endpoint} is served "
                "only on the local socket",
            )
        return await self.handle(request)

    async def handle(self, request: Request) -> Response:
        route = match_route(request.method, request.target)
        if route.endpoint == "healthz":
            return self.healthz(verbose="verbose" in route.query)
        if route.endpoint == "pods":
            return self.pods()
        if route.endpoint == "pods_table":
            return _json(self._s.publisher.snapshot())
        if route.endpoint == "events":
            return _json(self._s.events.snapshot())
        if route.endpoint == "metrics":
            return self.metrics()
        if route.endpoint == "node":
            if self._s.node_state is None:
                raise HttpError(404, "no apiserver is configured (--kubeconfig)")
            return _json(self._s.node_state())
        if route.endpoint == "node_conditions":
            if self._s.node_conditions is None:
                raise HttpError(404, "node conditions are not available in this agent")
            return _json(self._s.node_conditions())
        if route.endpoint == "stats_summary":
            return await self.stats_summary()
        if route.endpoint == "debug_cpu":
            return self.debug_cpu()
        p = route.params
        if route.endpoint == "rollout":
            return _json(
                sorted(self._s.rollout_records() if self._s.rollout_records is not None else [], key=lambda r: r.name)
            )
        if route.endpoint == "objects":
            reports = self._s.config_objects() if self._s.config_objects is not None else []
            return _json([r for r in reports if r.kind == p["kind"]])
        if route.endpoint == "rollout_retry":
            return await self.rollout_retry(f"{p['namespace']}/{p['pod']}")
        if route.endpoint == "exec":
            return self.exec(
                request, p["pod"], route.query.get("namespace") or None, route.query.get("container") or None
            )
        return await self.container_logs(p["namespace"], p["pod"], p["container"], parse_log_options(route.query))

    async def rollout_retry(self, name: str) -> Response:
        if self._s.rollout_retry is None:
            raise HttpError(404, "rollout is not served by this agent")
        from edgelet.rollout.errors import NoSuchRollout, RolloutError

        try:
            return _json(await self._s.rollout_retry(name))
        except NoSuchRollout as exc:
            raise HttpError(404, str(exc)) from exc
        except RolloutError as exc:
            raise HttpError(409, str(exc)) from exc

    def healthz(self, *, verbose: bool = False) -> Response:
        s = self._s
        status, body = render_health(
            check_health(s.clock.monotonic(), s.last_sync_iteration(), s.last_relist()), verbose=verbose
        )
        return Response(status, body)

    def pods(self) -> Response:
        """A v1 PodList of the pods edgelet runs, each with its latest status (kubelet's /pods)."""
        from edgelet.api.types import ListMeta, PodList

        entries = sorted(
            self._s.publisher.entries(), key=lambda e: (meta(e.pod).namespace or "", meta(e.pod).name or "")
        )
        items = [msgspec.structs.replace(e.pod, status=e.status) for e in entries]
        return _json(PodList(items=items, api_version="v1", kind="PodList", metadata=ListMeta()))

    async def stats_summary(self) -> Response:
        """kubelet's Summary API: node, pod and container usage (edgelet.stats)."""
        if self._s.stats is None:
            raise HttpError(404, "stats are not enabled")
        from edgelet.stats.summary import summary

        snap = await asyncio.to_thread(self._s.stats.snapshot)
        return _json(summary(snap))

    def metrics(self) -> Response:
        if self._s.metrics is None:
            raise HttpError(404, "metrics are not enabled")
        from edgelet.server.metrics import CONTENT_TYPE

        return Response(200, self._s.metrics.render(), CONTENT_TYPE)

    def debug_cpu(self) -> Response:
        """The event loop's CPU account (edgelet.util.cpuaccount): wakeups, and per subsystem callbacks and CPU."""
        from edgelet.util import cpuaccount

        account = cpuaccount.current()
        if account is None:
            raise HttpError(404, "this agent's event loop is not accounted")
        return _json(account.snapshot())

    def exec(self, request: Request, pod: str, namespace: str | None, container: str | None) -> Upgrade:
        """`edgelet exec`: switch to the exec protocol (edgelet.streaming.execproto) for a running container.

        The pod is named as a user types it (a static pod without its node suffix, any namespace when
        unique), the container defaults to the first: one request, so the CLI needs no pods table first.
        """
        from edgelet.server.exectarget import pick_container, pick_pod, running_container_id
        from edgelet.streaming import execproto
        from edgelet.streaming.localexec import serve_session

        start = self._s.start_exec
        if start is None:
            raise HttpError(404, "exec is not available in this agent")
        headers = {k.lower(): v for k, v in request.headers}
        if headers.get("upgrade", "").lower() != execproto.UPGRADE:
            raise HttpError(400, f"exec needs `Upgrade: {execproto.UPGRADE}` (use `edgelet exec`)")
        entries = [(meta(e.pod).namespace or "default", meta(e.pod).name or "", e) for e in self._s.publisher.entries()]
        entry = pick_pod(entries, pod, namespace, self._s.publisher.node_name)
        ns, name = meta(entry.pod).namespace or "default", meta(entry.pod).name or ""
        spec = pod_spec(entry.pod)
        names = [c.name for c in [*(spec.init_containers or []), *(spec.containers or [])]]
        chosen, note = pick_container(names, container, f"{ns}/{name}")
        cid = running_container_id(entry.status, chosen, f"{ns}/{name}")
        what = f"{ns}/{name}/{chosen}"
        extra = [(execproto.CONTAINER_HEADER, chosen)] + ([(execproto.NOTE_HEADER, note)] if note else [])
        return Upgrade(
            101, headers=extra, protocol=execproto.UPGRADE, run=lambda sock: serve_session(sock, cid, start, what)
        )

    @property
    def start_exec(self) -> StartExec | None:
        return self._s.start_exec

    def running_container(self, namespace: str, pod: str, container: str) -> str:
        """The runtime id of a running container named as the apiserver names it (kubectl exec through the node
        API); HttpError 404 (no such pod or container) or 409 (not running)."""
        from edgelet.server.exectarget import running_container_id

        entry = self._entry(namespace, pod)
        spec = pod_spec(entry.pod)
        names = [c.name for c in [*(spec.init_containers or []), *(spec.containers or [])]]
        if container not in names:
            raise HttpError(404, f"container {container!r} not found in pod {namespace}/{pod}")
        return running_container_id(entry.status, container, f"{namespace}/{pod}")

    def attach_socket(self, container_id: str) -> Path:
        """conmon's attach socket of a container (SOCK_SEQPACKET; conmon links its bundle under the socket dir
        by the container's id, which keeps the path short enough for a unix socket)."""
        return self._s.paths.socket_dir / container_id / "attach"

    def attach_resize(self, container_id: str, width: int, height: int) -> None:
        """Resize a `tty: true` container's console through conmon's control FIFO (OSError when conmon is gone)."""
        from edgelet.runtime.conmon import CONTROL_FIFO, resize_message

        fd = os.open(self._s.paths.socket_dir / container_id / CONTROL_FIFO, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.write(fd, resize_message(width, height))
        finally:
            os.close(fd)

    def _entry(self, namespace: str, pod: str) -> PodEntry:
        for e in self._s.publisher.entries():
            if (meta(e.pod).namespace or "default") == namespace and meta(e.pod).name == pod:
                return e
        raise HttpError(404, f"pod {namespace}/{pod} not found")

    def _instance_finished(self, uid: str, container: str, attempt: int, container_dir: Path) -> bool:
        entry = self._s.publisher.get(uid)
        if entry is None or any(a > attempt for a in logs.container_attempts(container_dir)):
            return True
        for cs in [*(entry.status.init_container_statuses or []), *(entry.status.container_statuses or [])]:
            if cs.name == container:
                return is_instance_finished(cs, attempt)
        return True

    async def container_logs(self, namespace: str, pod: str, container: str, opts: LogOptions) -> Response:
        entry = self._entry(namespace, pod)
        spec = pod_spec(entry.pod)
        names = [c.name for c in [*(spec.init_containers or []), *(spec.containers or [])]]
        if container not in names:
            raise HttpError(404, f"container {container!r} not found in pod {namespace}/{pod}")
        uid = pod_uid(entry.pod)
        container_dir = self._s.paths.pod_log_dir(namespace, pod, uid) / container
        try:
            path = logs.find_log_file(container_dir, previous=opts.previous)
        except logs.LogNotFoundError:
            which = "previous terminated container" if opts.previous else "container"
            raise HttpError(400, f"{which} {container!r} in pod {namespace}/{pod} has no log yet") from None
        since = opts.since_seconds
        try:
            # Across the instance's rotated files; the cursor follows on across later rotations.
            data, cursor = await asyncio.to_thread(
                logs.open_log, path, tail=opts.tail_lines, timestamps=opts.timestamps or since is not None
            )
        except OSError as exc:
            raise HttpError(500, f"cannot read {path}: {exc.strerror or exc}") from exc
        if since is not None:
            data = since_filter(data, self._s.clock.now() - since, keep_timestamps=opts.timestamps)
        if not opts.follow or opts.previous:
            cursor.close()
            return Response(200, data if opts.limit_bytes is None else data[: opts.limit_bytes])
        cursor.timestamps = opts.timestamps
        attempt = int(path.stem)

        def finished() -> bool:
            return self._instance_finished(uid, container, attempt, container_dir)

        body = _prepend(data, logs.follow_cursor(cursor, finished, poll=self._poll, clock=self._s.clock))
        return Response(200, body if opts.limit_bytes is None else _limit(body, opts.limit_bytes))


def is_instance_finished(cs: ContainerStatus, attempt: int) -> bool:
    """Whether instance `attempt` of a container has exited, as its status tells (a follow then ends).

    Status lags the runtime by a sync: a container not yet reported running
    (waiting, never terminated) is still to be followed.
    """
    restarts = cs.restart_count or 0
    if restarts != attempt:
        return restarts > attempt
    state = cs.state
    if state is None or state.running is not None:
        return False
    if state.terminated is not None:
        return True
    return cs.last_state is not None and cs.last_state.terminated is not None


def _rfc3339_seconds(stamp: bytes) -> float | None:
    """A CRI log timestamp (RFC3339Nano, `Z` or an offset) as epoch seconds; None when unreadable."""
    from datetime import datetime

    text = stamp.decode("ascii", "replace")
    head, dot, rest = text.partition(".")
    frac, zone = "", rest
    if dot:
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        frac, zone = rest[:i], rest[i:]
    else:
        head, zone = text[:19], text[19:]
    try:
        base = datetime.fromisoformat(head + ("+00:00" if zone in ("Z", "") else zone)).timestamp()
    except ValueError:
        return None
    return base + (float("0." + frac) if frac else 0.0)


def since_filter(data: bytes, cutoff: float, *, keep_timestamps: bool) -> bytes:
    """Lines (each prefixed with its CRI timestamp) written at or after `cutoff`; the prefix kept only if asked.

    A line whose time cannot be read is kept (it is shown rather than lost).
    """
    out = []
    for line in data.splitlines(keepends=True):
        stamp, sep, rest = line.partition(b" ")
        when = _rfc3339_seconds(stamp) if sep else None
        if when is not None and when < cutoff:
            continue
        out.append(line if keep_timestamps or when is None else rest)
    return b"".join(out)


async def _limit(body: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """At most `limit` bytes of `body` (kubectl logs --limit-bytes), then the stream ends."""
    left = limit
    try:
        async for chunk in body:
            yield chunk[:left]
            left -= len(chunk)
            if left <= 0:
                return
    finally:
        await body.aclose()  # type: ignore[attr-defined]


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        if first:
            yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


class ApiServer:
    """Runs the listeners under the agent's TaskGroup; cancellation closes them and removes the socket."""

    def __init__(
        self, api: Api, run_dir: Path, *, healthz_port: int = 10248, healthz_bind_address: str = "127.0.0.1"
    ) -> None:
        self._api = api
        self.socket = socket_path(run_dir)
        self._port = healthz_port
        self._address = healthz_bind_address
        self._server = HttpServer(api.handle)
        self.healthz_port: int | None = None  # the bound port, once listening
        self._started = False

    async def start(self) -> None:
        """Open the unix socket; an error here is fatal (the CLI could not reach the agent)."""
        await self._server.listen_unix(self.socket)
        self._started = True
        log.info("API listening", socket=str(self.socket))

    async def run(self) -> None:
        """Serve until cancelled (starting the socket if `start` was not called), then close."""
        try:
            if not self._started:
                await self.start()
            if self._port:
                await self._listen_healthz()
            await asyncio.Event().wait()
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop listening, drop open connections and remove the socket; safe to call twice."""
        await self._server.close()
        if self._started:
            self._started = False
            with contextlib.suppress(FileNotFoundError):
                self.socket.unlink()

    async def _listen_healthz(self) -> None:
        # kubelet logs a healthz listener failure and keeps going; so does edgelet, retrying.
        while True:
            try:
                self.healthz_port = await self._server.listen_tcp(self._address, self._port, self._api.handle_public)
            except ServerError as exc:
                log.error("Failed to start the healthz server; retrying", exc, retry_in=TCP_RETRY)
                await self._api.clock.sleep(TCP_RETRY)
                continue
            log.info("Healthz listening", address=self._address, port=self.healthz_port)
            return


__all__ = ["Api", "ApiServer", "ApiSources", "ServerError", "socket_path"]
