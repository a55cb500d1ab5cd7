"""Checking a manifest's or an archive's detached signature against the trusted keys, and its version against replay.

`check_signature` picks the format from the signature's text (armored SSH,
else minisign/signify) and returns who signed it and the signed version.
The version of a minisign signature is in its trusted comment
(`edgelet-version: N`, else minisign's own `timestamp:N`); signify and SSH
signatures have no signed comment, so for them the version is a line
`# edgelet-version: N` in the signed manifest itself. `needs_of` says, before
an archive is read, which digests its check will need, so that one read of the
archive feeds both its check and its import. `Trust` adds the replay check and
the record of what was accepted.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from edgelet.trust import ARCHIVE_NAMESPACE, MANIFEST_NAMESPACE, SIGNATURE_SUFFIXES
from edgelet.trust.errors import MALFORMED, MISSING, REPLAY, SignatureRefused
from edgelet.trust.keys import TrustedKeys, load_trusted_keys
from edgelet.trust.message import Message
from edgelet.trust.versions import VersionStore
from edgelet.util.files import read_regular

if TYPE_CHECKING:
    from edgelet.trust import minisign, sshsig
    from edgelet.util.clock import Clock

MAX_SIGNATURE_BYTES = 64 * 1024
_BODY_VERSION = re.compile(rb"^[ \t]*#[ \t]*edgelet-version:[ \t]*(\d{1,18})[ \t]*\r?$", re.MULTILINE)


@dataclass(frozen=True)
class Verified:
    """A signature that holds: the key that made it, the version it carries, and where it was read."""

    key_id: str
    version: int | None
    signature: str = ""


def body_version(body: bytes) -> int | None:
    """The first `# edgelet-version: N` line of a signed manifest (for signify and SSH signatures)."""
    match = _BODY_VERSION.search(body)
    return int(match.group(1)) if match else None


def _parse(signature: bytes) -> minisign.MinisignSignature | sshsig.SshSignature:
    from edgelet.trust import minisign, sshsig

    if len(signature) > MAX_SIGNATURE_BYTES:
        raise SignatureRefused(MALFORMED, f"signature larger than {MAX_SIGNATURE_BYTES} bytes")
    try:
        text = signature.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SignatureRefused(MALFORMED, "the signature is not UTF-8 text") from exc
    return sshsig.parse_signature(text) if sshsig.is_armored(text) else minisign.parse_signature(text)


@contextmanager
def _naming(name: str) -> Iterator[None]:
    """A refusal raised inside names the signature's file or URL."""
    try:
        yield
    except SignatureRefused as exc:
        if exc.signature is None and name:
            raise SignatureRefused(exc.reason, exc.detail, key_id=exc.key_id, signature=name) from exc
        raise


def check_signature(
    message: Message, signature: bytes | None, keys: TrustedKeys, *, namespace: str, now: float, name: str = ""
) -> Verified:
    """Who signed `message` with `signature` and what version it carries; SignatureRefused otherwise.

    `name` is the signature's file or URL, for messages.
    """
    from edgelet.trust import minisign, sshsig

    if signature is None:
        raise SignatureRefused(MISSING, "no signature", signature=name or None)
    with _naming(name):
        sig = _parse(signature)
        if isinstance(sig, sshsig.SshSignature):
            ssh_key = sshsig.verify(sig, message, keys, namespace=namespace, now=now)
            version = body_version(message.data) if message.data is not None else None
            return Verified(key_id=ssh_key.key_id, version=version, signature=name)
        key = minisign.verify(sig, message, keys)
        if sig.trusted_comment is None:  # signify
            version = body_version(message.data) if message.data is not None else None
        else:
            version = minisign.version_of_comment(sig.trusted_comment)
        return Verified(key_id=key.key_id, version=version, signature=name)


@dataclass(frozen=True)
class Needs:
    """What checking a signature needs of its message: these digests (hashlib names), or the message whole."""

    digests: frozenset[str]
    whole: bool = False


def needs_of(signature: bytes, keys: TrustedKeys, *, namespace: str, name: str = "") -> Needs:
    """What checking `signature` needs of its message, so that one read of the message can take just that.

    SignatureRefused for all that is refused before the message is read: a signature that does not parse,
    made by a key that is not trusted, or (SSH) for another namespace.
    """
    from edgelet.trust import minisign, sshsig

    with _naming(name):
        sig = _parse(signature)
        if isinstance(sig, sshsig.SshSignature):
            sshsig.signers(sig, keys, namespace=namespace)
            return Needs(frozenset({sshsig.HASHES[sig.hash_algorithm]}))
        minisign.signers(sig, keys)
        return Needs(frozenset({"blake2b"})) if sig.algorithm == minisign.ALG_PREHASHED else Needs(frozenset(), True)


def read_signature_beside(path: Path, *, follow_symlinks: bool = True) -> tuple[bytes | None, str]:
    """The first of `path.minisig`, `path.sig` that exists, and its name; (None, expected names) when neither."""
    for suffix in SIGNATURE_SUFFIXES:
        candidate = Path(str(path) + suffix)
        try:
            # A named pipe planted as a signature must neither hang the scan nor be read as one.
            data = read_regular(candidate, MAX_SIGNATURE_BYTES, follow_symlinks=follow_symlinks)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise SignatureRefused(MALFORMED, f"cannot read: {exc.strerror or exc}", signature=str(candidate)) from exc
        return data, str(candidate)
    return None, " or ".join(str(path) + s for s in SIGNATURE_SUFFIXES)


