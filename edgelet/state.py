"""Crash-safe checkpoints (write a temp file, fsync it, rename it over the target, fsync the directory) and the
private directories they live in.

edgelet's state holds what no other local user may read: pod specs with their
env values (bundles' config.json), checkpoints, events. Files are 0600 and
directories 0700 unless a caller says otherwise; logs are 0640/0750 (logs.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgspec

from edgelet.util.clock import Clock
from edgelet.util.crashpoint import crash_point
from edgelet.util.log import get_logger

_log = get_logger(__name__)


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def ensure_dir(path: Path, mode: int = PRIVATE_DIR, *, tighten_from: Path | None = None) -> None:
    """Make `path` a directory; every directory created gets `mode` (not the umask's 0755).

    Existing directories at or below `tighten_from` (edgelet's own, from an
    older version or a looser install) lose whatever bits `mode` does not
    grant; directories above it (/var/log, /run) are never touched.
    """
    missing: list[Path] = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            pass
        os.chmod(d, mode)  # the umask may have taken bits `mode` asked for
    if tighten_from is None:
        return
    top = Path(tighten_from)
    for d in (path, *path.parents):
        if d != top and top not in d.parents:
            break
        st = os.stat(d)
        if st.st_mode & 0o777 & ~mode:
            os.chmod(d, st.st_mode & mode & 0o7777)


def write_atomic(
    path: Path, data: bytes, mode: int = PRIVATE_FILE, *, sync_dir: bool = True, durable: bool = True
) -> None:
    """Replace `path` with `data` so that a power cut leaves either the old or the new file, never a mix.

    `sync_dir` False skips the directory's fsync, for files a crash may lose whole because the state is
    rebuilt without them (bundle files on the container start path, where each fsync costs flash time).
    `durable` False skips both fsyncs, for files whose loss or an empty copy after a power cut their reader
    takes as "never written" (a first version's rollout record).
    """
    ensure_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        crash_point("checkpoint.write")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if not (sync_dir and durable):
        return
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_temp_files(directories: list[Path]) -> int:
    """At start: the temp files a crash left in the middle of `write_atomic` (`.<name>.XXXXXXXX`) and
    `bundle.write_file` (`.<name>.tmp`) in `directories`; nothing else is touched."""
    import re

    pattern = re.compile(r"^\..+\.(tmp|[A-Za-z0-9_]{8})$")
    removed = 0
    for d in directories:
        try:
            entries = list(d.iterdir())
        except OSError:
            continue
        for p in entries:
            if pattern.match(p.name) and p.is_file() and not p.is_symlink():
                p.unlink(missing_ok=True)
                removed += 1
    return removed


class StampedWriter:
    """Writes a msgspec snapshot with a `written_at` stamp to `path` (write_atomic), only when its content,
    the stamp left out, differs from the last write that went through.

    The stamp alone would make every write differ: a rewrite of unchanged state every few seconds is wear
    for nothing on an SD card. `encode` runs on the loop (it walks tables the loop changes),
    `write` in a thread; one write is under way at a time (flush_when_changed).
    """

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self._what = what  # for the error message: "events", "pods checkpoint"
        # Digests, not the contents: with twenty pods the events and the checkpoint are some 50 KB each.
        self._last: bytes | None = None  # of the content last written, stamp left out
        self._pending: bytes | None = None  # of what the write under way will have written

    def encode(self, snapshot: msgspec.Struct) -> bytes | None:
        """The file's bytes; None when the content is what was last written."""
        content = msgspec.json.encode(msgspec.structs.replace(snapshot, written_at=0.0))
        digest = hashlib.blake2b(content, digest_size=16).digest()
        if digest == self._last:
            return None
        self._pending = digest
        return msgspec.json.encode(snapshot)

    def write(self, data: bytes) -> bool:
        """Write what `encode` gave; False when it could not be written (the caller tries again)."""
        try:
            write_atomic(self.path, data)
        except OSError as exc:
            _log.error(f"Failed to write {self._what}", exc, path=str(self.path))
            return False
        self._last = self._pending
        return True


async def flush_when_changed(
    changed: asyncio.Event,
    encode: Callable[[], bytes | None],
    write: Callable[[bytes], bool],
    interval: float,
    clock: Clock,
    max_retry: float = 30.0,
) -> None:
    """Whenever `changed` is set, at most once every `interval` seconds: `encode` on the loop, `write` the
    bytes in a thread.

    A burst of changes (twenty pods starting) becomes a few writes, not one
    fsync per change: flash storage on a small board wears and stalls. The
    encoding stays on the loop because it walks tables the loop keeps changing
    (a snapshot taken in a thread died of "OrderedDict mutated during
    iteration" under pod churn, and took the agent down). `encode` returns
    None when nothing changed since the last write. `write` returns False
    when the write failed (a full disk): it is tried again after a doubling
    delay (up to `max_retry`) even if nothing else changes, or the file would
    stay stale once there is room again.
    """
    retry = interval
    while True:
        await changed.wait()
        changed.clear()
        data = encode()
        if data is None or await asyncio.to_thread(write, data):
            retry = interval
            await clock.sleep(interval)
            continue
        changed.set()
        await clock.sleep(retry)
        retry = min(retry * 2, max_retry)


def node_key(path: Path, size: int = 32) -> bytes:
    """The node's own random key kept in `path` (0600), made on first use; a torn or short file is replaced."""
    try:
        data = path.read_bytes()
        if len(data) == size:
            return data
    except FileNotFoundError:
        pass
    data = os.urandom(size)
    ensure_dir(path.parent)
    write_atomic(path, data, PRIVATE_FILE)
    return data
