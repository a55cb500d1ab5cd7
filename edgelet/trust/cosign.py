"""Checks cosign key-based signatures of a registry image against the requirements the policy sets for it.

cosign stores the signatures of the manifest `sha256:<hex>` as an OCI image manifest under the
tag `sha256-<hex>.sig` of the same repository. Each layer of media type
`application/vnd.dev.cosign.simplesigning.v1+json` is one signature: the layer blob is the
signed payload (the "simple signing" JSON below) and the layer's annotation
`dev.cosignproject.cosign/signature` is the base64 of an ASN.1 (DER) ECDSA P-256 / SHA-256
signature over exactly those bytes::

    {"critical": {"identity": {"docker-reference": "registry.example/fleet/app"},
                  "image": {"docker-manifest-digest": "sha256:..."},
                  "type": "cosign container image signature"},
     "optional": {...}}

A signature is accepted when (in this order, so untrusted JSON is parsed only once it is
known to come from a trusted key) it verifies with one of the requirement's keys, its
payload is well formed, its digest is the digest the reference names (for a multi-platform
image, the index's, as cosign signs what the tag points to and podman checks), and its
identity satisfies the requirement's signedIdentity. The cryptography is `crypto`'s, which imports
the `cryptography` package at the first verification: an agent without a policy, or whose images are
all present, never loads it (policy keys are checked at start by their format, `check_p256_pem`).

I/O stays with the caller: `enforce` asks a `SignatureSource` (the puller's registry session)
for the signature manifest and the payload blobs.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from edgelet.trust.crypto import p256_public_key, p256_valid
from edgelet.trust.errors import ImageSignatureError
from edgelet.trust.policy import ACCEPT_ANYTHING, SIGSTORE_SIGNED, Match, Requirement, identity_matches, refusal

MT_SIMPLESIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
PAYLOAD_TYPE = "cosign container image signature"
MAX_SIGNATURES = 32  # layers of one .sig manifest looked at; more is a registry trying to exhaust us
MAX_PAYLOAD = 64 * 1024  # a payload is a few hundred bytes
MAX_SIGNATURE_B64 = 1024  # a DER P-256 signature is at most 72 bytes


@dataclass(frozen=True)
class SignatureLayer:
    """One signature of a `.sig` manifest: its payload blob and the base64 signature annotation."""

    digest: str
    size: int
    signature: str


@dataclass(frozen=True)
class Payload:
    docker_reference: str
    manifest_digest: str


class SignatureSource(Protocol):
    """Where the signatures of one repository come from (the registry endpoint the image is pulled from)."""

    def manifest(self, tag: str) -> Any | None:
        """The parsed manifest under `tag`, or None when the registry has no such tag."""

    def blob(self, digest: str, size: int) -> bytes:
        """The blob's bytes, checked against digest and size."""


def signature_tag(digest: str) -> str:
    """cosign's tag for the signatures of `digest`: `sha256:<hex>` -> `sha256-<hex>.sig` (pure)."""
    algorithm, _, hex_ = digest.partition(":")
    if algorithm not in ("sha256", "sha512") or not hex_ or not all(c in "0123456789abcdef" for c in hex_):
        raise ValueError(f"not a digest: {digest!r}")
    return f"{algorithm}-{hex_}.sig"


def parse_signature_manifest(doc: Any) -> list[SignatureLayer]:
    """The signature layers of a `.sig` manifest, at most MAX_SIGNATURES; ValueError if it is malformed (pure)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        raise ValueError("the signature manifest has no layers list")
    out = []
    for i, layer in enumerate(doc["layers"]):
        if not isinstance(layer, dict) or layer.get("mediaType") != MT_SIMPLESIGNING:
            continue  # attestations and other artefacts share the tag's neighbourhood, not this list's meaning
        digest, size, ann = layer.get("digest"), layer.get("size"), layer.get("annotations")
        if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71:
            raise ValueError(f"layer {i}: invalid digest {digest!r}")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_PAYLOAD:
            raise ValueError(f"layer {i}: payload size {size!r} is not between 0 and {MAX_PAYLOAD}")
        sig = ann.get(SIGNATURE_ANNOTATION) if isinstance(ann, dict) else None
        if not isinstance(sig, str) or not sig or len(sig) > MAX_SIGNATURE_B64:
            raise ValueError(f"layer {i}: no {SIGNATURE_ANNOTATION} annotation")
        out.append(SignatureLayer(digest, size, sig))
        if len(out) == MAX_SIGNATURES:
            break
    return out


def parse_payload(data: bytes) -> Payload:
    """The signed claims of a simple-signing payload, parsed as strictly as containers/image; ValueError (pure)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"payload is not JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) - {"critical", "optional"} or "critical" not in doc:
        raise ValueError("payload must be an object of `critical` and `optional`")
    if doc.get("optional") is not None and not isinstance(doc["optional"], dict):
        raise ValueError("payload `optional` must be an object")
    crit = doc["critical"]
    if not isinstance(crit, dict) or set(crit) != {"identity", "image", "type"}:
        raise ValueError("payload `critical` must have exactly identity, image and type")
    if crit["type"] != PAYLOAD_TYPE:
        raise ValueError(f"payload type is {crit['type']!r}, not {PAYLOAD_TYPE!r}")
    ident, image = crit["identity"], crit["image"]
    if (
        not isinstance(ident, dict)
        or set(ident) != {"docker-reference"}
        or not isinstance(ident["docker-reference"], str)
    ):
        raise ValueError("payload `critical.identity` must have exactly a docker-reference string")
    if (
        not isinstance(image, dict)
        or set(image) != {"docker-manifest-digest"}
        or not isinstance(image["docker-manifest-digest"], str)
    ):
        raise ValueError("payload `critical.image` must have exactly a docker-manifest-digest string")
    return Payload(ident["docker-reference"], image["docker-manifest-digest"])


