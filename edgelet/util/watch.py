"""Directory watches (watchdog's inotify observer) that wake an asyncio task when what a directory holds changes.

Reading a file is not a change: watchdog also reports opens and read-only
closes, and a watcher that woke on those would wake itself with its own
reads (PLEG reading exit files relisted in a busy loop).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

# watchdog's event types that mean the directory's contents changed ("closed" is a close after writing).
CHANGE_EVENTS = frozenset({"created", "deleted", "modified", "moved", "closed"})


def watch_directory(directory: Path, wake: asyncio.Event) -> Any:
    """Start an observer that sets `wake` (on the running loop) on every change in `directory`; returns it.

    Stop it with `stop_watching`.
    """
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    loop = asyncio.get_running_loop()

    class _Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            if event.event_type in CHANGE_EVENTS:
                loop.call_soon_threadsafe(wake.set)

    directory.mkdir(parents=True, exist_ok=True)
    observer = Observer()
    observer.schedule(_Handler(), str(directory), recursive=False)
    observer.daemon = True
    observer.start()
    return observer


async def stop_watching(observer: Any) -> None:
    observer.stop()
    await asyncio.to_thread(observer.join, 2.0)
