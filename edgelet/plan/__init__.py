"""The kubelet's pod sync decision table as pure functions (computePodActions and backoff)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ContainerToStart:
    name: str
    attempt: int  # restart count the new instance will have
    container_type: str = "regular"  # "init" | "regular"
    # The id of a created, never-started instance to start (`runc start`) instead of creating a new one:
    # an agent killed between a container's create and its start left it, its conmon waiting.
    existing: str | None = None


@dataclass(frozen=True)
class PodActions:
    """What one sync of a pod must do, in kubelet's order: kill, sandbox, init, containers."""

    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_attempt: int = 0
    sandbox_id: str | None = None  # the live sandbox to use when not creating one
    # container id -> reason ("spec changed", "restart policy", ...)
    containers_to_kill: Mapping[str, str] = field(default_factory=dict)
    next_init_container: ContainerToStart | None = None
    containers_to_start: tuple[ContainerToStart, ...] = ()
    # container name -> (reason, message) for containers that wait, e.g. CrashLoopBackOff
    waiting: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # container ids of exited instances that can be removed: per name, all but the current (newest)
    # instance and the newest exited one before it, which is the container's lastState
    containers_to_remove: tuple[str, ...] = ()
    pod_failed: bool = False  # restartPolicy Never and an init container failed
    # Nothing of the pod will run again (all main containers finished for good, or the pod failed):
    # stop what `containers_to_kill` names and the sandbox, but keep the exited containers, whose
    # records are the pod's final status. `kill_pod` is only ever set together with `create_sandbox`.
    pod_finished: bool = False


from edgelet.plan.actions import compute_pod_actions, compute_pod_kill  # noqa: E402  (actions.py imports the types above)

__all__ = ["ContainerToStart", "PodActions", "compute_pod_actions", "compute_pod_kill"]
