"""The actual state of a pod, rebuilt purely from what runc, the bundles and conmon's exit files say.

Gathering the observations is I/O (`runtime.observe`); judging them is
here, so every case (created, running, exited with and without an exit file,
a bundle runc no longer knows after a reboot) is a table test.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from edgelet.container.types import ContainerRecord, ContainerState, PodRuntimeStatus, SandboxRecord
from edgelet.runtime.layout import (
    ANN_ATTEMPT,
    ANN_CONTAINER_NAME,
    ANN_CONTAINER_TYPE,
    ANN_CREATED,
    ANN_GRACE,
    ANN_HASH,
    ANN_HOST_NETWORK,
    ANN_IMAGE,
    ANN_IMAGE_ID,
    ANN_INFRA,
    ANN_KIND,
    ANN_LOG_PATH,
    ANN_NAMESPACES,
    ANN_NETNS,
    ANN_POD_IPS,
    ANN_POD_NAME,
    ANN_POD_NAMESPACE,
    ANN_POD_UID,
    ANN_RUNTIME_HANDLER,
    ANN_SANDBOX_ID,
    KIND_CONTAINER,
    KIND_SANDBOX,
)

UNKNOWN_EXIT_CODE = 255  # kubelet: exit code when the runtime lost it


@dataclass(frozen=True)
class ExitInfo:
    code: int | None  # None: the file is there but unreadable
    at: float  # the exit file's mtime (when conmon recorded the exit)


@dataclass(frozen=True)
class Observed:
    """Everything known about one runc container (or one orphan bundle), gathered by I/O, judged purely."""

    id: str
    annotations: Mapping[str, str]
    runc: Mapping[str, Any] | None  # an entry of `runc list`; None when runc has no state for it
    exit: ExitInfo | None = None
    started_at: float | None = None  # from the bundle's `started` file
    oom: bool = False
    # conmon still runs (its exit file may be on the way); asked for a container runc holds created or
    # stopped, or a bundle runc does not know, when no exit is recorded yet.
    monitor_alive: bool = False
    termination_message: str = ""  # read by the runtime once the container exited (edgelet.runtime.termination)
    # A sandbox without an infra container that was started and whose namespace files are all still pinned.
    pinned_live: bool = False


def parse_runc_time(text: str | None) -> float | None:
    """Epoch seconds of runc's RFC 3339 timestamps (nanoseconds, 'Z' or an offset)."""
    if not text:
        return None
    try:
        main, _, rest = text.partition(".")
        frac = ""
        tz = ""
        if rest:
            digits = len(rest) - len(rest.lstrip("0123456789"))
            frac, tz = rest[:digits], rest[digits:]
        else:
            for i in range(len(main) - 1, 9, -1):
                if main[i] in "Z+-":
                    main, tz = main[:i], main[i:]
                    break
        base = calendar.timegm(time.strptime(main, "%Y-%m-%dT%H:%M:%S"))
        offset = 0
        if tz and tz not in ("Z", "z"):
            sign = -1 if tz[0] == "-" else 1
            hh, _, mm = tz[1:].partition(":")
            offset = sign * (int(hh) * 3600 + int(mm or 0) * 60)
        return base - offset + (float("0." + frac) if frac else 0.0)
    except (ValueError, IndexError):
        return None


def _exit_reason(code: int, oom: bool) -> str:
    if oom:
        return "OOMKilled"
    return "Completed" if code == 0 else "Error"


def judge_state(o: Observed) -> tuple[ContainerState, int | None, int | None, str, float | None]:
    """(state, pid, exit_code, reason, finished_at) of one observed container."""
    status = (o.runc or {}).get("status")
    pid = (o.runc or {}).get("pid") or None
    if status == "created":
        return "created", pid, None, "", None
    if status in ("running", "paused"):
        return "running", pid, None, "", None
    if o.exit is not None and o.exit.code is not None:
        return "exited", None, o.exit.code, _exit_reason(o.exit.code, o.oom), o.exit.at
    if o.runc is None and o.pinned_live:
        # No process to ask about: a sandbox without an infra container runs while its namespaces are pinned.
        return "running", None, None, "", None
    if status == "stopped" and o.monitor_alive:
        # The process is gone but conmon has not written the exit file yet: not a lost exit, just early.
        return "running", None, None, "", None
    if o.runc is None and o.monitor_alive:
        # A bundle created after `runc list` began: conmon runs `runc create`, which has not written its
        # state yet. Judged exited, it would show as a lost exit (255) until the next relist.
        return "created", None, None, "", None
    # runc says stopped with no exit recorded, or a bundle runc no longer knows (e.g. /run cleared by a reboot).
    return "exited", None, UNKNOWN_EXIT_CODE, "ContainerStatusUnknown", o.exit.at if o.exit else None


def format_namespaces(namespaces: Mapping[str, str]) -> str:
    """ANN_NAMESPACES' value: "<oci type>=<path>" joined by commas, in a stable order."""
    return ",".join(f"{k}={v}" for k, v in sorted(namespaces.items()))


