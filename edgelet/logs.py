"""Reading containers' CRI-format log files: finding the current or previous instance, tailing and following.

conmon writes one file per container instance,
`<log_dir>/pods/<ns>_<pod>_<uid>/<container>/<restart count>.log`, each line
`<RFC3339Nano time> <stdout|stderr> <P|F> <content>`: `P` marks a partial
line (a long line split by conmon) to be joined with the next one, `F` the
end of a line. Readers (the API's /containerLogs and `edgelet logs` when the
agent is down) return the content, as `kubectl logs` shows it.
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Callable, Iterable
from edgelet.errors import EdgeletError
from edgelet.util.clock import REAL_CLOCK, Clock

LOG_DIR_MODE = 0o750  # root and the adm-like group may read logs; no one else (they carry what apps print)
FOLLOW_POLL = 0.2  # seconds between looks at a followed file (cheaper than an inotify watch per request)
_TAIL_BLOCK = 64 * 1024
_ATTEMPT_FILE = re.compile(r"(\d+)\.log")


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


def container_attempts(container_dir: Path) -> list[int]:
    """Restart counts that have a log file in `container_dir` (none when it does not exist)."""
    try:
        names = os.listdir(container_dir)
    except FileNotFoundError:
        return []
    return [int(m.group(1)) for n in names if (m := _ATTEMPT_FILE.fullmatch(n))]


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
    if lines is None:
        return 0
    # The first newline found from the end closes the last complete line; the
    # one `lines` further back closes the line before the wanted ones.
    needed = max(lines, 0) + 1
    with open(path, "rb") as f:
        pos = f.seek(0, os.SEEK_END)
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
    """The decoded content of `path` (its last `tail` lines) and the offset where reading stopped."""
    start = tail_offset(path, tail)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    complete, _ = split_complete(data)
    return decode_cri(complete, timestamps=timestamps), start + len(complete)


async def follow_log(
    path: Path,
    offset: int,
    should_stop: Callable[[], bool],
    *,
    timestamps: bool = False,
    poll: float = FOLLOW_POLL,
    clock: "Clock | None" = None,
) -> AsyncIterator[bytes]:
    """Decoded content appended to `path` after `offset`, until `should_stop()` once the file is drained.

    `should_stop` is asked only when there is nothing new to read, so what
    a container wrote before it exited is always delivered.
    """
    rest = b""
    with open(path, "rb") as f:
        f.seek(offset)
        while True:
            chunk = await asyncio.to_thread(f.read, _TAIL_BLOCK)
            if chunk:
                complete, rest = split_complete(rest + chunk)
                if complete:
                    yield decode_cri(complete, timestamps=timestamps)
                continue
            if should_stop():
                return
            await (clock or REAL_CLOCK).sleep(poll)
