"""The only module of edgelet that imports the `cryptography` package: Ed25519 and ECDSA P-256 checks, loaded at first use.

Each function imports what it needs when called, so an agent that verifies
nothing (no `--trusted-keys`, no `--signature-policy`, or only images already
present) never loads the package and its about 10 MB of RSS. Parsing keys
and signatures needs none of it and stays in `keys`, `minisign`, `sshsig`,
`policy` and `cosign`.
"""

from __future__ import annotations

import functools
from typing import Any


def ed25519_valid(public: bytes, signature: bytes, message: bytes) -> bool:
    """Whether `signature` is the Ed25519 signature of `message` by the raw 32-byte key `public`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except InvalidSignature:
        return False
    except ValueError:  # a key that is not a valid curve point
        return False
    return True


@functools.lru_cache(maxsize=64)
def p256_public_key(pem: bytes) -> Any:
    """The ECDSA P-256 public key of a PEM (cosign.pub); ValueError for anything else."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a PEM public key ({exc})") from None
    except Exception as exc:  # cryptography raises its own UnsupportedAlgorithm for exotic keys
        raise ValueError(f"unusable public key ({type(exc).__name__}: {exc})") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("not an ECDSA P-256 public key (cosign generate-key-pair makes one)")
    return key


def p256_valid(key: Any, signature: bytes, message: bytes) -> bool:
    """Whether the DER `signature` is the ECDSA P-256 / SHA-256 signature of `message` by `key` (p256_public_key's)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return False
    return True


def x25519_generate() -> bytes:
    """A new raw 32-byte Curve25519 private key (a WireGuard interface's key), from the system's CSPRNG."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    return X25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def x25519_public(private: bytes) -> bytes:
    """The raw 32-byte Curve25519 public key of the raw private key `private`; ValueError when it is not 32 bytes."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def certificate_ips(pem: bytes) -> set[str]:
    """The IP addresses a PEM certificate's subjectAltName names; ValueError when it is not one."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
