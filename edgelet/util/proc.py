"""The one place edgelet starts processes: every other module goes through `spawn` (asyncio) or `popen` (a thread).

Keeping process creation here means one place decides what a child inherits
(no stdin unless asked, no stray descriptors) and one test can check that
nothing else forks (tests/unit/test_layering.py). Errors and timeouts with
their context are the callers' business (`runtime/_exec.py` for runc and
conmon, `images/zstd.py` for the decompressor).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
TimeoutExpired = subprocess.TimeoutExpired

# A bench's debug aid (bench/footprint.py --spawns): every child started is appended to this file as
# "<unix time> <program> <its first arguments>", so what an agent spawns can be counted per source (runc's
# subcommand follows its --root, so a few arguments are kept, not one).
_TRACE = os.environ.get("EDGELET_TRACE_SPAWNS")


def _trace(argv: Sequence[str]) -> None:
    from edgelet.util.clock import REAL_CLOCK

    try:
        with open(_TRACE, "a") as f:  # type: ignore[arg-type]
            f.write(f"{REAL_CLOCK.now():.3f} {program_name(str(argv[0]))} {' '.join(map(str, argv[1:5]))}\n")
    except OSError:
        pass


def program_name(path: str) -> str:
    """The program's name; a memfd run by its /proc path (runtime.sealedbinary's copy) by the name it was made with."""
    if path.startswith("/proc/"):
        try:
            return os.readlink(path).removeprefix("/memfd:").split(" (deleted)")[0]
        except OSError:
            pass
    return os.path.basename(path)


def _pidfd_watcher_class() -> Any:
    """Python 3.11's default asyncio child watcher starts a thread per child to wait for it; on a busy machine
    that thread waits for a core before it can say the child exited. This one waits on the child's pidfd in
    the loop that spawned it (what 3.12 does by itself). None where not needed or not possible."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return None

    class PidfdWatcher(asyncio.AbstractChildWatcher):
        def is_active(self) -> bool:
            return True

        def attach_loop(self, loop: Any) -> None:
            pass

        def close(self) -> None:
            pass

        def __enter__(self) -> PidfdWatcher:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def add_child_handler(self, pid: int, callback: Any, *args: Any) -> None:  # type: ignore[override]
            loop = asyncio.get_running_loop()
            pidfd = os.pidfd_open(pid)

            def exited() -> None:
                loop.remove_reader(pidfd)
                try:
                    _, status = os.waitpid(pid, 0)
                    code = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    code = 255  # reaped elsewhere, as asyncio's own watchers report it
                finally:
                    os.close(pidfd)
                callback(pid, code, *args)

            loop.add_reader(pidfd, exited)

        def remove_child_handler(self, pid: int) -> bool:
            return False

    return PidfdWatcher


_watcher_installed = False


def _install_watcher() -> None:
    global _watcher_installed
    if _watcher_installed:
        return
    _watcher_installed = True
    cls = _pidfd_watcher_class()
    if cls is None:
        return
    try:
        os.close(os.pidfd_open(os.getpid()))  # a kernel older than 5.3 has no pidfds
    except OSError:
        return
    asyncio.set_child_watcher(cls())


async def spawn(
    argv: Sequence[str],
    *,
    stdin: Any = DEVNULL,
    stdout: Any = PIPE,
    stderr: Any = PIPE,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    pass_fds: Sequence[int] = (),
) -> asyncio.subprocess.Process:
    """Start `argv` as an asyncio child process; OSError when it cannot start."""
    if _TRACE:
        _trace(argv)
    _install_watcher()
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        pass_fds=tuple(pass_fds),
    )


def popen(
    argv: Sequence[str], *, stdin: int | IO[bytes] | None = DEVNULL, stdout: Any = PIPE, stderr: Any = PIPE
) -> subprocess.Popen[bytes]:
    """Start `argv` for streaming from a worker thread (a decompressor feeding tarfile); OSError when it cannot."""
    if _TRACE:
        _trace(argv)
    return subprocess.Popen(list(argv), stdin=stdin, stdout=stdout, stderr=stderr)


def output(argv: Sequence[str], timeout: float = 10.0) -> str | None:
    """What `argv` prints on stdout when it succeeds, else None (not installed, failed, too slow)."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def version_line(binary: str, timeout: float = 10.0) -> str | None:
    """The first line `<binary> --version` prints (runc, conmon, zstd...); None when it is not installed.

    Used by `edgelet version` and `edgelet check`; an error is returned as the text to show.
    """
    path = shutil.which(binary)
    if path is None:
        return None
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else f"no output (exit {done.returncode})"


def runtime_features(binary: str, timeout: float = 10.0) -> str:
    """What `<runtime> features` prints (OCI runtime-features JSON): "" when it fails (crun 1.8 has no such
    command) or the binary is not installed. Used by `edgelet check`."""
    path = shutil.which(binary)
    if path is None:
        return ""
    try:
        done = subprocess.run([path, "features"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""
