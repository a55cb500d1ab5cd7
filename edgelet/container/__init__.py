"""The container runtime seam (kubelet's kubecontainer): what sync asks of any runtime, and its records.

Contract (every method): raises `edgelet.container.errors.RuntimeError_` subclasses
with context (pod, container, command, stderr tail); never leaves a half-made
container behind on failure (it cleans what it created before raising). Calls
for one pod are serialised by the pod worker; calls for different pods may
run concurrently. Cancellation means shutdown: a cancelled call may leave
state that `list_pods` will report and a later sync will clean.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from edgelet.api.types import Container, Pod
    from edgelet.container.types import Completed, PodRuntimeStatus, PreparedContainer, SandboxRecord
    from edgelet.images.types import ImageRecord


class Runtime(Protocol):
    async def list_pods(self) -> dict[str, PodRuntimeStatus]:
        """The actual state of every pod, rebuilt from runc state, annotations and exit files."""
        ...

    async def pod_status(self, uid: str) -> PodRuntimeStatus:
        """The actual state of one pod (empty when the runtime holds nothing for it)."""
        ...

    async def run_sandbox(self, pod: Pod, attempt: int) -> SandboxRecord:
        """Create the pod dir, cgroup and a running pause sandbox holding the pod's namespaces."""
        ...

    async def create_sandbox(self, pod: Pod, attempt: int) -> SandboxRecord:
        """run_sandbox up to the pod network's attachment: the pod's namespaces exist, and containers may be
        created in them but not started. Returns the sandbox "created" when `start_sandbox` has the network
        to attach (a CNI network), "running" when nothing is left to do. On failure nothing stays."""
        ...

    async def start_sandbox(self, pod: Pod, sandbox: SandboxRecord) -> SandboxRecord:
        """Attach a created sandbox's network (CNI ADD) and finish it; returns it "running". On failure (or a
        cancellation) the sandbox stays created, never started: the caller removes the containers it created
        in it, then the sandbox (`remove_container(sandbox.id)`)."""
        ...

    async def stop_sandbox(self, sandbox_id: str) -> None:
        """Kill the pause process (containers must already be stopped)."""
        ...

    async def create_container(
        self,
        pod: Pod,
        container: Container,
        sandbox: SandboxRecord,
        image: ImageRecord,
        attempt: int,
        container_type: str = "regular",
        prepared: PreparedContainer | None = None,
    ) -> str:
        """Build the bundle, mount the rootfs and `conmon`+`runc create` it; returns the container id.

        With `prepared` (from `prepare_container` for this pod, container and attempt) only what needs the
        sandbox is left to do; on failure the prepared part is undone as well."""
        ...

    async def prepare_container(
        self,
        pod: Pod,
        container: Container,
        image: ImageRecord,
        attempt: int,
        container_type: str = "regular",
    ) -> PreparedContainer:
        """What of `create_container` needs no sandbox (bundle dir, rootfs mount, log link), so sync can do it
        while the sandbox is set up; raises as `create_container` does, leaving nothing behind."""
        ...

    async def discard_prepared(self, prepared: PreparedContainer) -> None:
        """Undo a `prepare_container` whose container will not be created (its sandbox failed); never raises."""
        ...

    async def refresh_config_volumes(self, pod: Pod) -> list[str]:
        """Bring the configMap, secret and projected volumes of a started pod up to date with the accepted
        objects, atomically (kubelet's periodic remount); the names of those rewritten. Never raises."""
        ...

    async def start_container(self, container_id: str) -> None:
        """`runc start`: the process runs the container's command."""
        ...

    async def stop_container(self, container_id: str, grace: float, signal: str = "SIGTERM") -> None:
        """Send `signal`, wait up to `grace` seconds (at least 2 s), then SIGKILL; returns once exited."""
        ...

    async def exec_sync(self, container_id: str, argv: Sequence[str], timeout: float | None) -> Completed:
        """Run `argv` in the running container and wait (probes, hooks); a non-zero exit is not an error.

        Raises ExecTimeout after killing the command when `timeout` passes, ExecError when it cannot run.
        """
        ...

    async def remove_container(self, container_id: str) -> None:
        """`runc delete`, unmount rootfs, remove bundle and exit file, and a container's log files (kubelet's
        container GC removes the log with the container; a sandbox's log stays for its successors)."""
        ...

    async def release_container(self, container_id: str) -> None:
        """Free what an exited container no longer needs (runc state, cgroup, rootfs mount), keeping its
        record for status, its writable layer and its log; idempotent, nothing for a running one."""
        ...

    async def remove_pod(self, uid: str) -> None:
        """Remove everything left for the pod: containers, sandbox, mounts, cgroups, pod dir."""
        ...
