"""Commands run in a running container with `runc exec`: waited for (probes, hooks) or started as a session
on the caller's descriptors (`edgelet exec`, the node API), each with scratch files named for this agent."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edgelet.container.errors import ExecError, ExecTimeout
from edgelet.runtime import _exec
from edgelet.runtime.runc import Runc

if TYPE_CHECKING:
    from edgelet.runtime.execsession import ExecSession


def _kill_pid_file(pid_file: Path) -> None:
    """SIGKILL the process whose pid runc wrote to `pid_file`, if it was written and the process lives."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Execs:
    """`runc exec` through `runner`, with the pid and process files under `exec_dir`; each call names the runtime
    handler (`Runc`) the container runs under."""

    def __init__(self, runner: _exec.Runner, exec_dir: Path, spec_dir: Path | None = None) -> None:
        self.runner = runner
        self.exec_dir = exec_dir
        # Whole specs of containers whose bundle holds them redacted (Secret values): an exec gets the real env.
        self.spec_dir = spec_dir
        # Names this agent's exec scratch files, so the start sweep tells an earlier agent's apart.
        self.prefix = secrets.token_hex(4)

    def _scratch(self, container_id: str) -> Path:
        self.exec_dir.mkdir(parents=True, exist_ok=True)
        return self.exec_dir / f"{self.prefix}-{container_id[:12]}-{secrets.token_hex(6)}"

    async def run(self, runc: Runc, container_id: str, argv: Sequence[str], timeout: float | None) -> _exec.Completed:
        """`runc exec` `argv` in the container and wait for it; never raises on a non-zero exit.

        Raises ExecTimeout when `timeout` passes. Killing `runc exec` alone would
        leave the command running in the container, so on a timeout (or a
        cancellation) the command itself is SIGKILLed through runc's pid file, as
        containerd's ExecSync does.
        """
        pid_file = self._scratch(container_id).with_suffix(".pid")
        cmd = runc.argv("exec", "--pid-file", str(pid_file), container_id, *argv)
        try:
            return await self.runner(cmd, timeout=timeout, check=False)
        except (ExecTimeout, asyncio.CancelledError):
            _kill_pid_file(pid_file)
            raise
        finally:
            pid_file.unlink(missing_ok=True)

    async def start(
        self,
        runc: Runc,
        container_id: str,
        bundle_of: Callable[[str], Awaitable[Path | None]],
        argv: Sequence[str],
        *,
        tty: bool,
        stdin: int,
        stdout: int,
        stderr: int,
    ) -> ExecSession:
        """Start `argv` in the running container with its own process spec (read from the bundle `bundle_of`
        finds), on the given descriptors. ExecSessionError when the container is not running or has no
        bundle."""
        # Only `edgelet exec` and the node API's exec need it (with termios): not an idle agent.
        from edgelet.runtime.execsession import ExecSession, ExecSessionError, build_exec_process, terminal_size

        state = await runc.state(container_id)
        status = (state or {}).get("status", "unknown to runc")
        if status != "running":
            raise ExecSessionError(f"container {container_id[:12]} is not running ({status})")
        bundle = await bundle_of(container_id)
        if bundle is None:
            raise ExecSessionError(f"container {container_id[:12]} has no bundle")
        try:
            whole = self.spec_dir / f"{container_id}.json" if self.spec_dir is not None else None
            source = whole if whole is not None and whole.exists() else bundle / "config.json"
            config = json.loads(source.read_bytes())
            # With a terminal, its size goes into the spec (runc's own first resize comes after the command starts).
            spec = build_exec_process(config["process"], argv, tty=tty, size=terminal_size(stdin) if tty else None)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ExecSessionError(
                f"cannot read the process spec of container {container_id[:12]} in {bundle}: {exc}"
            ) from exc
        name = self._scratch(container_id).name
        pid_file, process_file = self.exec_dir / f"{name}.pid", self.exec_dir / f"{name}.process.json"
        # 0600 from the start: the spec holds the container's environment.
        fd = os.open(process_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        cmd = runc.argv("exec", "--process", str(process_file), "--pid-file", str(pid_file), container_id)
        try:
            process = await _exec.start(cmd, stdin=stdin, stdout=stdout, stderr=stderr)
        except ExecError:
            process_file.unlink(missing_ok=True)
            raise
        return ExecSession(process, pid_file, process_file, copy_winsize=tty and not runc.relays_resize)

    def sweep(self) -> int:
        """At start: the exec scratch of an agent killed during an exec (its process spec holds the container's
        environment); this agent's own sessions (the API serves before this sweep) carry its prefix."""
        removed = 0
        for entry in list(self.exec_dir.iterdir()) if self.exec_dir.is_dir() else []:
            if not entry.name.startswith(f"{self.prefix}-") and entry.is_file():
                entry.unlink(missing_ok=True)
                removed += 1
        return removed