def digest_of(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


class Trust:
    """The trusted keys and the version records: what the sources and the import directory ask."""

    def __init__(self, keys: TrustedKeys, versions: VersionStore, clock: Clock) -> None:
        self.keys = keys
        self.versions = versions
        self._clock = clock

    @classmethod
    def load(cls, keys_path: Path, state_dir: Path, clock: Clock) -> Trust:
        """Read the keys (KeyFileError when they cannot be used) and the version records."""
        return cls(load_trusted_keys(keys_path), VersionStore(state_dir), clock)

    def check_manifest(self, body: bytes, signature: bytes | None, name: str) -> Verified:
        return check_signature(
            Message(data=body), signature, self.keys, namespace=MANIFEST_NAMESPACE, now=self._clock.now(), name=name
        )

    def archive_signature(self, path: Path) -> ArchiveSignature:
        """The signature beside an archive and what its check needs of the archive; SignatureRefused when it is
        missing or refused before the archive is read (see `needs_of`). An archive is no symlink, nor is its
        signature."""
        signature, name = read_signature_beside(path, follow_symlinks=False)
        if signature is None:
            raise SignatureRefused(MISSING, f"no {name}")
        return ArchiveSignature(signature, name, needs_of(signature, self.keys, namespace=ARCHIVE_NAMESPACE, name=name))

    def check_archive(self, message: Message, signature: ArchiveSignature) -> Verified:
        """Whether `signature` holds for the archive as `message` (a MessageReader's, after its one read) has it."""
        return check_signature(
            message, signature.data, self.keys, namespace=ARCHIVE_NAMESPACE, now=self._clock.now(), name=signature.name
        )

    def check_replay(self, source_key: str, pods: Iterable[str], verified: Verified, body: bytes) -> None:
        problem = self.versions.problem(source_key, [f"pod:{p}" for p in pods], verified.version, digest_of(body))
        if problem:
            raise SignatureRefused(REPLAY, problem, key_id=verified.key_id, signature=verified.signature or None)

    def accept(
        self, source_key: str, pods: Iterable[str], verified: Verified, body: bytes, *, revoke_dropped: bool = False
    ) -> None:
        """Record an accepted body (OSError when the record cannot be written). With `revoke_dropped` (a source
        that alone holds its pods: the URL), the pods its previous body held and this one does not are revoked."""
        names = list(pods)
        before = self.versions.get(source_key) if revoke_dropped else None
        self.versions.record(
            [source_key, *(f"pod:{p}" for p in names)], verified.version, digest_of(body), pods={source_key: names}
        )
        if before is not None and not before.get("deleted"):
            dropped = sorted(set(before.get("pods") or ()) - set(names))
            self.versions.revoke(f"pod:{p}" for p in dropped)

    def revoke(self, source_keys: Iterable[str] = (), pods: Iterable[str] = ()) -> None:
        """Manifests deleted and pods no manifest holds any more: tombstones, so their accepted bodies, put
        back under any name, are replays; their kept copies go (OSError when the record cannot be written)."""
        sources = list(source_keys)
        for key in sources:
            self.forget_accepted(key)
        self.versions.revoke([*sources, *(f"pod:{p}" for p in pods)])

    # --- the last accepted copy of each manifest file ---
    # A file refused at start (replaced while the agent was down) must not remove the pods of its last accepted
    # version: the copy, kept with its signature and verified again when read, stands in for it.

    def _copy_path(self, source_key: str) -> Path:
        return self.versions.path.parent / "accepted" / hashlib.sha256(source_key.encode()).hexdigest()[:32]

    def save_accepted(self, source_key: str, body: bytes, signature: bytes | None, name: str) -> None:
        """Keep the accepted body and its signature (OSError when they cannot be written)."""
        from edgelet.state import write_atomic

        data = msgspec.json.encode(AcceptedCopy(key=source_key, body=body, signature=signature or b"", name=name))
        path = self._copy_path(source_key)
        try:
            if path.read_bytes() == data:
                return
        except OSError:
            pass
        write_atomic(path, data)

    def load_accepted(self, source_key: str) -> tuple[bytes, Verified] | None:
        """The last accepted body of `source_key` once its kept signature holds again, or None."""
        try:
            copy = msgspec.json.decode(self._copy_path(source_key).read_bytes(), type=AcceptedCopy)
        except (OSError, msgspec.DecodeError):
            return None
        if copy.key != source_key:
            return None
        try:
            verified = self.check_manifest(copy.body, copy.signature, copy.name)
        except SignatureRefused:
            return None
        return copy.body, verified

    def forget_accepted(self, source_key: str) -> None:
        """The manifest is gone (a removal): its copy must not bring its pods back."""
        try:
            self._copy_path(source_key).unlink()
        except FileNotFoundError:
            pass


@dataclass(frozen=True)
class ArchiveSignature:
    """An archive's detached signature file: its bytes, its path, and what its check needs of the archive."""

    data: bytes
    name: str
    needs: Needs


class AcceptedCopy(msgspec.Struct, frozen=True):
    """`<state>/accepted/<hash of the source key>`: an accepted manifest body with its signature."""

    key: str
    body: bytes
    signature: bytes
    name: str
