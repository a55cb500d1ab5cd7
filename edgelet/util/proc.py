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
from typing import IO, Any, Mapping, Sequence

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
TimeoutExpired = subprocess.TimeoutExpired

# A bench's debug aid (bench/footprint.py --spawns): every child started is appended to this file as
# "<unix time> <program> <first argument>", so what an idle agent spawns can be counted per source.
_TRACE = os.environ.get("EDGELET_TRACE_SPAWNS")


def _trace(argv: Sequence[str]) -> None:
    from edgelet.util.clock import REAL_CLOCK

    try:
        with open(_TRACE, "a") as f:  # type: ignore[arg-type]
            f.write(f"{REAL_CLOCK.now():.3f} {os.path.basename(str(argv[0]))} {argv[1] if len(argv) > 1 else ''}\n")
    except OSError:
        pass


async def spawn(argv: Sequence[str], *, stdin: Any = DEVNULL, stdout: Any = PIPE, stderr: Any = PIPE,
                env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                pass_fds: Sequence[int] = ()) -> asyncio.subprocess.Process:
    """Start `argv` as an asyncio child process; OSError when it cannot start."""
    if _TRACE:
        _trace(argv)
    return await asyncio.create_subprocess_exec(
        *argv, stdin=stdin, stdout=stdout, stderr=stderr,
        env=dict(env) if env is not None else None, cwd=cwd, pass_fds=tuple(pass_fds),
    )


def popen(argv: Sequence[str], *, stdin: int | IO[bytes] | None = DEVNULL, stdout: Any = PIPE,
          stderr: Any = PIPE) -> "subprocess.Popen[bytes]":
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
