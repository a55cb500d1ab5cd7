"""The eviction package's errors.

EdgeletError
└── EvictionConfigError    a threshold, grace period or minimum-reclaim flag that cannot be parsed
"""

from __future__ import annotations

from edgelet.errors import EdgeletError


class EvictionConfigError(EdgeletError, ValueError):
    """Names the flag and the part of its value that is wrong."""

    def __init__(self, flag: str, reason: str) -> None:
        super().__init__(f"--{flag}: {reason}")
        self.flag = flag
        self.reason = reason
