"""Failures of probes and lifecycle hooks.

Hierarchy::

    ProbeError        a probe or hook could not be carried out
    ├── NetnsError    the pod's network namespace cannot be entered (pod gone, no privilege)
    ├── HookError     a postStart/preStop handler failed; the message is kubelet's
    └── probers.TooManyRedirects  an httpGet probe was redirected more than 10 times (a probe failure)
"""

from __future__ import annotations

from edgelet.errors import EdgeletError


class ProbeError(EdgeletError):
    """Base of every probe and hook failure."""


class NetnsError(ProbeError):
    def __init__(self, path: str, cause: BaseException) -> None:
        self.path = path
        super().__init__(f"cannot enter network namespace {path}: {cause}")


class HookError(ProbeError):
    """A lifecycle handler failed; `str(exc)` is the message kubelet puts in FailedPostStartHook/FailedPreStopHook."""
