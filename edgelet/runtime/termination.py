"""Termination messages of exited containers: the terminationMessagePath file, or the log tail (kubelet getTerminationMessage).

The runtime bind-mounts `<bundle>/termination-log` at the container's
terminationMessagePath; after the container exited, kubelet reads the last
4 KiB of that file. With `FallbackToLogsOnError`, a container that failed
(exit code not 0) and wrote nothing there gets the tail of its log instead:
the last 80 lines, at most 2 KiB. Reading is blocking I/O; the status
publisher calls this through the function app.py hands it, and caches the
result per container id, since an exited container's files no
longer change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.logs import read_log
from edgelet.runtime.bundle import DEFAULT_TERMINATION_MESSAGE_PATH, TERMINATION_LOG, PodLayout
from edgelet.runtime.layout import ANN_TERMINATION_MESSAGE_FILE, ANN_TERMINATION_MESSAGE_POLICY
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.api.types import Container
    from edgelet.container.types import ContainerRecord

log = get_logger(__name__)

MAX_MESSAGE_BYTES = 4096  # kubecontainer.MaxContainerTerminationMessageLength
MAX_LOG_BYTES = 2048  # kubecontainer.MaxContainerTerminationMessageLogLength
MAX_LOG_LINES = 80  # kubecontainer.MaxContainerTerminationMessageLogLines

DEFAULT_POLICY = "File"  # kubelet's default for terminationMessagePolicy


def termination_annotations(container: "Container") -> dict[str, str]:
    """What `create_container` records in the bundle for the read after the exit: the policy, and whether
    the runtime's own file is read (not when terminationMessagePath is empty, as kubelet; not when a volume
    is mounted there, since then the container never wrote to the bundle's file)."""
    reads_file = bool(container.termination_message_path) and not _mounted_by_volume(container)
    return {
        ANN_TERMINATION_MESSAGE_POLICY: container.termination_message_policy or DEFAULT_POLICY,
        ANN_TERMINATION_MESSAGE_FILE: "true" if reads_file else "false",
    }


def termination_log_file(pods_dir: Path, rec: "ContainerRecord") -> Path:
    """Where the runtime keeps the instance's termination-log file (`<root>/pods/<uid>/containers/<name>/<n>/`)."""
    return PodLayout(pods_dir / rec.pod_uid).container_dir(rec.name, rec.attempt) / TERMINATION_LOG


def read_at_most(path: Path, limit: int) -> bytes:
    """The last `limit` bytes of `path` (kubelet tail.ReadAtMost), refusing to follow a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            f.seek(size - limit)
        return f.read(limit)


def wants_log_fallback(container: "Container", rec: "ContainerRecord") -> bool:
    return (container.termination_message_policy == "FallbackToLogsOnError"
            and rec.exit_code not in (None, 0) and rec.reason != "ContainerCannotRun")


def _mounted_by_volume(container: "Container") -> bool:
    tpath = (container.termination_message_path or DEFAULT_TERMINATION_MESSAGE_PATH).rstrip("/")
    return any(vm.mount_path.rstrip("/") == tpath for vm in container.volume_mounts or [])


def termination_message(pods_dir: Path, container: "Container", rec: "ContainerRecord") -> str:
    """The message of an exited container instance ("" when there is none)."""
    fallback = wants_log_fallback(container, rec)
    text = ""
    check_logs = fallback
    if container.termination_message_path and not _mounted_by_volume(container):
        path = termination_log_file(pods_dir, rec)
        try:
            data = read_at_most(path, MAX_MESSAGE_BYTES)
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            # kubelet puts the read error into the message itself.
            return f"Error on reading termination log {path}: {exc}"
        text = data.decode("utf-8", errors="replace")
        check_logs = fallback and not data
    if check_logs and rec.log_path:
        try:
            content, _ = read_log(Path(rec.log_path), tail=MAX_LOG_LINES)
        except FileNotFoundError:
            content = b""
        except OSError as exc:
            log.warning("Cannot read the log tail for a termination message", path=rec.log_path, err=str(exc))
            content = b""
        text = content[:MAX_LOG_BYTES].decode("utf-8", errors="replace")
    return text
