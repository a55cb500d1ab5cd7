"""The air-gapped import directory: archives dropped there are imported at start and when they appear.

As k3s's agent/images: `.tar`, `.tar.gz`/`.tgz`, `.tar.zst` (and `.tar.bz2`/`.tar.xz`), docker-archive
or OCI archive; the compression is detected from the content, not the name. Images imported from
here are pinned: image GC never removes them. Each archive is imported once: the cache (`imported.json`)
keeps its size, mtime and sha256; a file whose size and mtime are unchanged is skipped unread, and one
whose content hashes as before (copied again, touched) is skipped without an import, unless that
import failed (a full disk): touching the archive then tries it again.

With trusted keys, an archive is imported only with a valid detached signature beside it
(`X.tar.minisig`, or `X.tar.sig` made by `ssh-keygen -Y sign -n edgelet-image`); otherwise it stays
there, unimported, with a warning event (reason UntrustedArchive) naming it, until it or its
signature changes.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgelet.state import write_atomic
from edgelet.trust.message import Message
from edgelet.util.clock import REAL_CLOCK, Clock
from edgelet.util.files import open_regular
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.events import EventRecorder
    from edgelet.images.store import ImageStore
    from edgelet.trust.verify import Trust

log = get_logger(__name__)

SETTLE = 0.5  # seconds a file must stay unchanged before it is read (it may still be being copied)


ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.bz2", ".tar.xz")
UNTRUSTED_REASON = "UntrustedArchive"
NOT_A_FILE_REASON = "InvalidArchive"  # a symlink, FIFO or device where an archive belongs


def is_archive_name(name: str) -> bool:
    """Whether a file in the import dir is one to import (pure): hidden files and partial copies are not."""
    return not name.startswith(".") and name.lower().endswith(ARCHIVE_SUFFIXES)


def cache_verdict(cached: Any, size: int, mtime_ns: int, sig: list[int] | None = None) -> str:
    """ "skip" when size and mtime (and the signature files' stats, with trust) match the cache, else "hash"
    (the digest decides) (pure)."""
    if (
        isinstance(cached, dict)
        and cached.get("size") == size
        and cached.get("mtime_ns") == mtime_ns
        and cached.get("sig") == sig
    ):
        return "skip"
    return "hash"


def _signature_stats(path: Path) -> list[int]:
    """Size and mtime of each detached signature file beside `path` (-1 when absent), so a new one is noticed."""
    from edgelet.trust import SIGNATURE_SUFFIXES

    out: list[int] = []
    for suffix in SIGNATURE_SUFFIXES:
        try:
            st = Path(str(path) + suffix).stat()
        except OSError:
            out += [-1, -1]
        else:
            out += [st.st_size, st.st_mtime_ns]
    return out


class ImportDir:
    """Imports each archive once per content (size + mtime, then digest); a failed one is retried only when
    it changes."""

    def __init__(
        self,
        directory: Path,
        store: ImageStore,
        cache_file: Path,
        clock: Clock = REAL_CLOCK,
        trust: Trust | None = None,
        events: EventRecorder | None = None,
    ) -> None:
        self._clock = clock
        self._trust = trust
        self.events = events
        self._dir = directory
        self._store = store
        self._cache_file = cache_file
        self._seen: dict[str, dict[str, Any]] = self._load()
        self._kick = asyncio.Event()
        # A test seam: called after an archive was verified and before it is imported (the race of a file
        # renamed over the path in between is what the one descriptor closes).
        self.between_verify_and_import: Callable[[Path], None] | None = None

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            doc = json.loads(self._cache_file.read_text())
        except (OSError, ValueError):
            return {}
        # Entries of an older format (a [size, mtime] list) simply count as changed.
        return {k: v for k, v in doc.items() if isinstance(v, dict)} if isinstance(doc, dict) else {}

    def scan(self) -> int:
        """Import every new or changed archive now (blocking); returns how many images were imported."""
        if not self._dir.is_dir():
            return 0
        count = 0
        changed = False
        for path in sorted(self._dir.iterdir()):
            if not is_archive_name(path.name):
                continue
            imported, wrote = self._scan_one(path)
            count += imported
            changed = changed or wrote
        if changed:
            write_atomic(self._cache_file, json.dumps(self._seen, sort_keys=True).encode())
        return count

    def _scan_one(self, path: Path) -> tuple[int, bool]:
        """One archive through one descriptor: hashed, verified and imported from what that descriptor reads,
        so a file renamed over the path, or other bytes the medium returns later, are never what is imported
        under this one's signature. Returns (images imported, whether the cache changed)."""
        try:
            archive = open_regular(path, follow_symlinks=False)
        except FileNotFoundError:
            return 0, False
        except OSError as exc:
            return 0, self._not_an_archive(path, exc)
        with archive:
            st = os.fstat(archive.fileno())
            cached = self._seen.get(path.name)
            sig = _signature_stats(path) if self._trust is not None else None
            if cache_verdict(cached, st.st_size, st.st_mtime_ns, sig) == "skip":
                return 0, False
            message = Message(file=archive)
            try:
                # One read for the cache's digest and minisign's (an SSH signature's sha512 costs a read more).
                message.compute("sha256", *(("blake2b",) if self._trust is not None else ()))
            except OSError as exc:
                log.warning("Cannot read archive in the import directory", path=str(path), err=str(exc))
                return 0, False
            digest = "sha256:" + message.digest("sha256").hex()
            entry: dict[str, Any] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "digest": digest}
            if sig is not None:
                entry["sig"] = sig
            if isinstance(cached, dict) and cached.get("digest") == digest and "error" not in cached:
                self._seen[path.name] = {**cached, **entry}  # same content (copied again, touched), imported
                return 0, True
            refusal = self._refusal(path, message)
            if refusal is not None:
                entry["error"] = refusal
                self._seen[path.name] = entry
                return 0, True
            if self.between_verify_and_import is not None:
                self.between_verify_and_import(path)
            count = 0
            try:
                archive.seek(0)
                records = self._store.import_archive(path, pinned=True, fileobj=archive)
            except Exception as exc:  # any archive problem is reported and the file is skipped until it changes
                log.error("Image import failed", exc, path=str(path))
                entry["error"] = str(exc)
            else:
                count = len(records)
                entry["images"] = [r.id for r in records]
                for r in records:
                    log.info("Imported image", path=str(path), image=",".join(r.references) or r.id, id=r.id[:19])
            self._seen[path.name] = entry
            return count, True

    def _not_an_archive(self, path: Path, exc: OSError) -> bool:
        """A symlink, a named pipe, a device or a directory named like an archive: refused once, with an event."""
        try:
            st = os.lstat(path)
        except OSError:
            return False
        entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "error": f"{exc.strerror or exc}"}
        if self._seen.get(path.name) == entry:
            return False
        message = f"{path}: not imported: {exc.strerror or exc}"
        log.warning("Not an archive in the import directory", path=str(path), err=str(exc.strerror or exc))
        if self.events is not None:
            from edgelet.events import InvolvedObject

            self.events.warning(InvolvedObject(kind="ImageArchive", name=str(path)), NOT_A_FILE_REASON, message)
        self._seen[path.name] = entry
        return True

    def _refusal(self, path: Path, message: Message) -> str | None:
        """Why the archive's signature is refused (after the warning event), or None: trusted, or no trust asked."""
        if self._trust is None:
            return None
        from edgelet.trust.errors import SignatureRefused

        try:
            verified = self._trust.check_archive(path, message)
        except SignatureRefused as exc:
            message_text = f"{path}: not imported: {exc}"
            log.warning("Image archive refused", path=str(path), reason=exc.reason, key=exc.key_id, err=str(exc))
            if self.events is not None:
                from edgelet.events import InvolvedObject

                self.events.warning(InvolvedObject(kind="ImageArchive", name=str(path)), UNTRUSTED_REASON, message_text)
            return message_text
        log.info("Image archive signature verified", path=str(path), key=verified.key_id)
        return None

    async def run(self, on_imported: Callable[[], None]) -> None:
        """Watch the directory (inotify) and import what lands there."""
        from edgelet.util.watch import CHANGE_EVENTS, stop_watching, watch_directory

        kick = self._kick
        # A touch too: it is how a user asks for an archive whose import failed to be tried again.
        observer = watch_directory(self._dir, kick, CHANGE_EVENTS | {"attrib"})
        try:
            while True:
                await kick.wait()
                kick.clear()
                await self._clock.sleep(SETTLE)
                if kick.is_set():
                    continue  # still changing: wait until it settles
                if await asyncio.to_thread(self.scan):
                    on_imported()
        finally:
            await stop_watching(observer)
