"""Failures talking to the apiserver, each carrying the request and the server's answer.

MirrorError (edgelet.errors.EdgeletError)
├── KubeconfigError      the kubeconfig cannot be read or lacks what edgelet needs (fatal at start)
├── NodeLabelError       --node-labels outside what NodeRestriction lets a node set (fatal at start)
├── Unreachable          no HTTP answer: connection refused, timeout, TLS failure (the link is down)
└── ApiStatusError       an HTTP answer that is not 2xx: 401, 403, 404, 409, 422, 5xx
"""

from __future__ import annotations

from edgelet.errors import EdgeletError


class MirrorError(EdgeletError):
    """Root of the mirror package's errors."""


class KubeconfigError(MirrorError):
    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class NodeLabelError(MirrorError):
    """A --node-labels key the NodeRestriction admission plugin would refuse."""


class Unreachable(MirrorError):
    """The apiserver did not answer; `clock_skew` when TLS refused a certificate for its dates."""

    def __init__(self, message: str, *, method: str = "", path: str = "", clock_skew: bool = False) -> None:
        super().__init__(f"{method} {path}: {message}" if method else message)
        self.method = method
        self.path = path
        self.clock_skew = clock_skew


class ApiStatusError(MirrorError):
    """A non-2xx answer; `reason` is the Status reason (Forbidden, NotFound, Conflict, ...)."""

    def __init__(self, status: int, message: str, *, method: str = "", path: str = "", reason: str = "") -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.server_message = message
        self.method = method
        self.path = path

    @property
    def is_auth(self) -> bool:
        return self.status in (401, 403)
