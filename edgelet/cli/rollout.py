"""`edgelet rollout status|history|retry`: the health-gated rollout of static pods, through the local API (or the
records on disk while the agent is stopped)."""

from __future__ import annotations

import argparse
from typing import TextIO

import msgspec

from edgelet.cli import common
from edgelet.cli.common import EXIT_FAILURE, EXIT_OK, CommandError, format_table, format_time
from edgelet.rollout.decide import Record, short
from edgelet.settings import Settings


def _records(settings: Settings) -> list[Record]:
    live = common.from_agent(settings, "/rollout")
    if live is not None:
        return msgspec.json.decode(live, type=list[Record])
    from edgelet.rollout.store import read_records

    return sorted(read_records(settings.root_dir), key=lambda r: r.name)


def _full(settings: Settings, pod: str) -> str:
    """`NS/NAME` or `NAME` (namespace default); a static pod's short name (without -NODE) works too."""
    ns, _, name = pod.rpartition("/")
    return f"{ns or 'default'}/{name}"


def _find(settings: Settings, records: list[Record], pod: str) -> Record:
    full = _full(settings, pod)
    for r in records:
        if r.name in (full, f"{full}-{settings.node_name}"):
            return r
    raise CommandError(f"{pod}: no rollout record (not a static pod of this node, or rollout is off for it)")


def status_table(records: list[Record]) -> str:
    rows = [["POD", "PHASE", "RUNNING", "TARGET", "LAST GOOD", "REASON"]]
    for r in records:
        rows.append([r.name, r.phase, short(r.active), short(r.target), short(r.last_good), r.reason])
    return format_table(rows)


def history_table(record: Record) -> str:
    rows = [["TIME", "VERSION", "OUTCOME", "REASON"]]
    for h in record.history:
        rows.append([format_time(h.at), short(h.hash), h.outcome, h.reason])
    return format_table(rows)


def cmd_rollout(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    sub = args.rollout_command or "status"
    if sub == "retry":
        from edgelet.cli.client import AgentError, post

        name = _find(settings, _records(settings), args.pod).name
        ns, _, pod = name.partition("/")
        try:
            body = post(settings.run_dir, f"/rollout/retry/{ns}/{pod}")
        except AgentError as exc:
            raise CommandError(f"rollout retry {name}: {exc}") from exc
        if body is None:
            print("edgelet is not running: a retry needs the agent", file=err)
            return EXIT_FAILURE
        rec = msgspec.json.decode(body, type=Record)
        print(f"{rec.name}: version {short(rec.target)} will be tried again ({rec.phase})", file=out)
        return EXIT_OK
    records = _records(settings)
    if sub == "history":
        print(history_table(_find(settings, records, args.pod)), file=out)
        return EXIT_OK
    if getattr(args, "pod", None):
        records = [_find(settings, records, args.pod)]
    print(status_table(records), file=out)
    return EXIT_OK
