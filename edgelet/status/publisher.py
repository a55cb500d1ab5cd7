"""Keeps every pod's latest status and checkpoints the pods table for `edgelet pods`."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from edgelet.sources import ORIGIN_ANNOTATION
from edgelet.state import write_atomic
from edgelet.status.snapshot import PodRow, PodsSnapshot, RejectedRow, snapshot_path
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Pod, PodStatus
    from edgelet.podconfig import ConfigState
    from edgelet.runtime.types import PodRuntimeStatus
    from edgelet.sync.syncpod import PodSyncState
    from edgelet.util.clock import Clock

log = get_logger(__name__)

SOURCE_ANNOTATION = "kubernetes.io/config.source"
SEEN_ANNOTATION = "kubernetes.io/config.seen"


@dataclass
class PodEntry:
    pod: "Pod"
    status: "PodStatus"
    row: PodRow


class StatusPublisher:
    """The status manager: `update` after each sync; `run` writes the checkpoint when it changed."""

    def __init__(self, root_dir: Path, node_name: str, clock: "Clock", interval: float = 0.5) -> None:
        self._path = snapshot_path(root_dir)
        self._node = node_name
        self._clock = clock
        self._interval = interval
        self._pods: dict[str, PodEntry] = {}
        self._rejected: list[RejectedRow] = []
        self._dirty = asyncio.Event()
        self._last_written: bytes | None = None

    def update(self, pod: "Pod", rt: "PodRuntimeStatus", st: "PodSyncState") -> None:
        from edgelet.status.compute import compute_pod_status, summarize

        prev = self._pods.get(pod.metadata.uid)
        status = compute_pod_status(
            pod, rt, waiting=st.waiting, pod_failed=st.pod_failed, now=self._clock.now(),
            previous=prev.status if prev is not None else None,
        )
        ready, text, restarts = summarize(pod, status)
        ann = pod.metadata.annotations or {}
        created = min((s.created_at for s in rt.sandboxes), default=self._clock.now())
        row = PodRow(
            namespace=pod.metadata.namespace or "default",
            name=pod.metadata.name,
            uid=pod.metadata.uid,
            ready=ready,
            status=text,
            restarts=restarts,
            created=created,
            source=ann.get(SOURCE_ANNOTATION, ""),
            origin=ann.get(ORIGIN_ANNOTATION, ""),
            phase=status.phase or "Pending",
            message="; ".join(f"{n}: {m}" for n, (_, m) in st.waiting.items() if m),
        )
        self._pods[pod.metadata.uid] = PodEntry(pod, status, row)
        self._dirty.set()

    def remove(self, uid: str) -> None:
        if self._pods.pop(uid, None) is not None:
            self._dirty.set()

    def set_config(self, config: "ConfigState") -> None:
        rows = [
            RejectedRow(source=r.source, origin=r.origin, pod=r.pod, reason=r.reason, message=r.message)
            for r in config.rejected
        ]
        for errors in config.errors.values():
            for e in errors:
                rows.append(
                    RejectedRow(source=e.source, origin=e.origin, pod=e.pod or "", reason="FailedValidation", message=e.message)
                )
        if rows != self._rejected:
            self._rejected = rows
            self._dirty.set()

    def get(self, uid: str) -> PodEntry | None:
        return self._pods.get(uid)

    def entries(self) -> list[PodEntry]:
        return list(self._pods.values())

    def snapshot(self) -> PodsSnapshot:
        return PodsSnapshot(
            written_at=self._clock.now(),
            agent_pid=os.getpid(),
            node_name=self._node,
            pods=sorted((e.row for e in self._pods.values()), key=lambda r: (r.namespace, r.name)),
            rejected=list(self._rejected),
        )

    def flush(self) -> None:
        data = msgspec.json.encode(self.snapshot())
        try:
            write_atomic(self._path, data)
        except OSError as exc:
            log.error("Failed to write pods checkpoint", exc, path=str(self._path))

    async def run(self) -> None:
        """Write the checkpoint at most every `interval` while statuses change."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await asyncio.to_thread(self.flush)
            await asyncio.sleep(self._interval)