# The DER prefix of a SubjectPublicKeyInfo of id-ecPublicKey on prime256v1, uncompressed and compressed point.
_P256_SPKI = {
    bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200"): (b"\x04", 64),
    bytes.fromhex("3039301306072a8648ce3d020106082a8648ce3d030107032200"): (b"\x02\x03", 32),
}


def check_p256_pem(pem: bytes) -> None:
    """ValueError unless `pem` has the shape of an ECDSA P-256 public key (what cosign.pub holds) (pure).

    Recognising the format needs no cryptography: load_policy checks every key with this at start,
    so an agent whose images are all present never loads the `cryptography` package (about 10 MB of
    RSS); whether the point is on the curve is checked by `crypto.p256_public_key` at the first verification."""
    text = pem.decode("ascii", errors="replace").strip()
    head, foot = "-----BEGIN PUBLIC KEY-----", "-----END PUBLIC KEY-----"
    if not text.startswith(head) or not text.endswith(foot):
        raise ValueError("not a PEM public key (-----BEGIN PUBLIC KEY-----)")
    try:
        der = base64.b64decode("".join(text[len(head) : -len(foot)].split()), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not a PEM public key (the body is not base64)") from None
    for prefix, (first, length) in _P256_SPKI.items():
        if der.startswith(prefix) and len(der) == len(prefix) + 1 + length and der[len(prefix)] in first:
            return
    raise ValueError("not an ECDSA P-256 public key (cosign generate-key-pair makes one)")


def signature_verifies(pems: Sequence[bytes], payload: bytes, signature_b64: str) -> bool:
    """Whether the base64 DER ECDSA-P256-SHA256 signature of `payload` verifies with one of `pems`;
    ValueError naming the problem when none of `pems` is a usable key."""
    keys, problems = [], []
    for pem in pems:
        try:
            keys.append(p256_public_key(pem))
        except ValueError as exc:
            problems.append(str(exc))
    if not keys:
        raise ValueError("; ".join(problems) or "no keys")
    try:
        sig = base64.b64decode(signature_b64, validate=True)
    except (binascii.Error, ValueError):
        return False
    return any(p256_valid(key, sig, payload) for key in keys)


def judge_signature(req: Requirement, reference: str, digest: str, payload: bytes, signature_b64: str) -> str | None:
    """None when this one signature satisfies `req` for the image `reference` with manifest `digest`,
    else the reason it does not (pure but for the cryptography)."""
    keys = ", ".join(sorted({k.origin for k in req.keys}))
    try:
        verified = signature_verifies([k.pem for k in req.keys], payload, signature_b64)
    except ValueError as exc:
        return f"no usable key ({keys}): {exc}"
    if not verified:
        return f"not signed by a trusted key ({keys})"
    try:
        claims = parse_payload(payload)
    except ValueError as exc:
        return f"signed payload is malformed: {exc}"
    if claims.manifest_digest != digest:
        return f"signs manifest {claims.manifest_digest}, the image is {digest}"
    if not identity_matches(req.identity, reference, claims.docker_reference):
        return (
            f"signed identity {claims.docker_reference!r} does not match {reference} "
            f"(signedIdentity {req.identity.type})"
        )
    return None


def enforce(match: Match, reference: str, digest: str, source: SignatureSource, *, policy: str = "") -> None:
    """Check every requirement of `match` for the image `reference` whose named manifest is `digest`;
    ImageSignatureError with the reason when one is not met."""

    def refuse(reason: str) -> ImageSignatureError:
        return ImageSignatureError(reference, reason, scope=match.name, policy=policy)

    why = refusal(match)
    if why is not None:
        raise refuse(why)
    signatures: list[tuple[SignatureLayer, bytes]] | None = None
    for req in match.requirements:
        if req.type == ACCEPT_ANYTHING:
            continue
        if req.type != SIGSTORE_SIGNED:  # refusal() covered the others; fail closed if one is added
            raise refuse(f"requirement type {req.type} cannot be checked")
        if signatures is None:
            signatures = _fetch(source, reference, digest, refuse)
        if not signatures:
            raise refuse(f"a signature is required and the image has none (no tag {signature_tag(digest)})")
        reasons = []
        for i, (layer, payload) in enumerate(signatures, 1):
            why = judge_signature(req, reference, digest, payload, layer.signature)
            if why is None:
                break
            reasons.append(f"signature {i}: {why}" if len(signatures) > 1 else why)
        else:
            raise refuse("; ".join(reasons))


def _fetch(source: SignatureSource, reference: str, digest: str, refuse: Any) -> list[tuple[SignatureLayer, bytes]]:
    doc = source.manifest(signature_tag(digest))
    if doc is None:
        return []
    try:
        layers = parse_signature_manifest(doc)
    except ValueError as exc:
        raise refuse(f"signature manifest {signature_tag(digest)} is malformed: {exc}") from exc
    return [(layer, source.blob(layer.digest, layer.size)) for layer in layers]


__all__ = [
    "MT_SIMPLESIGNING",
    "PAYLOAD_TYPE",
    "SIGNATURE_ANNOTATION",
    "Payload",
    "SignatureLayer",
    "SignatureSource",
    "enforce",
    "judge_signature",
    "parse_payload",
    "parse_signature_manifest",
    "check_p256_pem",
    "signature_tag",
    "signature_verifies",
]
