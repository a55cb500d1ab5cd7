"""Errors of trusted delivery: key files that cannot be used, and signatures that are refused.

Hierarchy::

    TrustError                 anything about keys and signatures
    ├── KeyFileError           a --trusted-keys file or directory that cannot be used (names file and line)
    └── SignatureRefused       a manifest or archive whose signature is refused; `reason` is one of REASONS

Parsers wrap binascii, struct and cryptography errors with `raise ... from exc`.
"""

from __future__ import annotations

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
