"""`edgelet update status|history|rollback`: the agent's own release, read from the files self-update keeps (the
`current` symlink, the trial record, the history), so it works whether the agent runs or not.

A rollback restarts a running agent under systemd the way the agent restarts itself into a trial: SIGTERM to
the agent (pods keep running: the unit's `KillMode=process`), and `Restart=always` starts `current` again.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import TextIO

from edgelet.cli.common import EXIT_OK, CommandError, format_table, format_time
from edgelet.settings import Settings
from edgelet.update.errors import NoRollbackTarget
from edgelet.update.stage import current_target, off_reason, read_release, swap_current
from edgelet.update.store import COMMITTED, OPERATOR_ROLLBACK, UpdateStore


def _store(settings: Settings) -> UpdateStore:
    return UpdateStore(settings.root_dir / "update")


def updates_off(settings: Settings) -> str:
    return off_reason(settings.trusted_keys is not None, settings.update_current)


def status_lines(settings: Settings) -> list[str]:
    target = current_target(settings.update_current, absolute=True)
    info = read_release(Path(target)) if target else None
    lines = [
        f"Release:   {info.name if info else '(none: ' + (target or str(settings.update_current)) + ')'}",
        f"Directory: {target or '-'}",
        f"Updates:   {updates_off(settings) or 'on'}",
    ]
    store = _store(settings)
    trial = store.trial()
    if trial is not None:
        state = trial.outcome or f"on trial, {trial.attempts} start(s) counted"
        lines.append(f"Trial:     version {trial.version} ({state}; previous {trial.previous})")
    history = store.history()
    if history:
        last = history[-1]
        what = last.get("version", last.get("release", ""))
        lines.append(f"Last:      {last.get('outcome')} {what} {format_time(float(last.get('time') or 0))}")
        if last.get("reason"):
            lines.append(f"           {last['reason']}")
    return lines


def history_table(settings: Settings) -> str:
    rows = [["TIME", "VERSION", "OUTCOME", "REASON"]]
    for e in _store(settings).history():
        rows.append(
            [
                format_time(float(e.get("time") or 0)),
                str(e.get("version", e.get("release", ""))),
                str(e.get("outcome", "")),
                str(e.get("reason", "")),
            ]
        )
    return format_table(rows)


def rollback(settings: Settings, now: float) -> tuple[str, str]:
    """Point `current` at the release the running one replaced; (from, to). The one way down."""
    store = _store(settings)
    if store.trial() is not None and not store.trial().outcome:  # type: ignore[union-attr]
        raise CommandError("a release is on trial: it commits or rolls back by itself")
    running = current_target(settings.update_current, absolute=True)
    previous = next(
        (
            str(e["previous"])
            for e in reversed(store.history())
            if e.get("outcome") == COMMITTED and e.get("previous") and str(e["previous"]) != running
        ),
        None,
    )
    if previous is None or not Path(previous).is_dir():
        raise NoRollbackTarget()
    swap_current(settings.update_current, previous)
    left, to = read_release(Path(running)) if running else None, read_release(Path(previous))
    store.append(
        {
            "time": now,
            "version": left.version if left else None,
            "outcome": OPERATOR_ROLLBACK,
            "reason": f"edgelet update rollback to {to.version if to else previous}",
        }
    )
    return running, previous


def restart_decision(pid: int | None, *, supervised: bool, no_restart: bool) -> tuple[bool, str]:
    """Whether a rollback restarts the agent (`pid` the one that listens, `supervised` when systemd started it),
    and what the operator is told (pure)."""
    if pid is None:
        return False, "edgelet is not running: its next start runs it"
    if no_restart:
        return False, f"restart edgelet (pid {pid}) to run it (systemctl restart edgelet)"
    if not supervised:
        return False, f"edgelet (pid {pid}) does not run under systemd: restart it to run it"
    return True, f"restarting edgelet (pid {pid}) into it; pods keep running"


def is_supervised(pid: int) -> bool:
    """Whether systemd started the process: it sets $INVOCATION_ID for each start of a unit (systemd 232+)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return any(entry.startswith(b"INVOCATION_ID=") for entry in environ.split(b"\0"))


def restart_agent(settings: Settings, *, no_restart: bool) -> str:
    """After a rollback: SIGTERM to the running agent when systemd will start it again; what was done."""
    from edgelet.cli.client import agent_pid

    pid = agent_pid(settings.run_dir)
    restart, message = restart_decision(pid, supervised=pid is not None and is_supervised(pid), no_restart=no_restart)
    if restart and pid is not None:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError as exc:
            raise CommandError(f"cannot restart edgelet (pid {pid}): {exc.strerror or exc}") from exc
    return message


def cmd_update(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    sub = args.update_command or "status"
    if sub == "history":
        print(history_table(settings), file=out)
    elif sub == "rollback":
        from edgelet.cli.common import clock

        running, previous = rollback(settings, clock.now())
        message = restart_agent(settings, no_restart=bool(getattr(args, "no_restart", False)))
        print(f"current: {running} -> {previous}; {message}", file=out)
    else:
        print("\n".join(status_lines(settings)), file=out)
    return EXIT_OK
