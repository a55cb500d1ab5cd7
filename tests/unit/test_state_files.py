"""write_atomic's fsync choices and sync_files: what reaches storage when (fsync counted, not timed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgelet import state


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The targets of every os.fsync call ('dir' for a directory, else the file's name)."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        seen.append("dir" if os.path.isdir(path) else os.path.basename(path))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, ["temp", "dir"]),                   # a checkpoint: the file, then the rename in its directory
    ({"sync_dir": False}, ["temp"]),         # the file only: a crash may lose it whole, never tear it
    ({"sync": False}, []),                   # left to sync_files, off a latency-critical path
    ({"sync": False, "sync_dir": False}, []),
])
def test_write_atomic_fsyncs_what_it_is_asked_to(tmp_path: Path, fsyncs: list[str], kwargs: dict,
                                                 expected: list[str]) -> None:
    state.write_atomic(tmp_path / "f", b"data", **kwargs)
    assert (tmp_path / "f").read_bytes() == b"data"
    assert ["temp" if n.startswith(".f.") else n for n in fsyncs] == expected
    assert [p.name for p in tmp_path.iterdir()] == ["f"]  # no temp file stays


def test_sync_files_fsyncs_each_file_still_there(tmp_path: Path, fsyncs: list[str]) -> None:
    for name in ("a", "b"):
        state.write_atomic(tmp_path / name, b"x", sync=False)
    state.sync_files([tmp_path / "a", tmp_path / "gone", tmp_path / "b"])
    assert fsyncs == ["a", "b"]
