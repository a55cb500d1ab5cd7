"""Termination messages of exited containers: the terminationMessagePath file, or the log tail (kubelet getTerminationMessage).

The runtime bind-mounts `<bundle>/termination-log` at the container's
terminationMessagePath; after the container exited, kubelet reads the last
4 KiB of that file. With `FallbackToLogsOnError`, a container that failed
(exit code not 0) and wrote nothing there gets the tail of its log instead:
the last 80 lines, at most 2 KiB. As kubelet keeps the path and the policy in
the container's annotations, `create_container` records what the read needs
in the bundle's (`termination_annotations`), so reading takes no pod spec:
RuncRuntime reads an exited container's message while it observes its
bundle (blocking I/O, in its observation thread), caches it per container
id once conmon recorded the exit, since an exited container's files no
longer change, and puts it in the container's record.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.logs import read_log
from edgelet.runtime.bundle import TERMINATION_LOG, termination_log_path
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


def termination_annotations(container: Container) -> dict[str, str]:
    """What `create_container` records in the bundle for the read after the exit: the policy, and whether
    the runtime's own file is read (not when terminationMessagePath is empty, as kubelet; not when a volume
    is mounted there, since then the container never wrote to the bundle's file)."""
    reads_file = bool(container.termination_message_path) and termination_log_path(container) is not None
    return {
        ANN_TERMINATION_MESSAGE_POLICY: container.termination_message_policy or DEFAULT_POLICY,
        ANN_TERMINATION_MESSAGE_FILE: "true" if reads_file else "false",
    }


def should_read_file(annotations: Mapping[str, str]) -> bool:
    # An older edgelet's bundle has no such annotation: read the file, as for a defaulted pod.
    return annotations.get(ANN_TERMINATION_MESSAGE_FILE, "true") != "false"


def wants_log_fallback(annotations: Mapping[str, str], rec: ContainerRecord) -> bool:
    return (
        annotations.get(ANN_TERMINATION_MESSAGE_POLICY, DEFAULT_POLICY) == "FallbackToLogsOnError"
        and rec.exit_code not in (None, 0)
        and rec.reason != "ContainerCannotRun"
    )


def read_at_most(path: Path, limit: int) -> bytes:
    """The last `limit` bytes of `path` (kubelet tail.ReadAtMost), refusing to follow a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            f.seek(size - limit)
        return f.read(limit)


def termination_message(bundle: Path, annotations: Mapping[str, str], rec: ContainerRecord) -> str:
    """The message of the exited container instance whose bundle is `bundle` ("" when there is none)."""
    fallback = wants_log_fallback(annotations, rec)
    text = ""
    check_logs = fallback
    if should_read_file(annotations):
        path = bundle / TERMINATION_LOG
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
