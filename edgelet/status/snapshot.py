"""The pods table the agent checkpoints for `edgelet pods`, readable while the agent is stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec


class PodRow(msgspec.Struct, kw_only=True):
    namespace: str
    name: str
    uid: str
    ready: str  # "1/2"
    status: str  # "Running", "Completed", "CrashLoopBackOff", "ErrImageNeverPull", ...
    restarts: int
    created: float  # wall time the pod was first seen (for AGE)
    source: str  # "file" | "http"
    origin: str  # file path or URL
    phase: str = "Pending"
    message: str = ""
    # The whole Pod (apiVersion, kind, metadata, spec and the full PodStatus) as the API would serve it,
    # for `edgelet pods -o yaml|json` and `edgelet describe pod`; None in snapshots of older agents.
    pod: dict[str, Any] | None = None
    # The runtime handler (runc, crun...) its sandbox runs under; "" before it has one, or from older agents.
    runtime_handler: str = ""


class RejectedRow(msgspec.Struct, kw_only=True):
    source: str
    origin: str
    pod: str  # "namespace/name" or "" when unreadable
    reason: str
    message: str


class PodsSnapshot(msgspec.Struct, kw_only=True):
    written_at: float
    agent_pid: int
    node_name: str
    pods: list[PodRow] = []
    rejected: list[RejectedRow] = []
    # Pulls under way for pods: image (as pods name it) -> [bytes done, bytes total], for `pods -o wide` and
    # `describe pod`; only in the live table, never in the checkpoint.
    pulls: dict[str, list[int]] = {}


def snapshot_path(root_dir: Path | str) -> Path:
    return Path(root_dir) / "state" / "pods.json"
