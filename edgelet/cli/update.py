"""`edgelet update status|history|rollback`: the agent's own release, read from the files self-update keeps (the
`current` symlink, the trial record, the history), so it works whether the agent runs or not."""

from __future__ import annotations

import argparse
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


def cmd_update(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    sub = args.update_command or "status"
    if sub == "history":
        print(history_table(settings), file=out)
    elif sub == "rollback":
        from edgelet.cli.common import clock

        running, previous = rollback(settings, clock.now())
        print(f"current: {running} -> {previous}; restart edgelet to run it (systemctl restart edgelet)", file=out)
    else:
        print("\n".join(status_lines(settings)), file=out)
    return EXIT_OK
