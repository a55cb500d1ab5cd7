"""Errors of the cgroups package.

CgroupError            a cgroup could not be created, written, read or removed (carries path)
└── CgroupBusyError    a cgroup still held tasks after the removal retries
"""

from __future__ import annotations

from pathlib import Path

from edgelet.errors import EdgeletError


class CgroupError(EdgeletError):
    """A cgroup operation failed; `path` is the file or directory involved."""

    def __init__(self, message: str, path: Path | str | None = None) -> None:
        super().__init__(f"{message}: {path}" if path is not None else message)
        self.path = Path(path) if path is not None else None


class CgroupBusyError(CgroupError):
    """rmdir kept failing with EBUSY: processes are still inside the cgroup."""
