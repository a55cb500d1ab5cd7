"""Reading containers' CRI-format log files: finding the current or previous instance, tailing and following.

conmon writes one file per container instance,
`<log_dir>/pods/<ns>_<pod>_<uid>/<container>/<restart count>.log`, each line
`<RFC3339Nano time> <stdout|stderr> <P|F> <content>`: `P` marks a partial
line (a long line split by conmon) to be joined with the next one, `F` the
end of a line. Readers (the API's /containerLogs and `edgelet logs` when the
agent is down) return the content, as `kubectl logs` shows it.

Rotation (edgelet.runtime.logrotation) renames the current file to
`<restart count>.log.<YYYYMMDD-HHMMSS.ffffff>` and gzips all but the newest
rotated file (`….gz`); the reading here spans the rotated files of an
instance, oldest first, and a follower moves to the new file when the path
changes underneath it. The decisions of rotation (`plan_rotation`,
`rotated_name`, `next_check_delay`) are pure and live here too, beside the
names they decide about.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import re
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

from edgelet.errors import EdgeletError
from edgelet.util.clock import REAL_CLOCK, Clock

LOG_DIR_MODE = 0o750  # root and the adm-like group may read logs; no one else (they carry what apps print)
FOLLOW_POLL = 0.2  # seconds between looks at a followed file (cheaper than an inotify watch per request)
_TAIL_BLOCK = 64 * 1024
_ATTEMPT_FILE = re.compile(r"(\d+)\.log")
# `<attempt>.log.<stamp>[.gz]`: kubelet's `YYYYMMDD-HHMMSS`, with microseconds so that several
# rotations within a second (a fast-growing log) still sort by age.
_STAMP_FORMAT = "%Y%m%d-%H%M%S.%f"
_ROTATED_FILE = re.compile(r"(\d+)\.log\.(\d{8}-\d{6}\.\d{6})(\.gz)?")
GZ_SUFFIX = ".gz"
TMP_SUFFIX = ".tmp"  # conmon's reopen and our compression both write `<name>.tmp` and rename it


def ensure_log_dir(log_dir: Path, path: Path) -> None:
    """Make `path` (below `log_dir`'s pods/ or containers/) with mode 0750, tightening looser dirs edgelet made.

    `log_dir` itself (/var/log) belongs to the system and keeps its mode.
    """
    from edgelet.state import ensure_dir

    top = log_dir / path.relative_to(log_dir).parts[0]
    ensure_dir(path, LOG_DIR_MODE, tighten_from=top)


class LogNotFoundError(EdgeletError):
    """No log file for the requested container instance; the message says which."""


@dataclass(frozen=True)
class CriLine:
    timestamp: bytes
    stream: bytes  # b"stdout" | b"stderr"
    partial: bool
    content: bytes


def parse_cri_line(line: bytes) -> CriLine | None:
    """One line of a CRI log file (without its newline); None when it is not in CRI format."""
    parts = line.split(b" ", 3)
    if len(parts) < 3 or parts[1] not in (b"stdout", b"stderr") or parts[2] not in (b"P", b"F"):
        return None
    return CriLine(parts[0], parts[1], parts[2] == b"P", parts[3] if len(parts) == 4 else b"")


def decode_cri(data: bytes, *, timestamps: bool = False) -> bytes:
    """The log content of complete CRI lines in `data`; a partial (P) entry is joined with what follows.

    A line that is not CRI format is passed through as is rather than
    dropped (kubelet fails the whole request on one; a reader on a device
    would rather see it).
    """
    out: list[bytes] = []
    pending_ts: bytes | None = None
    for raw in data.split(b"\n"):
        if not raw:
            continue
        entry = parse_cri_line(raw)
        if entry is None:
            out.append(raw + b"\n")
            continue
        if timestamps and pending_ts is None:
            out.append(entry.timestamp + b" ")
        pending_ts = entry.timestamp if entry.partial else None
        out.append(entry.content if entry.partial else entry.content + b"\n")
    return b"".join(out)


def split_complete(data: bytes) -> tuple[bytes, bytes]:
    """`data` cut after its last newline: (complete lines, the unfinished rest)."""
    cut = data.rfind(b"\n") + 1
    return data[:cut], data[cut:]


def select_attempt(attempts: Iterable[int], *, previous: bool) -> int | None:
    """The instance to read: the newest, or with `previous` the one before it (kubectl logs -p)."""
    ordered = sorted(set(attempts), reverse=True)
    index = 1 if previous else 0
    return ordered[index] if len(ordered) > index else None


def container_attempts(container_dir: Path | str) -> list[int]:
    """Restart counts that have a log file in `container_dir` (none when it does not exist)."""
    try:
        names = os.listdir(container_dir)
    except FileNotFoundError:
        return []
    # A rotated file counts too: between a rotation's rename and conmon's reopen there is no `<n>.log`.
    return sorted({int(m.group(1)) for n in names if (m := _ATTEMPT_FILE.fullmatch(n) or _ROTATED_FILE.fullmatch(n))})


def find_log_file(container_dir: Path, *, previous: bool = False) -> Path:
    """The log file of the newest (or previous) instance of a container; LogNotFoundError when missing."""
    attempt = select_attempt(container_attempts(container_dir), previous=previous)
    if attempt is None:
        which = "previous terminated container" if previous else "container"
        raise LogNotFoundError(f"no log of the {which} {container_dir.name!r} in {container_dir.parent}")
    return container_dir / f"{attempt}.log"


def tail_offset(path: Path, lines: int | None) -> int:
    """The byte offset where the last `lines` complete lines of `path` start (0 for all); reads only its end.

    An unfinished last line does not count: it is not a line to show yet.
    """
    with open(path, "rb") as f:
        return tail_offset_fd(f, lines)


def rotated_stamp(name: str, attempt: int) -> str | None:
    """The stamp of a rotated file name of instance `attempt` (`3.log.20240501-100000.000001.gz`), else None."""
    m = _ROTATED_FILE.fullmatch(name)
    return m.group(2) if m is not None and int(m.group(1)) == attempt else None


def rotated_names(names: Iterable[str], attempt: int) -> list[str]:
    """The rotated files of instance `attempt` among `names`, oldest first (a stamp compressed and not
    compressed at once, left by an interrupted compression, is listed both ways: plain first)."""
    found = [(stamp, n.endswith(GZ_SUFFIX), n) for n in names if (stamp := rotated_stamp(n, attempt)) is not None]
    return [n for _, _, n in sorted(found)]


def rotated_name(attempt: int, existing: Iterable[str], now: float) -> str:
    """The name the current log of `attempt` gets when rotated at wall time `now`: newer than every
    existing one even when the clock stepped back, so names always sort by age."""
    stamp = datetime.fromtimestamp(now, UTC)
    stamps = [s for n in existing if (s := rotated_stamp(n, attempt)) is not None]
    if stamps:
        newest = datetime.strptime(max(stamps), _STAMP_FORMAT).replace(tzinfo=UTC)
        if stamp <= newest:
            stamp = newest + timedelta(microseconds=1)
    return f"{attempt}.log.{stamp.strftime(_STAMP_FORMAT)}"


@dataclass(frozen=True)
class RotationPlan:
    """What one check does to an instance's log files, in this order: remove, compress, rotate."""

    remove: tuple[str, ...] = ()
    compress: tuple[str, ...] = ()
    rotate: bool = False


def plan_rotation(size: int, rotated: Sequence[str], *, max_size: int, max_files: int, live: bool) -> RotationPlan:
    """kubelet's rotation decision for one instance whose current log holds `size` bytes.

    `rotated` are the instance's rotated names, oldest first, without the
    current file's own hard link. A live log (its conmon still writes it) of
    `max_size` bytes or more is rotated. At most `max_files` files stay,
    the current one included: before a rotation, room is made for the file
    it adds. Every rotated file but the newest is compressed; a plain file
    whose compressed twin exists (an interrupted compression) goes.
    """
    rotate = live and size >= max_size
    plain = {n for n in rotated if not n.endswith(GZ_SUFFIX)}
    twins = tuple(n for n in rotated if n in plain and n + GZ_SUFFIX in rotated)
    rest = [n for n in rotated if n not in twins]
    keep = max(max_files - (2 if rotate else 1), 0)
    cut = max(len(rest) - keep, 0)
    remove = twins + tuple(rest[:cut])
    kept = rest[cut:]
    # After a rotation the current file becomes the newest rotated one, so every kept file is older.
    older = kept if rotate else kept[:-1]
    compress = tuple(n for n in older if not n.endswith(GZ_SUFFIX))
    return RotationPlan(remove=remove, compress=compress, rotate=rotate)


def next_check_delay(size: int, rate: float, *, max_size: int, interval: float, min_delay: float) -> float:
    """Seconds until a log growing `rate` bytes/s should be looked at again: when it is due to reach
    `max_size`, never later than `interval` nor sooner than `min_delay` (a flood is checked often,
    a quiet log once per interval)."""
    if rate <= 0:
        return interval
    return min(max((max_size - size) / rate, min_delay), interval)


def spare_path(current: Path) -> Path:
    """`<n>.log.tmp`: the file conmon opens (and renames to `current`) when it reopens the log, made ahead
    with its rotated name by the rotator (see runtime.logrotation)."""
    return current.with_name(current.name + TMP_SUFFIX)


def instance_files(current: Path) -> list[Path]:
    """Every file of one container instance, oldest first: its rotated files, then `current` when it
    exists. The current file's own hard link under a rotated name and the spare's (see
    runtime.logrotation) are left out: the same bytes, and none yet."""
    m = _ATTEMPT_FILE.fullmatch(current.name)
    if m is None:
        return [current] if current.exists() else []  # not one of conmon's instance files: no rotation
    attempt = int(m.group(1))
    try:
        names = os.listdir(current.parent)
    except FileNotFoundError:
        return []
    try:
        st = current.stat()
    except FileNotFoundError:
        st = None
    spare = stat_or_none(spare_path(current)) if spare_path(current).name in names else None
    files = []
    for name in rotated_names(names, attempt):
        path = current.parent / name
        if name.endswith(GZ_SUFFIX):
            if name[: -len(GZ_SUFFIX)] in names:
                continue  # an interrupted compression: the plain file is complete
        elif (st is not None and same_file(path, st)) or (spare is not None and same_file(path, spare)):
            continue
        files.append(path)
    if st is not None:
        files.append(current)
    return files


def same_file(path: Path, st: os.stat_result) -> bool:
    other = stat_or_none(path)
    return other is not None and (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)


def stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def link_name(directory: Path, rotated: Iterable[str], st: os.stat_result | None) -> str | None:
    """The plain rotated name in `directory` that is a second name of the file `st` describes (the current
    file's link, the spare's), None without one."""
    if st is None:
        return None
    return next((n for n in rotated if not n.endswith(GZ_SUFFIX) and same_file(directory / n, st)), None)


def read_file_bytes(path: Path) -> bytes:
    """A log file's bytes, decompressed when it is a rotated `.gz`; b"" when it vanished meanwhile
    (rotation removed it), since a reader then just has less to show."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return b""
    if path.name.endswith(GZ_SUFFIX):
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            return b""  # a damaged archive shows as empty rather than failing the whole request
    return data


def _last_lines(data: bytes, lines: int) -> bytes:
    """The last `lines` complete lines of `data` (which ends with a newline or is empty)."""
    if lines <= 0:
        return b""
    cut = len(data)
    for _ in range(lines + 1):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            return data
    return data[cut + 1 :]


class LogCursor:
    """A position in one instance's log that survives rotation: an open file and the path it came from.

    conmon writes to its open file until it is told to reopen; it then
    creates a new file at the path. So when the cursor's file is drained and
    the path names another file, nothing more will ever be written to the old
    one: drain it once more, then continue at the start of the new file. No
    line is lost or repeated.
    """

    def __init__(self, path: Path, f: IO[bytes] | None, *, timestamps: bool = False) -> None:
        self.path = path
        self._f = f
        self._rest = b""
        self.timestamps = timestamps
        self._stamp: str | None = None  # the rotated stamp our file has (see _successors)
        self._note_stamp()

    def _note_stamp(self) -> None:
        """Remember the rotated stamp of our file while it is still a plain file with that name: once it is
        gzipped its inode is gone, and the stamp is what still places it among the others."""
        if self._f is None or self._stamp is not None:
            return
        m = _ATTEMPT_FILE.fullmatch(self.path.name)
        if m is None:
            return
        attempt = int(m.group(1))
        try:
            names = os.listdir(self.path.parent)
        except FileNotFoundError:
            return
        name = link_name(self.path.parent, rotated_names(names, attempt), os.fstat(self._f.fileno()))
        self._stamp = rotated_stamp(name, attempt) if name is not None else None

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> LogCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def offset_in_current(self) -> int:
        """Where the cursor is in the file now at the path (0 when it is on an older file, or none)."""
        return self._f.tell() if self._f is not None and not self._moved() else 0

    def _read(self) -> bytes:
        assert self._f is not None
        chunks = []
        while chunk := self._f.read(_TAIL_BLOCK):
            chunks.append(chunk)
            if len(chunks) >= 16:
                break  # give a reader the first megabyte rather than the whole backlog at once
        return b"".join(chunks)

    def _moved(self) -> bool:
        """Whether the path now names another file than ours (conmon has reopened after a rotation)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # renamed, not yet reopened: ours is still the one being written
        if self._f is None:
            return True
        mine = os.fstat(self._f.fileno())
        return (mine.st_dev, mine.st_ino) != (st.st_dev, st.st_ino)

    def _successors(self) -> list[Path]:
        """The files written after ours, oldest first, ending with the current one.

        A follower that fell more than one rotation behind finds the files in
        between among the rotated ones: by its file's inode while that is
        still a plain file, else (already gzipped or removed) by the rotated
        name it had, as every file named after it came after it. Only a file
        that never had a rotated name is left for the current one.
        """
        files = instance_files(self.path)
        if self._f is not None:
            mine = os.fstat(self._f.fileno())
            for i, f in enumerate(files[:-1]):
                if not f.name.endswith(GZ_SUFFIX) and same_file(f, mine):
                    return files[i + 1 :]
        m = _ATTEMPT_FILE.fullmatch(self.path.name)
        if self._stamp is not None and m is not None:
            # Gzipped (or pruned) already: the files named after it came after it.
            attempt = int(m.group(1))
            return [f for f in files[:-1] if (rotated_stamp(f.name, attempt) or "") > self._stamp] + files[-1:]
        return files[-1:]

    def _open_successors(self) -> tuple[IO[bytes], list[Path]] | None:
        """The current file, opened, and the rotated files between ours and it; None when the path is
        missing or keeps moving (the next call looks again, from our file)."""
        for _ in range(3):
            try:
                f = open(self.path, "rb")
            except FileNotFoundError:
                return None
            successors = self._successors()
            # Listed after opening: when no rotation came in between, the list ends with our open file.
            if successors and same_file(successors[-1], os.fstat(f.fileno())):
                return f, successors[:-1]
            f.close()
        return None

    def read_new(self) -> bytes:
        """Decoded content written since the last call (b"" when there is none yet)."""
        data = self._read() if self._f is not None else b""
        if not data:
            if not self._moved():
                return b""
            # conmon writes nothing more to our file once the path has moved on: its last words first,
            # then whole any rotated file that came between, then on to the current one.
            parts = [self._read() if self._f is not None else b""]
            found = self._open_successors()
            if found is not None:
                f, between = found
                parts += [read_file_bytes(p) for p in between]
                self.close()
                self._f = f
                self._stamp = None
                self._note_stamp()
                parts.append(self._read())
            data = b"".join(parts)
            if not data:
                return b""
        if self._stamp is None:
            self._note_stamp()  # a file conmon made without the spare gets its rotated name at the next check
        complete, self._rest = split_complete(self._rest + data)
        return decode_cri(complete, timestamps=self.timestamps) if complete else b""


def open_log(path: Path, *, tail: int | None = None, timestamps: bool = False) -> tuple[bytes, LogCursor]:
    """The decoded content of one instance's log across its rotated files (its last `tail` lines, or
    all), and a cursor just after it to follow from. `path` is the instance's current file.

    The current file is opened first, so whatever is written after this
    read comes through the cursor. When the current file is missing (a
    rotation between its rename and conmon's reopen) the newest rotated file,
    which conmon is still writing, is followed instead.
    """
    f: IO[bytes] | None = None
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        pass
    # Listed after opening: a rotation in between leaves our file among the rotated ones, where it is found
    # by its inode, rather than taking its lines out of the listing (a read would miss them).
    files = instance_files(path)
    if f is not None:
        mine = os.fstat(f.fileno())
        ours = next((i for i, p in enumerate(files) if not p.name.endswith(GZ_SUFFIX) and same_file(p, mine)), None)
        # (Not found: gone from the listing already; what it holds is still read through f, as the newest.)
        files = files[: ours + 1] if ours is not None else [p for p in files if p != path] + [path]
    if f is None and files and not files[-1].name.endswith(GZ_SUFFIX):
        try:
            f = open(files[-1], "rb")
        except FileNotFoundError:
            pass
    try:
        current = b""
        if f is not None:
            # The tail is counted back from the size seen now, and only that much is read: a line the
            # container writes meanwhile comes through the cursor, not as one line too many.
            end = os.fstat(f.fileno()).st_size
            start = tail_offset_fd(f, tail, end=end)
            f.seek(start)
            current, rest = split_complete(f.read(end - start))
            f.seek(start + len(current))
            older = files[:-1]
        else:
            older = files
        parts = [current]
        have = current.count(b"\n")
        for old in reversed(older):
            if tail is not None and have >= tail:
                break
            data, _ = split_complete(read_file_bytes(old))
            if tail is not None:
                data = _last_lines(data, tail - have)
            have += data.count(b"\n")
            parts.append(data)
        raw = b"".join(reversed(parts))
    except BaseException:
        if f is not None:
            f.close()
        raise
    return decode_cri(raw, timestamps=timestamps), LogCursor(path, f, timestamps=timestamps)


def tail_offset_fd(f: IO[bytes], lines: int | None, *, end: int | None = None) -> int:
    """`tail_offset` on an open file, counted back from `end` (its size when None)."""
    if lines is None:
        return 0
    # The first newline found from the end closes the last complete line; the
    # one `lines` further back closes the line before the wanted ones.
    needed = max(lines, 0) + 1
    pos = f.seek(0, os.SEEK_END) if end is None else end
    while pos > 0:
        start = max(0, pos - _TAIL_BLOCK)
        f.seek(start)
        block = f.read(pos - start)
        i = len(block)
        while (i := block.rfind(b"\n", 0, i)) >= 0:
            needed -= 1
            if needed == 0:
                return start + i + 1
        pos = start
    return 0


def read_log(path: Path, *, tail: int | None = None, timestamps: bool = False) -> tuple[bytes, int]:
    """The decoded content of an instance's log across its rotated files (the last `tail` lines), and
    the offset in `path` where reading stopped."""
    data, cursor = open_log(path, tail=tail, timestamps=timestamps)
    with cursor:
        offset = cursor.offset_in_current()
    return data, offset


async def follow_cursor(
    cursor: LogCursor,
    should_stop: Callable[[], bool],
    *,
    poll: float = FOLLOW_POLL,
    clock: Clock | None = None,
) -> AsyncIterator[bytes]:
    """Decoded content arriving at `cursor` (across rotations), until `should_stop()` once drained.

    `should_stop` is asked only when there is nothing new to read, so what
    a container wrote before it exited is always delivered. Closes the cursor.
    """
    try:
        while True:
            data = await asyncio.to_thread(cursor.read_new)
            if data:
                yield data
                continue
            if should_stop():
                # One more look: what was written between the last read and the exit.
                data = await asyncio.to_thread(cursor.read_new)
                if data:
                    yield data
                return
            await (clock or REAL_CLOCK).sleep(poll)
    finally:
        cursor.close()


async def follow_log(
    path: Path,
    offset: int,
    should_stop: Callable[[], bool],
    *,
    timestamps: bool = False,
    poll: float = FOLLOW_POLL,
    clock: Clock | None = None,
) -> AsyncIterator[bytes]:
    """Decoded content appended to `path` after `offset` (and, after a rotation, to its successor)."""
    f = open(path, "rb")
    f.seek(offset)
    async for chunk in follow_cursor(LogCursor(path, f, timestamps=timestamps), should_stop, poll=poll, clock=clock):
        yield chunk
