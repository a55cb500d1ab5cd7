"""What every subcommand shares: exit statuses, the expected-error test, formatting of ages, sizes and times,
the agent's liveness and its socket, and the one version probe."""

from __future__ import annotations

import os
import time
from pathlib import Path

from edgelet.errors import EdgeletError
from edgelet.settings import Settings
from edgelet.util.clock import Clock, RealClock
from edgelet.util.proc import version_line
from edgelet.util.table import format_table

__all__ = ["format_table"]

PROG = "edgelet"
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

# Where "now" comes from for ages and durations; tests put a FakeClock here.
clock: Clock = RealClock()


class CommandError(EdgeletError):
    """An expected failure of a subcommand; its message is shown as is."""


def format_age(seconds: float) -> str:
    """kubectl's ShortHumanDuration: 45s, 3m, 2h, 5d, 2y."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h"
    if s < 86400 * 365:
        return f"{s // 86400}d"
    return f"{s // (86400 * 365)}y"


def format_size(size: int) -> str:
    """Decimal units as `docker images` shows them: 4.26MB."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000:
            return f"{value:.3g}{unit}"
        value /= 1000
    return f"{value:.3g}TB"


def format_time(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ts))


def is_agent_alive(pid: int) -> bool:
    """Whether `pid` is a running edgelet (a reused pid of another program is not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc to tell: trust the pid
    return b"edgelet" in cmdline


def tool_version(binary: str) -> str:
    """First line of `<binary> --version`, or "not found"."""
    line = version_line(binary)
    return "not found" if line is None else line


def from_agent(settings: Settings, path: str) -> bytes | None:
    """GET `path` from the agent's socket; None when no agent runs there."""
    from edgelet.cli.client import AgentError, get

    try:
        return get(settings.run_dir, path)
    except AgentError as exc:
        raise CommandError(f"edgelet API {path}: {exc}") from exc


def is_expected_error(exc: BaseException) -> bool:
    """Errors edgelet raises on purpose (and OS errors): a message suffices, a traceback would be noise."""
    return isinstance(exc, (OSError, EdgeletError))
