"""cosign-format image signatures for tests and benches: ECDSA P-256 keys made with `cryptography`, the simple-signing
payload, and the `sha256-<hex>.sig` manifest pushed to a registry exactly as `cosign sign --key` stores it.

    key = CosignKey()
    sig = key.sign(simple_signing("127.0.0.1:5000/app", manifest_digest))
    push_signatures(reg.host, "app", manifest_digest, [sig])
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

MT_SIMPLESIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Signature:
    payload: bytes
    signature: str  # base64 of the DER ECDSA signature, the annotation's value


class CosignKey:
    """A cosign key pair (what `cosign generate-key-pair` makes, unencrypted here)."""

    def __init__(self, curve: str = "p256") -> None:
        from cryptography.hazmat.primitives.asymmetric import ec

        self._key = ec.generate_private_key(ec.SECP384R1() if curve == "p384" else ec.SECP256R1())

    @property
    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self._key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def write_public(self, path: Path) -> Path:
        path.write_bytes(self.public_pem)
        return path

    def sign(self, payload: bytes) -> Signature:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        der = self._key.sign(payload, ec.ECDSA(hashes.SHA256()))
        return Signature(payload, base64.b64encode(der).decode())


def simple_signing(docker_reference: str, manifest_digest: str, *, optional: dict | None = None) -> bytes:
    """The payload cosign signs (its own key order and compact separators)."""
    doc = {
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": "cosign container image signature",
        },
        "optional": optional,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def _push_blob(client: httpx.Client, base: str, repo: str, data: bytes) -> dict:
    digest = _sha(data)
    resp = client.post(f"{base}/v2/{repo}/blobs/uploads/")
    resp.raise_for_status()
    location = resp.headers["location"]
    if location.startswith("/"):
        location = base + location
    sep = "&" if "?" in location else "?"
    resp = client.put(
        f"{location}{sep}digest={digest}", content=data, headers={"Content-Type": "application/octet-stream"}
    )
    resp.raise_for_status()
    return {"digest": digest, "size": len(data)}


def signature_manifest(
    host: str, repo: str, signatures: Sequence[Signature], *, extra_layers: Sequence[dict] = ()
) -> tuple[bytes, dict[str, bytes]]:
    """The `.sig` manifest and the blobs it names (payloads and config), not pushed."""
    blobs: dict[str, bytes] = {}
    layers = []
    for sig in signatures:
        blobs[_sha(sig.payload)] = sig.payload
        layers.append(
            {
                "mediaType": MT_SIMPLESIGNING,
                "size": len(sig.payload),
                "digest": _sha(sig.payload),
                "annotations": {"dev.cosignproject.cosign/signature": sig.signature},
            }
        )
    config = json.dumps(
        {
            "architecture": "",
            "created": "0001-01-01T00:00:00Z",
            "history": [{"created": "0001-01-01T00:00:00Z"}],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
            "config": {},
        },
        separators=(",", ":"),
    ).encode()
    blobs[_sha(config)] = config
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": {"mediaType": MT_CONFIG, "size": len(config), "digest": _sha(config)},
            "layers": [*layers, *extra_layers],
        }
    ).encode()
    return manifest, blobs


def push_signatures(
    host: str, repo: str, manifest_digest: str, signatures: Sequence[Signature], *, extra_layers: Sequence[dict] = ()
) -> str:
    """Store `signatures` under the tag `sha256-<hex>.sig` of `repo` (replacing what was there); returns the tag."""
    base = f"http://{host}"
    manifest, blobs = signature_manifest(host, repo, signatures, extra_layers=extra_layers)
    tag = manifest_digest.replace(":", "-") + ".sig"
    with httpx.Client(timeout=30) as client:
        for data in blobs.values():
            _push_blob(client, base, repo, data)
        resp = client.put(f"{base}/v2/{repo}/manifests/{tag}", content=manifest, headers={"Content-Type": MT_MANIFEST})
        resp.raise_for_status()
    return tag


def push_blob(host: str, repo: str, data: bytes) -> dict:
    with httpx.Client(timeout=30) as client:
        return _push_blob(client, f"http://{host}", repo, data)
