"""Crash-safe checkpoints: write a temp file, fsync it, rename it over the target, fsync the directory."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` so that a power cut leaves either the old or the new file, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


async def flush_when_changed(changed: asyncio.Event, flush: Callable[[], None], interval: float) -> None:
    """Run `flush` in a thread whenever `changed` is set, at most once every `interval` seconds.

    A burst of changes (twenty pods starting) becomes a few writes, not one
    fsync per change: flash storage on a small board wears and stalls.
    """
    while True:
        await changed.wait()
        changed.clear()
        await asyncio.to_thread(flush)
        await asyncio.sleep(interval)
