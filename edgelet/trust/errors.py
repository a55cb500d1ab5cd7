"""Errors of trusted delivery: key files and policies that cannot be used, signatures that are refused.

Hierarchy::

    TrustError                 anything about keys, policies and signatures
    ├── KeyFileError           a --trusted-keys file or directory that cannot be used (names file and line)
    ├── SignatureRefused       a manifest or archive whose signature is refused; `reason` is one of REASONS
    ├── PolicyError            a signature policy (containers-policy.json) cannot be used: file, field, reason
    └── ImageSignatureError    a registry image the policy does not accept: reference, scope, reason

Parsers and adapters wrap OSError, JSON, binascii, struct and cryptography errors with `raise ... from exc`.
"""

from __future__ import annotations

from pathlib import Path

from edgelet.errors import EdgeletError

# Why a signature is refused (shown in events, logs and `edgelet pods`).
MISSING = "missing"  # no signature file beside it, or none served
MALFORMED = "malformed"  # the signature file cannot be parsed
BAD = "bad"  # it does not match the body (a changed body, a signature of another file)
UNKNOWN_KEY = "unknown key"  # made by a key that is not trusted
EXPIRED = "expired"  # the SSH key is outside its valid-after/valid-before
WRONG_NAMESPACE = "wrong namespace"  # an SSH signature made for another use
REPLAY = "replay"  # a signed version older than one already accepted
REASONS = (MISSING, MALFORMED, BAD, UNKNOWN_KEY, EXPIRED, WRONG_NAMESPACE, REPLAY)


class TrustError(EdgeletError):
    """Base class; `str()` names the file, URL or key it is about."""


class KeyFileError(TrustError):
    """A trusted-keys file or directory that cannot be used: unreadable, world-writable or malformed."""

    def __init__(self, path: str, reason: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"--trusted-keys {where}: {reason}")


class SignatureRefused(TrustError):
    """A signature that does not make its body trusted; `reason` is one of REASONS, `key_id` the key if known."""

    def __init__(self, reason: str, detail: str, *, key_id: str | None = None, signature: str | None = None) -> None:
        self.reason = reason
        self.detail = detail
        self.key_id = key_id
        self.signature = signature  # the signature file or URL, when there was one
        key = f" key {key_id}" if key_id else ""
        where = f" ({signature})" if signature else ""
        super().__init__(f"signature refused ({reason}){key}: {detail}{where}")


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
