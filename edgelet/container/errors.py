"""Failures of the container runtime layer, each carrying the context needed to act on it.

Hierarchy::

    RuntimeError_                  anything the runtime layer raises
    ├── ExecError                  a subprocess exited non-zero (command, exit code, stderr tail)
    │   └── ExecTimeout            a subprocess outlived its timeout and was killed
    ├── ContainerNotFound          no runc state and no bundle for a container id
    ├── SandboxError               the pause sandbox could not be created or is not running
    ├── CreateContainerError       building the bundle, mounting or `conmon`+`runc create` failed
    │   ├── CreateContainerConfigError  the pod asks for what cannot be expressed (an ocispec.SpecError)
    │   └── VolumeError            a volume or volumeMount cannot be set up (hostPath type, subPath escape)
    ├── StartContainerError        `runc start` failed (kubelet: RunContainerError)
    └── StopContainerError         the container did not exit even after SIGKILL
"""

from __future__ import annotations

from collections.abc import Sequence

from edgelet.errors import EdgeletError


def stderr_tail(stderr: bytes | str, lines: int = 5, limit: int = 2000) -> str:
    """The last few lines of a process's stderr, decoded, for error messages."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    tail = "\n".join(text.strip().splitlines()[-lines:])
    return tail[-limit:]


class RuntimeError_(EdgeletError):
    """Base of every runtime failure (the trailing underscore avoids shadowing the builtin)."""


class ExecError(RuntimeError_):
    def __init__(
        self, argv: Sequence[str], returncode: int | None, stderr: bytes | str = b"", message: str = ""
    ) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr_tail(stderr)
        text = message or f"exit code {returncode}"
        if self.stderr:
            text += f": {self.stderr}"
        super().__init__(f"{' '.join(self.argv[:4])}{' ...' if len(self.argv) > 4 else ''}: {text}")


class ExecTimeout(ExecError):
    def __init__(self, argv: Sequence[str], timeout: float, stderr: bytes | str = b"") -> None:
        self.timeout = timeout
        super().__init__(argv, None, stderr, message=f"timed out after {timeout:g}s")


class ContainerNotFound(RuntimeError_):
    def __init__(self, container_id: str) -> None:
        self.container_id = container_id
        super().__init__(f"container {container_id} not found")


class SandboxError(RuntimeError_):
    """The pod's sandbox (its namespaces, or its pause process) could not be made or used."""


class CreateContainerError(RuntimeError_):
    """A container could not be created; whatever was half-made has been removed."""


class CreateContainerConfigError(CreateContainerError):
    """The pod asks for something no runtime could do (kubelet's CreateContainerConfigError); fix the manifest."""


class StartContainerError(RuntimeError_):
    """`runc start` failed."""


class VolumeError(CreateContainerError):
    """A volume or volume mount of the pod cannot be set up."""


class StopContainerError(RuntimeError_):
    """A container did not exit after SIGKILL."""
