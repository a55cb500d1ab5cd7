"""Directory watches (inotify on the event loop, util/inotify.py) that wake an asyncio task when what a
directory holds changes.

Reading a file is not a change: inotify also reports opens and read-only
closes, and a watcher that woke on those would wake itself with its own
reads (PLEG reading exit files relisted in a busy loop).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

# The event names (watchdog's, which the watchers were written against) that mean the directory's contents
# changed ("closed" is a close after writing; a rename reads as "deleted" and "created").
CHANGE_EVENTS = frozenset({"created", "deleted", "modified", "moved", "closed"})


def watch_directory(directory: Path, wake: asyncio.Event, events: frozenset[str] = CHANGE_EVENTS) -> Any:
    """Start a watch that sets `wake` on every change in `directory` (on the running loop); returns it.

    `events` are the event names that count (add "attrib" to see a touch). Stop it with `stop_watching`.
    """
    from edgelet.util.inotify import Inotify

    def _on_event(event: str, _path: str) -> None:
        if event in events:
            wake.set()

    directory.mkdir(parents=True, exist_ok=True)
    watcher = Inotify()
    try:
        watcher.add(str(directory), events, _on_event)
    except OSError:
        watcher.close()
        raise
    return watcher


async def stop_watching(watcher: Any) -> None:
    """Stop a watch (closing its descriptor never blocks: there is no thread to join)."""
    watcher.close()
