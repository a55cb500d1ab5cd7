"""One-file unpack housekeeping: which leftover _MEI directories are stale (table), and the /proc/*/maps scan."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgelet.frozen import mapped_names, own_unpack_dir, remove_stale_unpack_dirs, stale_unpack_dirs

NOW = 10_000.0


@pytest.mark.parametrize(
    ("name", "mtime", "mapped", "stale"),
    [
        ("_MEI000001aaaa", NOW - 600, set(), True),  # left by a SIGKILLed run
        ("_MEI000001aaaa", NOW - 600, {"_MEI000001aaaa"}, False),  # a live edgelet maps its libpython from it
        ("_MEI000001aaaa", NOW - 5, set(), False),  # a bootloader may still be unpacking into it
        ("_MEI000002ours", NOW - 600, set(), False),  # our own
        ("images", NOW - 600, set(), False),  # not an unpack directory
    ],
)
def test_stale_unpack_dirs(name: str, mtime: float, mapped: set[str], stale: bool) -> None:
    assert stale_unpack_dirs([(name, mtime)], mapped, own="_MEI000002ours", now=NOW) == ([name] if stale else [])


def test_mapped_names_reads_proc_maps(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "12").mkdir(parents=True)
    (proc / "12" / "maps").write_text(
        "7f00-7f01 r-xp 00000000 08:01 42 /var/lib/edgelet/.unpack/_MEI00001/libpython3.11.so.1.0\n"
        "7f02-7f03 r--p 00000000 08:01 43 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    )
    (proc / "self").mkdir()
    assert mapped_names(Path("/var/lib/edgelet/.unpack"), proc) == {"_MEI00001"}


def test_source_checkout_has_no_unpack_dir() -> None:
    assert own_unpack_dir() is None
    assert remove_stale_unpack_dirs(NOW) == []
