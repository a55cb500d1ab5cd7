"""`edgelet logs`: a container's log through the agent's /containerLogs, or from the files when it is down.

Pod and container names are resolved as a user types them: a static pod's
name with or without its `-<node>` suffix, and the container may be left
out when the pod has only one.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO
from urllib.parse import quote, urlencode

from edgelet import logs
from edgelet.api.pod import meta
from edgelet.api.pod import spec as pod_spec
from edgelet.cli.common import EXIT_OK, CommandError

if TYPE_CHECKING:
    from edgelet.settings import Settings


class LogCommandError(CommandError):
    """The pod or container cannot be told, or has no log; the message says why."""


@dataclass(frozen=True)
class LogRequest:
    namespace: str
    pod: str
    container: str | None = None
    follow: bool = False
    tail: int | None = None
    previous: bool = False
    timestamps: bool = False


def resolve_pod(pods: Sequence[tuple[str, str, str]], namespace: str, name: str) -> str:
    """The full name of the pod the user means among (namespace, name, node) triples: `name`, or `name-<node>`.

    The node comes from the agent's data, not from this command's settings,
    so a CLI without --hostname-override still finds the static pods.
    """
    in_ns = [(n, node) for ns, n, node in pods if ns == namespace]
    for n, _ in in_ns:
        if n == name:
            return n
    for n, node in in_ns:
        if node and n == f"{name}-{node}":
            return n
    raise LogCommandError(f"pod {namespace}/{name} not found")


def resolve_container(containers: Sequence[str], requested: str | None, pod: str) -> str:
    if requested is not None:
        if requested not in containers:
            raise LogCommandError(f"container {requested!r} not found in pod {pod} (it has: {', '.join(containers)})")
        return requested
    if len(containers) == 1:
        return containers[0]
    if not containers:
        raise LogCommandError(f"pod {pod} has no container logs")
    raise LogCommandError(f"pod {pod} has several containers; name one of: {', '.join(containers)}")


def log_query(req: LogRequest) -> str:
    params: dict[str, str] = {}
    if req.tail is not None and req.tail >= 0:  # kubectl: --tail=-1 is everything
        params["tailLines"] = str(req.tail)
    for flag in ("follow", "previous", "timestamps"):
        if getattr(req, flag):
            params[flag] = "true"
    return ("?" + urlencode(params)) if params else ""


def print_logs(settings: Settings, req: LogRequest, out: TextIO, err: TextIO) -> int:
    """Write the log to `out`; raises LogCommandError (or the client's AgentError) when it cannot."""
    import msgspec

    from edgelet.api.types import PodList
    from edgelet.cli import client

    live = client.get(settings.run_dir, "/pods")
    if live is None:
        return _print_from_files(settings, req, out)
    pods = msgspec.json.decode(live, type=PodList).items
    full = resolve_pod(
        [(meta(p).namespace or "default", meta(p).name or "", pod_spec(p).node_name or "") for p in pods],
        req.namespace,
        req.pod,
    )
    pod = next(p for p in pods if meta(p).name == full and (meta(p).namespace or "default") == req.namespace)
    names = [c.name for c in [*(pod_spec(pod).init_containers or []), *(pod_spec(pod).containers or [])]]
    container = resolve_container(names, req.container, f"{req.namespace}/{full}")
    path = "/containerLogs/" + "/".join(quote(x, safe="") for x in (req.namespace, full, container)) + log_query(req)
    with client.stream(settings.run_dir, path) as chunks:
        if chunks is None:  # the agent stopped in between
            return _print_from_files(settings, req, out)
        for chunk in chunks:
            _write(out, chunk)
    return EXIT_OK


def _write(out: TextIO, data: bytes) -> None:
    """Bytes as they are to a real stdout; decoded to a text stream (tests)."""
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        out.flush()
        buffer.write(data)
        buffer.flush()
    else:
        out.write(data.decode("utf-8", "replace"))


def _pod_log_dirs(log_dir: Path, namespace: str, name: str) -> list[Path]:
    """Log dirs of every UID the pod had, newest first."""
    found = list((log_dir / "pods").glob(f"{namespace}_{name}_*"))
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def _print_from_files(settings: Settings, req: LogRequest, out: TextIO) -> int:
    """The agent is not running: read the CRI log files directly (follow lasts until interrupted)."""
    import msgspec

    from edgelet.status.snapshot import PodsSnapshot, snapshot_path

    known: list[tuple[str, str, str]] = []
    try:
        snap = msgspec.json.decode(snapshot_path(settings.root_dir).read_bytes(), type=PodsSnapshot)
        known = [(r.namespace, r.name, snap.node_name) for r in snap.pods]
    except (OSError, msgspec.DecodeError):
        pass  # no checkpoint: the name must be the full one
    try:
        full = resolve_pod(known, req.namespace, req.pod)
    except LogCommandError:
        full = req.pod
    pod_dirs = _pod_log_dirs(settings.log_dir, req.namespace, full)
    if not pod_dirs:
        raise LogCommandError(
            f"pod {req.namespace}/{req.pod}: no logs under {settings.log_dir / 'pods'} (and edgelet is not running)"
        )
    pod_dir = pod_dirs[0]
    containers = sorted(p.name for p in pod_dir.iterdir() if p.is_dir())
    container = resolve_container(containers, req.container, f"{req.namespace}/{full}")
    try:
        path = logs.find_log_file(pod_dir / container, previous=req.previous)
    except logs.LogNotFoundError as exc:
        raise LogCommandError(str(exc)) from exc
    tail = req.tail if req.tail is not None and req.tail >= 0 else None
    data, cursor = logs.open_log(path, tail=tail, timestamps=req.timestamps)
    with cursor:
        _write(out, data)
        if not req.follow or req.previous:
            return EXIT_OK
        while True:  # across rotations, until interrupted
            chunk = cursor.read_new()
            if chunk:
                _write(out, chunk)
            else:
                time.sleep(logs.FOLLOW_POLL)


def cmd_logs(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    request = LogRequest(
        namespace=args.namespace,
        pod=args.pod,
        container=args.container,
        follow=args.follow,
        tail=args.tail,
        previous=args.previous,
        timestamps=args.timestamps,
    )
    return print_logs(settings, request, out, err)