def parse_namespaces(text: str) -> tuple[tuple[str, str], ...]:
    """The pairs of ANN_NAMESPACES; entries without '=' are skipped."""
    out = []
    for item in text.split(","):
        kind, sep, path = item.partition("=")
        if sep and kind and path:
            out.append((kind, path))
    return tuple(out)


def _float(text: str | None, default: float = 0.0) -> float:
    try:
        return float(text) if text else default
    except ValueError:
        return default


def _int(text: str | None, default: int = 0) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def _grace(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def build_record(o: Observed) -> SandboxRecord | ContainerRecord | None:
    """The typed record of one observed container; None when it is not edgelet's."""
    ann = o.annotations
    kind = ann.get(ANN_KIND)
    uid = ann.get(ANN_POD_UID)
    if kind not in (KIND_SANDBOX, KIND_CONTAINER) or not uid:
        return None
    state, pid, code, reason, finished = judge_state(o)
    runc_created = parse_runc_time((o.runc or {}).get("created"))
    created = _float(ann.get(ANN_CREATED), runc_created or 0.0)
    if kind == KIND_SANDBOX:
        return SandboxRecord(
            id=o.id,
            pod_uid=uid,
            pod_name=ann.get(ANN_POD_NAME, ""),
            pod_namespace=ann.get(ANN_POD_NAMESPACE, ""),
            attempt=_int(ann.get(ANN_ATTEMPT)),
            state=state,
            pid=pid,
            created_at=created,
            host_network=ann.get(ANN_HOST_NETWORK) == "true",
            ips=tuple(ip for ip in ann.get(ANN_POD_IPS, "").split(",") if ip),
            netns=ann.get(ANN_NETNS, ""),
            infra=ann.get(ANN_INFRA) != "false",
            namespaces=parse_namespaces(ann.get(ANN_NAMESPACES, "")),
            runtime_handler=ann.get(ANN_RUNTIME_HANDLER) or "runc",
        )
    started = o.started_at
    if started is None and state != "created" and runc_created is not None and o.runc is not None:
        started = runc_created
    ctype = ann.get(ANN_CONTAINER_TYPE, "regular")
    return ContainerRecord(
        id=o.id,
        pod_uid=uid,
        pod_name=ann.get(ANN_POD_NAME, ""),
        pod_namespace=ann.get(ANN_POD_NAMESPACE, ""),
        name=ann.get(ANN_CONTAINER_NAME, ""),
        attempt=_int(ann.get(ANN_ATTEMPT)),
        spec_hash=ann.get(ANN_HASH, ""),
        sandbox_id=ann.get(ANN_SANDBOX_ID, ""),
        state=state,
        pid=pid,
        created_at=created,
        started_at=started if state != "created" else None,
        finished_at=finished,
        exit_code=code,
        reason=reason,
        image=ann.get(ANN_IMAGE, ""),
        image_id=ann.get(ANN_IMAGE_ID, ""),
        log_path=ann.get(ANN_LOG_PATH, ""),
        container_type="init" if ctype == "init" else "regular",
        grace_period=_grace(ann.get(ANN_GRACE)),
        termination_message=o.termination_message if state == "exited" else "",
        # A created instance only: `_observe_bundle` asks whether its conmon lives for those.
        monitored=o.monitor_alive if state == "created" and o.runc is not None else True,
    )


def build_pod_statuses(observed: Iterable[Observed], pod_dirs: Iterable[str] = ()) -> dict[str, PodRuntimeStatus]:
    """Group observed containers into per-pod statuses, newest first.

    `pod_dirs` are the uids with a pod directory: one whose sandbox and containers are all gone (a kill
    in the middle of its removal) is still a pod, with nothing in it, so that it is removed as an orphan."""
    sandboxes: dict[str, list[SandboxRecord]] = {}
    containers: dict[str, list[ContainerRecord]] = {}
    for o in observed:
        rec = build_record(o)
        if isinstance(rec, SandboxRecord):
            sandboxes.setdefault(rec.pod_uid, []).append(rec)
        elif isinstance(rec, ContainerRecord):
            containers.setdefault(rec.pod_uid, []).append(rec)
    out: dict[str, PodRuntimeStatus] = {}
    for uid in sorted(set(sandboxes) | set(containers)):
        sbs = sorted(sandboxes.get(uid, []), key=lambda r: (-r.created_at, r.id))
        cs = sorted(containers.get(uid, []), key=lambda r: (-r.created_at, r.id))
        named: list[SandboxRecord | ContainerRecord] = [*sbs, *cs]
        name = next((r.pod_name for r in named if r.pod_name), "")
        ns = next((r.pod_namespace for r in named if r.pod_namespace), "")
        out[uid] = PodRuntimeStatus(uid=uid, name=name, namespace=ns, sandboxes=tuple(sbs), containers=tuple(cs))
    for uid in sorted(set(pod_dirs) - set(out)):
        out[uid] = PodRuntimeStatus(uid=uid)
    return out
