"""Errors of the image subsystem, each carrying the archive, blob, path or reference it is about.

Hierarchy::

    ImageError                      anything that went wrong with an image
    ├── InvalidReference            a reference or digest string that does not parse (also a ValueError)
    ├── ImageNotFound               no image in the store matches a reference (also a KeyError)
    ├── ArchiveError                an archive is malformed: missing/oversized JSON, bad structure
    │   └── PlatformNotFound        no manifest for this machine's os/architecture
    ├── BlobError                   a blob is missing, or its digest or size does not match
    ├── DecompressError             the zstd reader is missing or failed (the caller names the layer or archive)
    ├── UnpackError                 a layer tar could not be applied
    │   ├── UnsafeLayerError        a member would write outside the root or through a symlink
    │   └── LayerTooLarge           the uncompressed layer does not fit (a decompression bomb, a full disk)
    ├── StoreError                  the store's own files cannot be read or written
    ├── CredentialError             a registry credential file exists but cannot be used
    ├── PullError                   a registry pull failed (refused, unreachable, unusable answer)
    │   ├── ManifestError           the registry's manifest cannot be used here
    │   └── ImageSignatureRefused   the signature policy does not accept the image (edgelet.trust)
    └── ImageUnavailable            a container's image cannot be had now (kubelet's waiting reason)

Adapters wrap OSError, tarfile and JSON errors at the boundary with `raise ... from exc`.
"""

from __future__ import annotations

from pathlib import Path

from edgelet.errors import EdgeletError


class ImageError(EdgeletError):
    """Base class; `str()` is a complete sentence naming what failed and where."""


class InvalidReference(ImageError, ValueError):
    def __init__(self, reference: str, reason: str) -> None:
        self.reference = reference
        self.reason = reason
        super().__init__(f"invalid image reference {reference!r}: {reason}")


class ImageNotFound(ImageError, KeyError):
    def __init__(self, reference: str) -> None:
        self.reference = reference
        super().__init__(reference)

    def __str__(self) -> str:
        return f"image {self.reference!r} is not in the store"


class ArchiveError(ImageError):
    def __init__(self, archive: Path | str, reason: str) -> None:
        self.archive = str(archive)
        self.reason = reason
        super().__init__(f"image archive {self.archive}: {reason}")


class PlatformNotFound(ArchiveError):
    def __init__(self, archive: Path | str, wanted: str, available: list[str]) -> None:
        self.wanted = wanted
        self.available = available
        super().__init__(archive, f"no image for platform {wanted} (available: {', '.join(available) or 'none'})")


class BlobError(ImageError):
    def __init__(self, digest: str, reason: str, *, source: Path | str | None = None) -> None:
        self.digest = digest
        self.reason = reason
        self.source = str(source) if source is not None else None
        where = f" from {self.source}" if self.source else ""
        super().__init__(f"blob {digest}{where}: {reason}")


class UnpackError(ImageError):
    def __init__(self, layer: Path | str, reason: str, *, member: str | None = None) -> None:
        self.layer = str(layer)
        self.member = member
        self.reason = reason
        what = f" member {member!r}" if member is not None else ""
        super().__init__(f"layer {self.layer}{what}: {reason}")


class DecompressError(ImageError):
    """The zstd program is missing or failed; the caller adds the layer or archive it was reading."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnsafeLayerError(UnpackError):
    """A member tried to escape the root (`..`, a symlinked parent, a hardlink out); nothing outside was written."""


class StoreError(ImageError):
    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"image store {self.path}: {reason}")


class CredentialError(ImageError):
    """The credential file exists but cannot be used."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"registry credential file {self.path}: {reason}")


class LayerTooLarge(UnpackError):
    """The uncompressed layer is larger than the space it may take (a decompression bomb, or a full disk)."""


class PullError(ImageError):
    """A pull failed: the registry refused, was unreachable, or sent something unusable."""

    def __init__(self, reference: str, reason: str) -> None:
        self.reference = reference
        self.reason = reason
        super().__init__(f"pulling {reference}: {reason}")


class ManifestError(PullError):
    """The registry's manifest cannot be used here (schema1, no matching platform, malformed)."""


class ImageSignatureRefused(PullError):
    """The signature policy (--signature-policy) refuses the image: a reject scope, no signature, or none that
    verifies with a trusted key and names this image; nothing of it was stored. (edgelet.trust's SignatureRefused
    is the refusal of a manifest's or an archive's signature.)"""

    def __init__(self, reference: str, reason: str, *, policy: str = "", scope: str = "") -> None:
        self.policy = policy
        self.scope = scope
        where = f" {policy}" if policy else ""
        super().__init__(reference, f"signature policy{where} (scope {scope}): {reason}")
        self.reason = reason


class ImageUnavailable(ImageError):
    """The container's image cannot be had now; `reason` is the kubelet waiting reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
