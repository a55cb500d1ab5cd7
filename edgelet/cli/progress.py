"""Progress of `edgelet images pull|import`: per-blob lines (bytes, rate, ETA) redrawn in place on a terminal,
plain lines as blobs start and finish otherwise; the formatting is pure, the drawing a thin loop."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TextIO, TypeVar

from edgelet.cli.common import format_size
from edgelet.images.progress import BlobProgress, Progress, ProgressSnapshot

T = TypeVar("T")
REDRAW = 0.2  # seconds between redraws on a terminal
PLAIN_POLL = 0.5  # seconds between looks for started and finished blobs otherwise


def short_name(name: str) -> str:
    """A blob's digest as docker shows layers (12 hex digits), or an archive member's last path part."""
    if name.startswith("sha256:"):
        return name[7:19]
    return name.rsplit("/", 1)[-1].rsplit(":", 1)[-1] or name


def format_rate(bytes_per_second: float) -> str:
    return f"{format_size(int(bytes_per_second))}/s"


def format_eta(seconds: float | None) -> str:
    """12s, 3m04s, 1h02m; `--` when it cannot be told (nothing came yet)."""
    if seconds is None or seconds < 0:
        return "--"
    s = int(seconds + 0.5)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def rate_and_eta(done: int, total: int | None, elapsed: float) -> tuple[float, float | None]:
    """Bytes per second so far and the seconds left at that rate (None when no byte came or no total)."""
    rate = done / elapsed if elapsed > 0 else 0.0
    if total is None or rate <= 0:
        return rate, None
    return rate, max(total - done, 0) / rate


def percent(done: int, total: int | None) -> str:
    if not total:
        return "?%" if total is None else "100%"
    return f"{min(100, done * 100 // total)}%"


def blob_line(b: BlobProgress, now: float) -> str:
    """One blob: `a1b2c3d4e5f6  12.3MB/53.5MB  23%  4.1MB/s  ETA 10s`, or `... done 53.5MB in 2.1s (25.5MB/s)`."""
    elapsed = (b.ended if b.ended is not None else now) - b.started
    rate, eta = rate_and_eta(b.done, b.total, elapsed)
    name = short_name(b.name)
    if b.finished:
        return f"{name}  done {format_size(b.done)} in {elapsed:.1f}s ({format_rate(rate)})"
    total = format_size(b.total) if b.total is not None else "?"
    return (
        f"{name}  {format_size(b.done)}/{total}  {percent(b.done, b.total)}  {format_rate(rate)}  ETA {format_eta(eta)}"
    )


def total_line(s: ProgressSnapshot) -> str:
    """All blobs: `total  12.3MB/53.5MB  23%  4.1MB/s  ETA 10s`."""
    rate, eta = rate_and_eta(s.done, s.total, s.now - s.started)
    return (
        f"total  {format_size(s.done)}/{format_size(s.total)}  {percent(s.done, s.total)}  "
        f"{format_rate(rate)}  ETA {format_eta(eta)}"
    )


def terminal_lines(s: ProgressSnapshot) -> list[str]:
    return [*(blob_line(b, s.now) for b in s.blobs), *([total_line(s)] if len(s.blobs) > 1 else [])]


def plain_lines(before: ProgressSnapshot | None, after: ProgressSnapshot) -> list[str]:
    """What to print since `before` without a terminal: a line per blob that started (with its size) and per
    blob that finished (with its time and rate)."""
    seen = {b.name: b for b in (before.blobs if before is not None else ())}
    out = []
    for b in after.blobs:
        old = seen.get(b.name)
        if old is None:
            size = format_size(b.total) if b.total is not None else "unknown size"
            out.append(f"{short_name(b.name)}  started ({size})")
        if b.finished and (old is None or not old.finished):
            out.append(blob_line(b, after.now))
    return out


def pull_text(done: int, total: int) -> str:
    """A pod's pull under way, for `describe pod` and `pods -o wide`: `12.3MB of 53.5MB (23%)`."""
    return f"{format_size(done)} of {format_size(total)} ({percent(done, total)})"


def with_progress(work: Callable[[Progress], T], out: TextIO, *, tty: bool) -> T:
    """Run `work(progress)` in a thread and draw its progress on `out` until it ends; its result or error."""
    progress = Progress()
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work(progress))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=run, name="images-progress", daemon=True)
    thread.start()
    drawn = 0
    last: ProgressSnapshot | None = None
    while True:
        thread.join(REDRAW if tty else PLAIN_POLL)
        snap = progress.snapshot()
        if tty:
            drawn = _redraw(out, terminal_lines(snap), drawn)
        else:
            for line in plain_lines(last, snap):
                print(line, file=out)
            out.flush()
        last = snap
        if not thread.is_alive():
            break
    if error:
        raise error[0]
    return result[0]


def _redraw(out: TextIO, lines: Sequence[str], drawn: int) -> int:
    """Replace the `drawn` lines written last with `lines` (cursor up, clear each line)."""
    if drawn:
        out.write(f"\x1b[{drawn}F")
    for line in lines:
        out.write(f"\x1b[2K{line}\n")
    out.flush()
    return len(lines)
