"""The inotify watches on the event loop (edgelet.util.inotify): decoding, masks, and a real watch on a temp dir."""

from __future__ import annotations

import asyncio
import os
import struct

from edgelet.util import inotify
from edgelet.util.inotify import Inotify, event_names, mask_of, parse


def _event(wd: int, mask: int, name: bytes) -> bytes:
    padded = name + b"\0" * (16 - len(name)) if name else b""
    return struct.pack("iIII", wd, mask, 0, len(padded)) + padded


def test_parse_reads_every_event_of_a_buffer_with_and_without_a_name():
    buf = (
        _event(1, inotify.IN_CREATE, b"a.yaml")
        + _event(2, inotify.IN_DELETE_SELF, b"")
        + _event(1, inotify.IN_CLOSE_WRITE, b"b")
    )
    assert parse(buf) == [
        (1, inotify.IN_CREATE, "a.yaml"),
        (2, inotify.IN_DELETE_SELF, ""),
        (1, inotify.IN_CLOSE_WRITE, "b"),
    ]
    assert parse(b"") == []


def test_names_and_masks():
    assert event_names(inotify.IN_MOVED_TO) == ["created"]
    assert event_names(inotify.IN_MOVED_FROM) == ["deleted"], "an unpaired move out reads as a deletion"
    assert event_names(inotify.IN_CLOSE_NOWRITE | inotify.IN_ISDIR) == ["closed_no_write"]
    mask = mask_of({"created", "closed"})
    assert mask & inotify.IN_CREATE and mask & inotify.IN_MOVED_TO and mask & inotify.IN_CLOSE_WRITE
    assert not mask & inotify.IN_OPEN, "reads are not asked for unless wanted"
    assert mask & inotify.IN_DELETE_SELF, "the directory itself going is always reported"


def test_a_real_watch_reports_changes_on_the_loop_and_closes(tmp_path):
    seen: list[tuple[str, str]] = []

    async def main() -> None:
        w = Inotify()
        got = asyncio.Event()

        def cb(event: str, path: str) -> None:
            seen.append((event, path))
            got.set()

        sub = tmp_path / "d"
        sub.mkdir()
        w.add(str(sub), {"created", "closed", "deleted"}, cb)
        (sub / "x").write_text("1")
        os.rename(sub / "x", tmp_path / "y")
        for _ in range(100):  # events arrive through the loop's reader, never wall-clock asserted
            await asyncio.wait_for(got.wait(), 30)
            got.clear()
            if ("deleted", str(sub / "x")) in seen:
                break
        sub.rmdir()
        for _ in range(100):
            if ("deleted", str(sub)) in seen:
                break
            await asyncio.wait_for(got.wait(), 30)
            got.clear()
        w.close()
        w.close()  # twice is harmless

    asyncio.run(main())
    assert ("created", str(tmp_path / "d" / "x")) in seen
    assert ("closed", str(tmp_path / "d" / "x")) in seen
    assert ("deleted", str(tmp_path / "d")) in seen


def test_a_missing_directory_is_an_oserror(tmp_path):
    async def main() -> None:
        w = Inotify()
        try:
            try:
                w.add(str(tmp_path / "nope"), {"created"}, lambda e, p: None)
            except OSError as exc:
                assert str(tmp_path / "nope") in str(exc)
            else:
                raise AssertionError("no error")
        finally:
            w.close()

    asyncio.run(main())


def test_a_queue_overflow_wakes_every_watcher(tmp_path):
    seen: list[tuple[str, str]] = []

    async def main() -> None:
        w = Inotify()
        try:
            w.add(str(tmp_path), {"created"}, lambda e, p: seen.append((e, p)))
            r, wr = os.pipe()  # the overflow event as the kernel writes it, fed through the reader
            os.write(wr, _event(-1, inotify.IN_Q_OVERFLOW, b""))
            os.close(wr)
            real, w.fd = w.fd, r
            w._read()
            w.fd = real
            os.close(r)
        finally:
            w.close()

    asyncio.run(main())
    assert seen == [("modified", str(tmp_path))]
