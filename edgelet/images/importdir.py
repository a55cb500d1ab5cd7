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
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from edgelet.images.progress import Ticking
from edgelet.state import write_atomic
from edgelet.trust.message import MessageReader
from edgelet.util.clock import REAL_CLOCK, Clock
from edgelet.util.files import open_regular
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.events import EventRecorder
    from edgelet.images.store import ImageStore
    from edgelet.trust.errors import SignatureRefused
    from edgelet.trust.verify import ArchiveSignature, Trust

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


def _sha256(f: BinaryIO) -> str:
    sha = hashlib.sha256()
    while chunk := f.read(1 << 20):
        sha.update(chunk)
    return "sha256:" + sha.hexdigest()


class ImportDir:
    """Imports each archive once per content (size + mtime, then digest); a failed one is retried only when
    it changes.

    An archive is opened once, as a regular file (never through a symlink, never a FIFO or a device), and read
    once: that one read stores its blobs and takes the digests its signature check needs, so the bytes checked
    are the bytes imported, whatever happens to the path, the file or the medium meanwhile.
    """

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
        # A test seam: called after an archive's read was verified and before its images are recorded (a file
        # renamed over the path, or rewritten in place, in between is what the one read closes).
        self.between_verify_and_import: Callable[[Path], None] | None = None
        self._on_progress: Callable[[], object] | None = None

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            doc = json.loads(self._cache_file.read_text())
        except (OSError, ValueError):
            return {}
        # Entries of an older format (a [size, mtime] list) simply count as changed.
        return {k: v for k, v in doc.items() if isinstance(v, dict)} if isinstance(doc, dict) else {}

    def scan(self, on_progress: Callable[[], object] | None = None) -> int:
        """Import every new or changed archive now (blocking); returns how many images were imported.

        `on_progress` is called at each archive and each chunk stored (from this thread): the agent's start
        extends systemd's start timeout with it while a large archive is read."""
        if not self._dir.is_dir():
            return 0
        self._on_progress = on_progress
        try:
            return self._scan_all()
        finally:
            self._on_progress = None

    def _scan_all(self) -> int:
        count = 0
        changed = False
        for path in sorted(self._dir.iterdir()):
            if not is_archive_name(path.name):
                continue
            if self._on_progress is not None:
                self._on_progress()
            imported, wrote = self._scan_one(path)
            count += imported
            changed = changed or wrote
        if changed:
            write_atomic(self._cache_file, json.dumps(self._seen, sort_keys=True).encode())
        return count

    def _scan_one(self, path: Path) -> tuple[int, bool]:
        """One archive through one descriptor and one read. Returns (images imported, whether the cache changed)."""
        try:
            archive = open_regular(path, follow_symlinks=False)
        except FileNotFoundError:
            return 0, False
        except OSError as exc:
            return 0, self._not_an_archive(path, exc)
        with archive:
            try:
                result = self._consider(path, archive)
            except OSError as exc:
                log.warning("Cannot read archive in the import directory", path=str(path), err=str(exc))
                return 0, False
        if result is None:
            return 0, False
        self._seen[path.name], count = result
        return count, True

    def _consider(self, path: Path, archive: BinaryIO) -> tuple[dict[str, Any], int] | None:
        """The archive's new cache entry and how many images it imported; None when its stamp is unchanged."""
        st = os.fstat(archive.fileno())
        cached = self._seen.get(path.name)
        entry: dict[str, Any] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if self._trust is not None:
            entry["sig"] = _signature_stats(path)
        if cache_verdict(cached, st.st_size, st.st_mtime_ns, entry.get("sig")) == "skip":
            return None
        if isinstance(cached, dict) and "error" not in cached and cached.get("size") == st.st_size:
            # Most likely the same content copied again or touched: a read tells, and spares an import.
            digest = _sha256(archive)
            if cached.get("digest") == digest:
                return {**cached, **entry}, 0
            archive.seek(0)
        signature = None
        if self._trust is not None:
            from edgelet.trust.errors import SignatureRefused

            try:
                signature = self._trust.archive_signature(path)  # refused here, the archive is not even read
            except SignatureRefused as exc:
                return {**entry, "error": self._refused(path, exc)}, 0
        return self._import(path, archive, entry, signature)

    def _import(
        self, path: Path, archive: BinaryIO, entry: dict[str, Any], signature: ArchiveSignature | None
    ) -> tuple[dict[str, Any], int]:
        """Read the archive once: that read stores its blobs and takes the digests its signature needs, and its
        images are recorded only once that signature holds for what was read."""
        from edgelet.trust.errors import SignatureRefused

        needs = signature.needs if signature is not None else None
        reader = MessageReader(
            archive, ["sha256", *(needs.digests if needs else ())], keep_whole=bool(needs and needs.whole)
        )
        checked = False

        def admit() -> bool:
            nonlocal checked
            checked = True
            reader.drain()  # the digests cover the whole file, not just what the tar reader needed
            entry["digest"] = "sha256:" + reader.hexdigest("sha256")
            if self._trust is not None and signature is not None:
                verified = self._trust.check_archive(reader.message(), signature)
                log.info("Image archive signature verified", path=str(path), key=verified.key_id)
            if self.between_verify_and_import is not None:
                self.between_verify_and_import(path)
            return True

        try:
            tick = Ticking(self._on_progress) if self._on_progress is not None else None
            records = self._store.import_archive(path, pinned=True, progress=tick, fileobj=reader, admit=admit)
        except SignatureRefused as exc:
            return {**entry, "error": self._refused(path, exc)}, 0
        except Exception as exc:  # any archive problem is reported and the file is skipped until it changes
            if not checked and signature is not None:
                # A changed archive usually breaks a blob's digest first: its signature says more, so it is checked.
                try:
                    admit()
                except SignatureRefused as refused:
                    return {**entry, "error": self._refused(path, refused)}, 0
                except OSError:
                    pass
            log.error("Image import failed", exc, path=str(path))
            return {**entry, "error": str(exc)}, 0
        for r in records:
            log.info("Imported image", path=str(path), image=",".join(r.references) or r.id, id=r.id[:19])
        return {**entry, "images": [r.id for r in records]}, len(records)

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

    def _refused(self, path: Path, exc: SignatureRefused) -> str:
        """Report a refused signature (log and warning event); the cache entry's error."""
        message = f"{path}: not imported: {exc}"
        log.warning("Image archive refused", path=str(path), reason=exc.reason, key=exc.key_id, err=str(exc))
        if self.events is not None:
            from edgelet.events import InvolvedObject

            self.events.warning(InvolvedObject(kind="ImageArchive", name=str(path)), UNTRUSTED_REASON, message)
        return message

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
