"""The air-gapped import directory: archives dropped there are imported at start and when they appear."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from edgelet.state import write_atomic
from edgelet.util.log import get_logger

if TYPE_CHECKING:
    from edgelet.images.store import ImageStore

log = get_logger(__name__)

SETTLE = 0.5  # seconds a file must stay unchanged before it is read (it may still be being copied)


class ImportDir:
    """Imports each archive once per (size, mtime); a failed one is retried only when it changes."""

    def __init__(self, directory: Path, store: "ImageStore", cache_file: Path) -> None:
        self._dir = directory
        self._store = store
        self._cache_file = cache_file
        self._seen: dict[str, list[float]] = self._load()
        self._kick = asyncio.Event()

    def _load(self) -> dict[str, list[float]]:
        try:
            return json.loads(self._cache_file.read_text())
        except (OSError, ValueError):
            return {}

    def scan(self) -> int:
        """Import every new or changed archive now (blocking); returns how many images were imported."""
        if not self._dir.is_dir():
            return 0
        count = 0
        changed = False
        for path in sorted(self._dir.iterdir()):
            if path.name.startswith(".") or not path.is_file():
                continue
            st = path.stat()
            key = [float(st.st_size), st.st_mtime]
            if self._seen.get(path.name) == key:
                continue
            try:
                records = self._store.import_archive(path, pinned=True)
            except Exception as exc:  # any archive problem is reported and the file is skipped until it changes
                log.error("Image import failed", exc, path=str(path))
            else:
                count += len(records)
                for r in records:
                    log.info("Imported image", path=str(path), image=",".join(r.references) or r.id, id=r.id[:19])
            self._seen[path.name] = key
            changed = True
        if changed:
            write_atomic(self._cache_file, json.dumps(self._seen, sort_keys=True).encode())
        return count

    async def run(self, on_imported: Callable[[], None]) -> None:
        """Watch the directory (inotify) and import what lands there."""
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer

        loop = asyncio.get_running_loop()
        kick = self._kick

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event) -> None:  # noqa: ANN001 - watchdog's type
                loop.call_soon_threadsafe(kick.set)

        self._dir.mkdir(parents=True, exist_ok=True)
        observer = Observer()
        observer.schedule(_Handler(), str(self._dir), recursive=False)
        observer.daemon = True
        observer.start()
        try:
            while True:
                await kick.wait()
                kick.clear()
                await asyncio.sleep(SETTLE)
                if kick.is_set():
                    continue  # still changing: wait until it settles
                if await asyncio.to_thread(self.scan):
                    on_imported()
        finally:
            observer.stop()
            await asyncio.to_thread(observer.join, 2.0)
