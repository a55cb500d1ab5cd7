"""Keeps every pod's latest status and checkpoints the pods table for `edgelet pods`."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from edgelet.api.annotations import CONFIG_SOURCE, ORIGIN
from edgelet.api.pod import meta
from edgelet.api.pod import spec as pod_spec
from edgelet.api.pod import uid as pod_uid
from edgelet.state import StampedWriter, flush_when_changed
from edgelet.status.snapshot import PodRow, PodsSnapshot, RejectedRow, snapshot_path
from edgelet.util.log import get_logger


class PullShown(Protocol):
    """What the table shows of a pull under way (the images package's ProgressSnapshot has it)."""

    @property
    def done(self) -> int: ...

    @property
    def total(self) -> int: ...


if TYPE_CHECKING:
    from edgelet.api.types import Pod, PodStatus
    from edgelet.container.types import PodRuntimeStatus
    from edgelet.podconfig import ConfigState
    from edgelet.status.syncstate import PodSyncState
    from edgelet.util.clock import Clock

log = get_logger(__name__)

LOOPBACK = "127.0.0.1"


def node_ip() -> str:
    """The node's primary IPv4 address: the source address of the default route, else loopback.

    Connecting a UDP socket only picks a route; no packet is sent.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: any routable address does
            addr = s.getsockname()[0]
    except OSError:
        return LOOPBACK
    return addr if addr and addr != "0.0.0.0" else LOOPBACK


def pod_object(pod: Pod, status: PodStatus) -> dict[str, Any]:
    """The whole Pod as the API would return it (apiVersion, kind, metadata, spec, status), JSON-able."""
    obj: dict[str, Any] = msgspec.to_builtins(pod)
    obj["apiVersion"] = "v1"
    obj["kind"] = "Pod"
    obj["status"] = msgspec.to_builtins(status)
    return obj


@dataclass
class PodEntry:
    pod: Pod
    status: PodStatus
    row: PodRow


class StatusPublisher:
    """The status manager: `update` after each sync; `run` writes the checkpoint when it changed."""

    def __init__(
        self,
        root_dir: Path,
        node_name: str,
        clock: Clock,
        interval: float = 0.5,
        host_ip: str | None = None,
        *,
        pull_progress: Callable[[str], PullShown | None] | None = None,
        rollout_condition: Callable[[Pod], tuple[str, str] | None] | None = None,
    ) -> None:
        self._path = snapshot_path(root_dir)
        self._host_ip = host_ip if host_ip is not None else node_ip()
        self._node = node_name
        self._clock = clock
        self._interval = interval
        self._pods: dict[str, PodEntry] = {}
        self._rejected: list[RejectedRow] = []
        self._dirty = asyncio.Event()
        self.changed = asyncio.Event()  # set on every update or removal (--runonce judges the pods on it)
        self._file = StampedWriter(self._path, "pods checkpoint")
        # The puller's progress of an image's pull under way (when pulls are possible).
        self._pull_progress = pull_progress
        # The rollout's word on a pod (reason, message), e.g. RolledBack, shown as a condition and in the
        # table's message (edgelet.sync.rollout).
        self._rollout_condition = rollout_condition
        # Told the runtime's view of each pod as it is published (--runonce reads when each process started).
        self.observed: Callable[[PodRuntimeStatus], None] | None = None

    @property
    def node_name(self) -> str:
        return self._node

    @property
    def host_ip(self) -> str:
        return self._host_ip

    def update(self, pod: Pod, rt: PodRuntimeStatus, st: PodSyncState) -> None:
        from edgelet.status.compute import compute_pod_status, summarize

        if self.observed is not None:
            self.observed(rt)
        prev = self._pods.get(pod_uid(pod))
        if st.readmitted:
            prev = None  # an evicted pod that starts again is a new run, not a Failed pod forever
            st.readmitted = False
        status = compute_pod_status(
            pod,
            rt,
            waiting=st.waiting,
            pod_failed=st.pod_failed,
            now=self._clock.now(),
            evicted=st.evicted,
            rejected=st.refused,
            previous=prev.status if prev is not None else None,
            readiness=st.ready,
            started=st.started,  # probe verdicts (edgelet.probes.manager)
            host_ip=self._host_ip,
        )
        condition = self._rollout_condition(pod) if self._rollout_condition is not None else None
        if condition is not None:
            status = _with_rollout_condition(
                status, condition, prev.status if prev is not None else None, self._clock.now()
            )
        ready, text, restarts = summarize(pod, status)
        ann = meta(pod).annotations or {}
        created = min((s.created_at for s in rt.sandboxes), default=self._clock.now())
        row = PodRow(
            namespace=meta(pod).namespace or "default",
            name=meta(pod).name or "",
            uid=pod_uid(pod),
            ready=ready,
            status=text,
            restarts=restarts,
            created=created,
            source=ann.get(CONFIG_SOURCE, ""),
            origin=ann.get(ORIGIN, ""),
            phase=status.phase or "Pending",
            # A pod failed as a whole (evicted, refused) says why in its own message.
            # The pod's own word first (the table cuts messages), then the rollout's.
            message="; ".join(
                [
                    m
                    for m in (
                        "; ".join(f"{n}: {m}" for n, (_, m) in st.waiting.items() if m)
                        or (status.message or "" if status.reason and status.phase == "Failed" else ""),
                    )
                    if m
                ]
                + ([f"{condition[0]}: {condition[1]}"] if condition is not None else [])
            ),
            pod=pod_object(pod, status),
            runtime_handler=rt.sandboxes[0].runtime_handler if rt.sandboxes else "",
        )
        self._pods[pod_uid(pod)] = PodEntry(pod, status, row)
        self._dirty.set()
        self.changed.set()

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)
        # Written even for a pod this agent never published: an orphan terminated at start (its manifest was
        # deleted while the agent was down) is still a row of the checkpoint the previous agent wrote.
        self._dirty.set()
        self.changed.set()

    def set_config(self, config: ConfigState) -> None:
        rows = [
            RejectedRow(source=r.source, origin=r.origin, pod=r.pod, reason=r.reason, message=r.message)
            for r in config.rejected
        ]
        # A ConfigMap or Secret that is not used (named by two files, a changed immutable one): its message
        # names it, there is no pod.
        rows += [
            RejectedRow(source=o.source, origin=o.origin, pod="", reason=o.reason, message=o.message)
            for o in config.rejected_objects
        ]
        for errors in config.errors.values():
            for e in errors:
                rows.append(
                    # The problem's own reason: FailedValidation, FailedToFetch, UntrustedManifest.
                    RejectedRow(source=e.source, origin=e.origin, pod=e.pod or "", reason=e.reason, message=e.message)
                )
        if rows != self._rejected:
            self._rejected = rows
            self._dirty.set()

    def get(self, uid: str) -> PodEntry | None:
        return self._pods.get(uid)

    def entries(self) -> list[PodEntry]:
        return list(self._pods.values())

    def snapshot(self, *, live: bool = True) -> PodsSnapshot:
        """The pods table; `live` adds the pulls under way (the checkpoint leaves them out: they change by
        the byte and mean nothing once the agent is gone)."""
        return PodsSnapshot(
            written_at=self._clock.now(),
            agent_pid=os.getpid(),
            node_name=self._node,
            pods=sorted((e.row for e in self._pods.values()), key=lambda r: (r.namespace, r.name)),
            rejected=list(self._rejected),
            pulls=self._pulls() if live else {},
        )

    def _pulls(self) -> dict[str, list[int]]:
        if self._pull_progress is None:
            return {}
        out: dict[str, list[int]] = {}
        for e in self._pods.values():
            spec = pod_spec(e.pod)
            for c in [*(spec.init_containers or []), *(spec.containers or [])]:
                if c.image and c.image not in out and (p := self._pull_progress(c.image)) is not None:
                    out[c.image] = [p.done, p.total]
        return out

    def encode(self) -> bytes | None:
        """The checkpoint's bytes, taken on the loop; None when its content is what was last written.

        Every sync marks the table dirty; only a changed table is written, so the stamp says when the
        pods last changed.
        """
        return self._file.encode(self.snapshot(live=False))

    def write(self, data: bytes) -> bool:
        """Write what `encode` gave (in a thread); False when it could not be written (the caller tries again)."""
        return self._file.write(data)

    def flush(self) -> bool:
        data = self.encode()
        return True if data is None else self.write(data)

    async def run(self) -> None:
        """Write the checkpoint at most every `interval` while statuses change (encoded on the loop)."""
        await flush_when_changed(self._dirty, self.encode, self.write, self._interval, self._clock)


ROLLOUT_CONDITION = "edgelet.io/Rollout"


def _with_rollout_condition(
    status: PodStatus, condition: tuple[str, str], previous: PodStatus | None, now: float
) -> PodStatus:
    """The status with the rollout's condition (type edgelet.io/Rollout, its reason RolledBack, ...) added."""
    from edgelet.api.types import PodCondition
    from edgelet.status.compute import format_time

    old = (
        next((c for c in (previous.conditions or []) if c.type == ROLLOUT_CONDITION), None)
        if previous is not None
        else None
    )
    since = old.last_transition_time if old is not None and old.reason == condition[0] else format_time(now)
    cond = PodCondition(
        type=ROLLOUT_CONDITION, status="True", reason=condition[0], message=condition[1], last_transition_time=since
    )
    others = [c for c in status.conditions or [] if c.type != ROLLOUT_CONDITION]
    return msgspec.structs.replace(status, conditions=[*others, cond])
