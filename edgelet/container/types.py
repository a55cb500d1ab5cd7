"""The neutral records of what a container runtime holds: sandboxes, containers, a pod's whole actual state.

These are kubelet's kubecontainer types: every layer above the runtime reads
them, and none of them knows runc, conmon or a path on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ContainerState = Literal["created", "running", "exited", "unknown"]


@dataclass(frozen=True)
class Completed:
    """A finished command: exec probes, hooks and `edgelet exec` read its exit code and output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class PreparedContainer:
    """A container instance whose bundle and rootfs are made but which runc does not know yet: what
    `Runtime.prepare_container` returns, for `create_container` to finish (or `discard_prepared` to undo)
    once the pod's sandbox exists. `data` is the runtime's own (sync never reads it)."""

    id: str
    pod_uid: str
    name: str
    attempt: int
    image_id: str
    data: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class SandboxRecord:
    id: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    attempt: int
    state: ContainerState  # "running" means ready
    pid: int | None
    created_at: float
    host_network: bool = False
    ips: tuple[str, ...] = ()  # from CNI, IPv4 first; empty with hostNetwork or without a CNI network
    netns: str = ""  # the network namespace file containers join; "" when the pause process made its own
    network_ready: bool = True  # False once a CNI CHECK of its attachment failed: the sandbox is replaced
    # False: no pause process (pid None); the pod's namespaces are the files of `namespaces` (OCI type, path).
    infra: bool = True
    namespaces: tuple[tuple[str, str], ...] = ()
    # The runtime handler (runc, crun...) it was made with: its containers, new ones too, run under it.
    runtime_handler: str = "runc"

    def netns_path(self) -> str | None:
        """The network namespace file its containers joined (None with hostNetwork or when none is known)."""
        if self.host_network:
            return None
        if self.netns:
            return self.netns
        pinned = dict(self.namespaces).get("network")
        if pinned:
            return pinned
        return f"/proc/{self.pid}/ns/net" if self.pid else None


@dataclass(frozen=True)
class ContainerRecord:
    id: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    name: str
    attempt: int  # restart count of this instance (0 for the first run)
    spec_hash: str
    sandbox_id: str
    state: ContainerState
    pid: int | None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None  # set when exited; 255 when unknown
    reason: str = ""  # "Completed", "Error", "OOMKilled", "ContainerStatusUnknown"
    image: str = ""
    image_id: str = ""
    log_path: str = ""
    container_type: Literal["init", "regular"] = "regular"
    # The pod's terminationGracePeriodSeconds when it was created: an orphan (a pod removed while the agent
    # was down) is stopped with its own grace, as kubelet keeps it in the container's labels.
    grace_period: float | None = None
    # kubelet's terminationMessage of an exited instance, read by the runtime ("" while it runs, or when
    # it left none): the terminationMessagePath file, or its log's tail with FallbackToLogsOnError.
    termination_message: str = ""
    # For an instance runc holds "created": whether its conmon still runs. An agent killed while conmon ran
    # `runc create` (before it read conmon's answer) can leave the instance created with its conmon gone;
    # started, its exit would be recorded nowhere (exit code 255 for good), so it is replaced instead.
    monitored: bool = True

    @property
    def never_started(self) -> bool:
        """Created but never started: an agent killed between `runc create` and `runc start` leaves one
        ("created", or "exited" with an unknown status once killed). Its run never happened: it is no
        restart and no lastState."""
        return self.started_at is None and (
            self.state == "created" or (self.state == "exited" and self.reason == "ContainerStatusUnknown")
        )


@dataclass(frozen=True)
class PodRuntimeStatus:
    """Every sandbox and container the runtime holds for one pod UID, newest first."""

    uid: str
    name: str = ""
    namespace: str = ""
    sandboxes: tuple[SandboxRecord, ...] = ()
    containers: tuple[ContainerRecord, ...] = field(default=())

    def latest(self, name: str) -> ContainerRecord | None:
        """The newest instance (highest attempt) of the named container."""
        found = [c for c in self.containers if c.name == name]
        return max(found, key=lambda c: (c.attempt, c.created_at)) if found else None
