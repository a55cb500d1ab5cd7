"""The update package's errors.

EdgeletError
└── UpdateError              a release that cannot be used, or an update step that failed
    ├── ReleaseRefused       a release refused before it changes anything: `reason` says why (unsigned, wrong arch,
    │                        older, replayed, corrupted, ...), `release` names its file or URL
    ├── StagingError         unpacking or swapping failed (a full disk, a short download): the running release is untouched
    └── NoRollbackTarget     `edgelet update rollback` with no previous release kept
"""

from __future__ import annotations

from edgelet.errors import EdgeletError


class UpdateError(EdgeletError):
    """Names the release (file or URL) and why."""

    def __init__(self, release: str, reason: str) -> None:
        super().__init__(f"{release}: {reason}" if release else reason)
        self.release = release
        self.reason = reason


class ReleaseRefused(UpdateError):
    """The release is not applied; nothing on the device changed."""


class StagingError(UpdateError):
    """The release could not be staged or made current; the running release is untouched."""


class NoRollbackTarget(UpdateError):
    def __init__(self) -> None:
        super().__init__("", "no previous release is kept to roll back to")
