"""The air-gapped import directory: archives dropped there are imported at start and when they appear.

As k3s's agent/images: `.tar`, `.tar.gz`/`.tgz`, `.tar.zst` (and `.tar.bz2`/`.tar.xz`), docker-archive
or OCI archive; the compression is detected from the content, not the name. Images imported from
here are pinned: image GC never removes them. Each archive is imported once: the cache (`imported.json`)
keeps its size, mtime and sha256; a file whose size and mtime are unchanged is skipped unread, and one
whose content hashes as before (copied again, touched) is skipped without an import, unless that
import failed (a full disk): touching the archive then tries it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from edgelet.state import write_atomic
from edgelet.util.clock import REAL_CLOCK, Clock
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.images.store import ImageStore

log = get_logger(__name__)

SETTLE = 0.5  # seconds a file must stay unchanged before it is read (it may still be being copied)


ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.bz2", ".tar.xz")


def is_archive_name(name: str) -> bool:
    """Whether a file in the import dir is one to import (pure): hidden files and partial copies are not."""
    return not name.startswith(".") and name.lower().endswith(ARCHIVE_SUFFIXES)


def cache_verdict(cached: Any, size: int, mtime_ns: int) -> str:
    """"skip" when size and mtime match the cache, else "hash" (the digest decides) (pure)."""
    if isinstance(cached, dict) and cached.get("size") == size and cached.get("mtime_ns") == mtime_ns:
        return "skip"
    return "hash"


def _sha256_file(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    return "sha256:" + sha.hexdigest()


class ImportDir:
    """Imports each archive once per content (size + mtime, then digest); a failed one is retried only when
    it changes."""

    def __init__(self, directory: Path, store: "ImageStore", cache_file: Path, clock: Clock = REAL_CLOCK) -> None:
        self._clock = clock
        self._dir = directory
        self._store = store
        self._cache_file = cache_file
        self._seen: dict[str, dict[str, Any]] = self._load()
        self._kick = asyncio.Event()

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
            if not is_archive_name(path.name) or not path.is_file():
                continue
            try:
                st = path.stat()
                cached = self._seen.get(path.name)
                if cache_verdict(cached, st.st_size, st.st_mtime_ns) == "skip":
                    continue
                digest = _sha256_file(path)
            except OSError as exc:
                log.warning("Cannot read archive in the import directory", path=str(path), err=str(exc))
                continue
            entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "digest": digest}
            changed = True
            if isinstance(cached, dict) and cached.get("digest") == digest and "error" not in cached:
                self._seen[path.name] = {**cached, **entry}  # same content (copied again, touched), imported
                continue
            try:
                records = self._store.import_archive(path, pinned=True)
            except Exception as exc:  # any archive problem is reported and the file is skipped until it changes
                log.error("Image import failed", exc, path=str(path))
                entry["error"] = str(exc)
            else:
                count += len(records)
                entry["images"] = [r.id for r in records]
                for r in records:
                    log.info("Imported image", path=str(path), image=",".join(r.references) or r.id, id=r.id[:19])
            self._seen[path.name] = entry
        if changed:
            write_atomic(self._cache_file, json.dumps(self._seen, sort_keys=True).encode())
        return count

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
