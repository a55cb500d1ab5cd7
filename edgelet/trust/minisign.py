"""minisign and signify detached signatures: parsing their text files and checking them with Ed25519.

minisign (https://jedisct1.github.io/minisign/) writes four lines: an
untrusted comment, base64 of `alg || key id || signature`, a trusted comment,
and base64 of the global signature over `signature || trusted comment`. The
algorithm `ED` signs BLAKE2b-512 of the message (minisign's default), `Ed`
the message itself (`minisign -l`). signify writes only the first two lines
with `Ed`. The trusted comment is what carries the version (`edgelet-version: N`,
or minisign's default `timestamp:N`), and only minisign has one.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from edgelet.trust.crypto import ed25519_valid
from edgelet.trust.errors import BAD, MALFORMED, UNKNOWN_KEY, SignatureRefused
from edgelet.trust.keys import Ed25519Key, TrustedKeys, minisign_key_id
from edgelet.trust.message import Message

ALG_LEGACY = b"Ed"
ALG_PREHASHED = b"ED"
_SIG_BYTES = 2 + 8 + 64
_UNTRUSTED = "untrusted comment:"
_TRUSTED = "trusted comment:"
_VERSION = re.compile(r"(?:^|[\s\t])edgelet-version:\s*(\d{1,18})(?:$|[\s\t])")
_TIMESTAMP = re.compile(r"(?:^|[\s\t])timestamp:\s*(\d{1,18})(?:$|[\s\t])")


@dataclass(frozen=True)
class MinisignSignature:
    """A parsed signature file; `trusted_comment` and `global_signature` are None for signify."""

    algorithm: bytes
    keynum: bytes
    signature: bytes
    trusted_comment: str | None = None
    global_signature: bytes | None = None

    @property
    def key_id(self) -> str:
        return minisign_key_id(self.keynum)

    @property
    def tool(self) -> str:
        return "signify" if self.trusted_comment is None else "minisign"


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SignatureRefused(MALFORMED, f"{what} is not base64") from exc


def parse_signature(text: str) -> MinisignSignature:
    """A minisign (4 lines) or signify (2 lines) signature file; SignatureRefused(malformed) otherwise."""
    lines = [line.rstrip("\r") for line in text.split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) not in (2, 4) or not lines[0].startswith(_UNTRUSTED):
        raise SignatureRefused(MALFORMED, "not a minisign (4 lines) or signify (2 lines) signature file")
    raw = _b64(lines[1], "the signature line")
    if len(raw) != _SIG_BYTES or raw[:2] not in (ALG_LEGACY, ALG_PREHASHED):
        raise SignatureRefused(MALFORMED, f"unsupported signature ({len(raw)} bytes, algorithm {raw[:2]!r})")
    if len(lines) == 2:
        if raw[:2] != ALG_LEGACY:
            raise SignatureRefused(MALFORMED, "a prehashed signature without its trusted comment")
        return MinisignSignature(algorithm=raw[:2], keynum=raw[2:10], signature=raw[10:])
    if not lines[2].startswith(_TRUSTED):
        raise SignatureRefused(MALFORMED, "the third line is no `trusted comment:`")
    comment = lines[2][len(_TRUSTED) :].lstrip(" ")
    global_sig = _b64(lines[3], "the trusted comment's signature")
    if len(global_sig) != 64:
        raise SignatureRefused(MALFORMED, f"the trusted comment's signature has {len(global_sig)} bytes")
    return MinisignSignature(
        algorithm=raw[:2], keynum=raw[2:10], signature=raw[10:], trusted_comment=comment, global_signature=global_sig
    )


def version_of_comment(comment: str | None) -> int | None:
    """`edgelet-version: N` in the trusted comment, else minisign's `timestamp:N`, else None."""
    if not comment:
        return None
    for pattern in (_VERSION, _TIMESTAMP):
        match = pattern.search(comment)
        if match:
            return int(match.group(1))
    return None


def signers(sig: MinisignSignature, keys: TrustedKeys) -> list[Ed25519Key]:
    """The trusted keys that may have made `sig` (its key number), known before the message is read;
    SignatureRefused (unknown key) when there is none."""
    candidates = keys.by_keynum(sig.keynum)
    if not candidates:
        raise SignatureRefused(UNKNOWN_KEY, f"{sig.tool} key {sig.key_id} is not trusted", key_id=sig.key_id)
    return candidates


def verify(sig: MinisignSignature, message: Message, keys: TrustedKeys) -> Ed25519Key:
    """The key that made `sig` over `message` (and its trusted comment); SignatureRefused otherwise."""
    candidates = signers(sig, keys)
    try:
        signed = message.digest("blake2b") if sig.algorithm == ALG_PREHASHED else message.whole()
    except ValueError as exc:
        raise SignatureRefused(
            MALFORMED, f"cannot check a signature of the whole message: {exc}", key_id=sig.key_id
        ) from exc
    for key in candidates:
        if not ed25519_valid(key.public, sig.signature, signed):
            continue
        if sig.global_signature is not None:
            assert sig.trusted_comment is not None
            if not ed25519_valid(key.public, sig.global_signature, sig.signature + sig.trusted_comment.encode()):
                raise SignatureRefused(BAD, "the trusted comment does not match its signature", key_id=sig.key_id)
        return key
    raise SignatureRefused(BAD, "the signature does not match the content", key_id=sig.key_id)
