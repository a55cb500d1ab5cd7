"""The sealed copy crun runs from (runtime.sealedbinary): which runtimes get one, that it is sealed and runs,
that it follows the binary on disk, and that the real crun then does not copy itself again."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from edgelet.runtime.runc import Runc
from edgelet.runtime.sealedbinary import SEALS, SealedBinary, is_self_copying


@pytest.mark.parametrize(
    ("binary", "copies"),
    [
        ("/usr/bin/crun", True),
        ("crun", True),
        ("/opt/crun-1.8/bin/crun", True),
        ("/usr/sbin/runc", False),
        ("/usr/local/bin/youki", False),
        ("/usr/bin/crun-wasm", False),
    ],
)
def test_which_runtimes_copy_themselves(binary: str, copies: bool) -> None:
    assert is_self_copying(binary) is copies


def _script(path: Path, text: str) -> None:
    path.write_text(f"#!/bin/sh\necho {text}\n")
    path.chmod(0o755)


def test_the_copy_is_sealed_runs_and_follows_the_file(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    _script(tool, "one")
    sealed = SealedBinary(str(tool))
    try:
        first = sealed.exec_path()
        assert first.startswith(f"/proc/{os.getpid()}/fd/")
        assert sealed.exec_path() == first  # made once
        fd = os.open(first, os.O_RDONLY)
        try:
            assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) == SEALS
            with pytest.raises(OSError):
                os.write(fd, b"x")
        finally:
            os.close(fd)
        assert subprocess.run([first], capture_output=True, check=True).stdout == b"one\n"
        # An upgrade replaces the file: the next use copies the new one; the old copy still runs meanwhile.
        tool.unlink()
        _script(tool, "two")
        second = sealed.exec_path()
        assert second != first
        assert subprocess.run([second], capture_output=True, check=True).stdout == b"two\n"
        assert subprocess.run([first], capture_output=True, check=True).stdout == b"one\n"
    finally:
        sealed.close()


def test_a_missing_binary_is_run_by_its_own_path(tmp_path: Path) -> None:
    sealed = SealedBinary(str(tmp_path / "crun"))
    assert sealed.exec_path() == str(tmp_path / "crun")


def test_runc_runs_crun_from_its_copy_and_runc_from_its_path(tmp_path: Path) -> None:
    tool = tmp_path / "crun"
    _script(tool, "x")
    crun = Runc(str(tool), tmp_path / "root", name="crun")
    assert crun.argv("list")[0].startswith("/proc/")
    assert crun.argv("list")[1:] == ["--root", str(tmp_path / "root"), "list"]
    assert crun.binary == str(tool)  # names and checks keep the binary's own path
    runc = Runc("/usr/sbin/runc", tmp_path / "root")
    assert runc.argv("list")[0] == "/usr/sbin/runc"
    assert runc.conmon_runtime() == ("/usr/sbin/runc", None)


def test_conmon_is_handed_the_copy_it_execs_by_its_own_descriptor(tmp_path: Path) -> None:
    """conmon runs the runtime after it forked: the path it gets names a descriptor it inherits, not one of the
    agent's (which a killed agent would take along)."""
    tool = tmp_path / "crun"
    _script(tool, "from conmon")
    path, fd = Runc(str(tool), tmp_path / "root", name="crun").conmon_runtime()
    assert fd is not None and path == f"/proc/self/fd/{fd}"
    # A child that inherits it runs it by that path, as conmon's runtime child does.
    done = subprocess.run(["/bin/sh", "-c", f"exec {path}"], pass_fds=(fd,), capture_output=True, check=True)
    assert done.stdout == b"from conmon\n"


def _execs(argv: list[str], tmp_path: Path) -> list[str]:
    """The exec calls `argv` makes (strace), one line each."""
    out = tmp_path / "trace"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve,execveat", "-o", str(out), *argv], check=True)
    return [line for line in out.read_text().splitlines() if "exec" in line]


@pytest.mark.skipif(shutil.which("crun") is None or shutil.which("strace") is None, reason="needs crun and strace")
def test_real_crun_run_from_the_copy_does_not_copy_itself(tmp_path: Path) -> None:
    crun = shutil.which("crun")
    assert crun is not None
    root = tmp_path / "root"
    # As installed, crun execs itself a second time (from its read-only copy) before doing anything.
    assert any("execveat" in line for line in _execs([crun, "--root", str(root), "list"], tmp_path))
    handler = Runc(crun, root, name="crun")
    execs = _execs(handler.argv("list"), tmp_path)
    assert len(execs) == 1 and "execveat" not in execs[0]
