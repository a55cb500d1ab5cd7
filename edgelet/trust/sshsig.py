"""OpenSSH SSHSIG signatures (`ssh-keygen -Y sign`): parsing the armored file and checking it against allowed_signers.

The format is OpenSSH's PROTOCOL.sshsig: base64 between `-----BEGIN SSH
SIGNATURE-----` lines of `"SSHSIG" || uint32 1 || string publickey || string
namespace || string reserved || string hash_algorithm || string signature`, the
signature being over `"SSHSIG" || string namespace || string reserved || string
hash_algorithm || string H(message)`. Only Ed25519 keys, with sha512 or sha256.
The namespace says what the signature is for (`edgelet-manifest`,
`edgelet-image`): a signature made for one use is refused for the other.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass

from edgelet.trust.crypto import ed25519_valid
from edgelet.trust.errors import BAD, EXPIRED, MALFORMED, UNKNOWN_KEY, WRONG_NAMESPACE, SignatureRefused
from edgelet.trust.keys import SSH_ED25519, SshKey, TrustedKeys, parse_ssh_public_blob, ssh_string
from edgelet.trust.message import Message

BEGIN = "-----BEGIN SSH SIGNATURE-----"
END = "-----END SSH SIGNATURE-----"
MAGIC = b"SSHSIG"
SIG_VERSION = 1
HASHES = {"sha512": "sha512", "sha256": "sha256"}


class Reader:
    """Reads SSH wire-format fields; ValueError on a short or overlong buffer."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._data):
            raise ValueError("truncated")
        out = self._data[self._pos : self._pos + n]
        self._pos += n
        return out

    def uint32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.uint32())

    def end(self) -> None:
        if self._pos != len(self._data):
            raise ValueError("trailing bytes")


@dataclass(frozen=True)
class SshSignature:
    public: bytes  # the raw Ed25519 key that signed
    namespace: str
    reserved: bytes
    hash_algorithm: str
    signature: bytes  # the raw 64-byte Ed25519 signature


def is_armored(text: str) -> bool:
    return text.lstrip().startswith(BEGIN)


def parse_signature(text: str) -> SshSignature:
    """An armored SSHSIG; SignatureRefused(malformed) for anything else."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if len(lines) < 3 or lines[0] != BEGIN or lines[-1] != END:
        raise SignatureRefused(MALFORMED, "not an armored SSH signature")
    try:
        blob = base64.b64decode("".join(lines[1:-1]), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SignatureRefused(MALFORMED, "the SSH signature is not base64") from exc
    try:
        reader = Reader(blob)
        if reader.take(6) != MAGIC:
            raise ValueError("no SSHSIG preamble")
        version = reader.uint32()
        if version != SIG_VERSION:
            raise ValueError(f"unsupported SSHSIG version {version}")
        public = parse_ssh_public_blob(reader.string())
        namespace = reader.string().decode("utf-8")
        reserved = reader.string()
        hash_algorithm = reader.string().decode("ascii")
        sig_reader = Reader(reader.string())
        reader.end()
        kind = sig_reader.string()
        if kind != SSH_ED25519.encode():
            raise ValueError(f"signature type {kind.decode('ascii', 'replace')!r}")
        signature = sig_reader.string()
        sig_reader.end()
        if len(signature) != 64:
            raise ValueError(f"Ed25519 signature of {len(signature)} bytes")
    except (ValueError, UnicodeDecodeError) as exc:
        raise SignatureRefused(MALFORMED, f"SSH signature: {exc}") from exc
    if hash_algorithm not in HASHES:
        raise SignatureRefused(MALFORMED, f"SSH signature: unsupported hash {hash_algorithm!r}")
    return SshSignature(
        public=public, namespace=namespace, reserved=reserved, hash_algorithm=hash_algorithm, signature=signature
    )


def signed_data(sig: SshSignature, message_hash: bytes) -> bytes:
    return (
        MAGIC
        + ssh_string(sig.namespace.encode())
        + ssh_string(sig.reserved)
        + ssh_string(sig.hash_algorithm.encode())
        + ssh_string(message_hash)
    )


def signers(sig: SshSignature, keys: TrustedKeys, *, namespace: str) -> list[SshKey]:
    """The allowed_signers entries of `sig`'s key, known before the message is read; SignatureRefused when the
    key is not among them or the signature was made for another namespace."""
    candidates = keys.by_ssh_key(sig.public)
    if not candidates:
        probe = SshKey(principals="?", public=sig.public)
        raise SignatureRefused(
            UNKNOWN_KEY, f"SSH key {probe.fingerprint} is not in the allowed signers", key_id=probe.fingerprint
        )
    if sig.namespace != namespace:
        raise SignatureRefused(
            WRONG_NAMESPACE,
            f"signed for namespace {sig.namespace!r}, {namespace!r} is needed",
            key_id=candidates[0].key_id,
        )
    return candidates


def verify(sig: SshSignature, message: Message, keys: TrustedKeys, *, namespace: str, now: float) -> SshKey:
    """The allowed_signers entry that made `sig` over `message` for `namespace`, valid at `now`; else SignatureRefused."""
    candidates = signers(sig, keys, namespace=namespace)
    data = signed_data(sig, message.digest(HASHES[sig.hash_algorithm]))
    if not ed25519_valid(sig.public, sig.signature, data):
        raise SignatureRefused(BAD, "the signature does not match the content", key_id=candidates[0].key_id)
    problems = []
    for key in candidates:
        if not key.allows_namespace(namespace):
            problems.append((WRONG_NAMESPACE, f"the key's namespaces= do not include {namespace!r}", key))
            continue
        validity = key.validity_problem(now)
        if validity is not None:
            problems.append((EXPIRED, validity, key))
            continue
        return key
    reason, detail, key = problems[0]
    raise SignatureRefused(reason, detail, key_id=key.key_id)
