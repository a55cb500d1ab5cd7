"""Directory watches (watchdog's inotify observer) that wake an asyncio task when what a directory holds changes.

Reading a file is not a change: watchdog also reports opens and read-only
closes, and a watcher that woke on those would wake itself with its own
reads (PLEG reading exit files relisted in a busy loop).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

# watchdog's event types that mean the directory's contents changed ("closed" is a close after writing).
CHANGE_EVENTS = frozenset({"created", "deleted", "modified", "moved", "closed"})


def watch_directory(directory: Path, wake: asyncio.Event, events: frozenset[str] = CHANGE_EVENTS) -> Any:
    """Start an observer that sets `wake` (on the running loop) on every change in `directory`; returns it.

    `events` are watchdog's event types that count (add "attrib" to see a touch). Stop it with `stop_watching`.
    """
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    loop = asyncio.get_running_loop()

    class _Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            if event.event_type in events:
                loop.call_soon_threadsafe(wake.set)

    directory.mkdir(parents=True, exist_ok=True)
    observer = Observer()
    observer.schedule(_Handler(), str(directory), recursive=False)
    observer.daemon = True
    observer.start()
    return observer


STOP_WAIT = 2.0  # seconds a stop may take before the caller goes on without it


def _resolve(done: "asyncio.Future[None]") -> None:
    if not done.done():
        done.set_result(None)


async def stop_watching(observer: Any) -> None:
    """Stop an observer without ever blocking the event loop or the interpreter's exit.

    watchdog's `Observer.stop()` joins its inotify reader thread; on a busy
    machine that join has been seen to take longer than 30 s, and called on
    the loop it froze everything (a PLEG test hung; agents were slow to stop).
    So the stop runs on a daemon thread of its own, which neither the default
    executor's shutdown nor the interpreter's exit waits for, and the caller
    waits at most STOP_WAIT for it.
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def _stop() -> None:
        try:
            observer.stop()
            observer.join(STOP_WAIT)
        finally:
            try:
                loop.call_soon_threadsafe(_resolve, done)
            except RuntimeError:
                pass  # the loop is gone: nobody waits any more

    threading.Thread(target=_stop, name="watch-stop", daemon=True).start()
    try:
        async with asyncio.timeout(STOP_WAIT):
            await done
    except TimeoutError:
        pass
