"""The rollout package's errors.

EdgeletError
└── RolloutError          a rollout request that cannot be carried out
    ├── NoSuchRollout     the pod has no rollout record (not a static pod here, or rollout is off for it)
    └── NothingToRetry    `edgelet rollout retry` of a pod with no failed version
"""

from __future__ import annotations

from edgelet.errors import EdgeletError


class RolloutError(EdgeletError):
    """Names the pod (namespace/name) and why."""

    def __init__(self, pod: str, reason: str) -> None:
        super().__init__(f"{pod}: {reason}")
        self.pod = pod
        self.reason = reason


class NoSuchRollout(RolloutError):
    def __init__(self, pod: str) -> None:
        super().__init__(pod, "no rollout record (not a static pod of this node, or rollout is off for it)")


class NothingToRetry(RolloutError):
    def __init__(self, pod: str, phase: str) -> None:
        super().__init__(pod, f"no failed version to retry (phase {phase})")
