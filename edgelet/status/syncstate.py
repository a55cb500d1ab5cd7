"""What the pod syncer learns of a pod between syncs and status needs: waiting reasons and probe verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PodSyncState:
    """What the syncer remembers of a pod between syncs (lost on restart, like kubelet's caches)."""

    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    pod_failed: bool = False
    # Probe verdicts by container name, filled by the probe manager: a container
    # without a readiness (startup) probe is absent and counts as ready (started)
    # once running, as kubelet's status manager has it.
    ready: dict[str, bool] = field(default_factory=dict)
    started: dict[str, bool] = field(default_factory=dict)
    host_access_warned: bool = False
    # Evicted under node pressure: (reason, message) while the pod is held stopped; `readmitted` once the
    # pressure is gone, so the next status starts afresh instead of staying Failed.
    evicted: tuple[str, str] | None = None
    evict_grace: float | None = None  # the grace period of the eviction's kill (None: the pod's own)
    readmitted: bool = False
    # Refused before it ran: its limits need cgroup controllers the kernel lacks. (reason, message); final for
    # this pod (a changed manifest is a new pod).
    refused: tuple[str, str] | None = None
    admitted: bool = False  # the admission check passed (or warned) once; not repeated
    # Ids of created instances whose `runc start` failed: replaced, not started again (plan.actions resumable).
    start_failed: set[str] = field(default_factory=set)
    # Monotonic end of the pod's last sync: a relist newer than that is fresh enough for the next one's before-state.
    synced_at: float | None = None
    # Monotonic time the running sync's changes to the runtime ended (it then reads its after-state); its
    # synced_at, so that the relist it read serves the next sync too. None until then.
    settled_at: float | None = None
    cached_read: bool = False  # the running sync's before-state is PLEG's cache
