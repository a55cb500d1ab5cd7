"""Errors of trusted delivery, each naming the file, field, image or signature it is about.

Hierarchy::

    TrustError                      anything that stops a signed delivery from being trusted
    ├── PolicyError                 a signature policy (containers-policy.json) cannot be used: file, field, reason
    └── ImageSignatureError         an image the policy does not accept: reference, scope, reason

Adapters wrap OSError, JSON and cryptography errors at the boundary with `raise ... from exc`.
"""

from __future__ import annotations

from pathlib import Path

from edgelet.errors import EdgeletError


class TrustError(EdgeletError):
    """Base class; `str()` is a complete sentence naming what was refused and why."""


class PolicyError(TrustError):
    """The policy file is unreadable, not JSON, or has a field edgelet cannot honour (fail closed, at start)."""

    def __init__(self, path: Path | str, field: str, reason: str) -> None:
        self.path = str(path)
        self.field = field
        self.reason = reason
        where = f" field {field}" if field else ""
        super().__init__(f"signature policy {self.path}{where}: {reason}")


class ImageSignatureError(TrustError):
    """The policy refuses the image: rejected scope, no signature, or no signature that verifies and matches."""

    def __init__(self, reference: str, reason: str, *, scope: str = "", policy: str = "") -> None:
        self.reference = reference
        self.reason = reason
        self.scope = scope
        self.policy = policy
        by = f"signature policy {policy}" if policy else "signature policy"
        if scope:
            by += f" (scope {scope!r})"
        super().__init__(f"{by} refuses {reference}: {reason}")
