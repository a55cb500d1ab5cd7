"""bundle.write_file: whole files with their mode, durable or not, and no temp file left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from edgelet.runtime import bundle as bl


@pytest.mark.parametrize("durable", [True, False])
def test_replaces_the_file_whole_with_its_mode(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "hosts"
    target.write_text("old\n")
    bl.write_file(target, "127.0.0.1 localhost\n", 0o644, durable=durable)
    assert target.read_text() == "127.0.0.1 localhost\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["hosts"]


def test_a_failed_volatile_write_leaves_no_temp_file(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        bl.write_file(tmp_path / "missing-dir" / "hosts", "x", durable=False)
    assert os.listdir(tmp_path) == []
