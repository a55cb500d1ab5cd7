"""`edgelet get configmaps|secrets`: the ConfigMaps and Secrets the sources hold, their keys and sizes (never a
value), where each comes from and which pods use it, through the local API."""

from __future__ import annotations

import argparse
from typing import TextIO

import msgspec

from edgelet.api.configobjects import ObjectReport
from edgelet.cli import common
from edgelet.cli.common import EXIT_OK, CommandError, format_table
from edgelet.settings import Settings


def objects_table(reports: list[ObjectReport]) -> str:
    rows = [["NAMESPACE", "NAME", "KEYS", "SIZE", "SOURCE", "USED BY"]]
    for r in reports:
        keys = ",".join(f"{k}({n})" for k, n in r.keys.items()) if not r.missing else "<missing>"
        flags = " immutable" if r.immutable else ""
        rows.append(
            [
                r.namespace,
                r.name + flags,
                keys or "-",
                str(sum(r.keys.values())),
                r.origin or "-",
                "; ".join(r.used_by) or "-",
            ]
        )
    return format_table(rows)


def cmd_get(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path = "/secrets" if args.resource == "secrets" else "/configmaps"
    live = common.from_agent(settings, path)
    if live is None:
        # Accepted objects live in the agent's memory only (Secrets are kept on no disk of edgelet's).
        raise CommandError(f"{args.resource}: the agent is not running (objects are held in its memory only)")
    reports = msgspec.json.decode(live, type=list[ObjectReport])
    if args.output == "json":
        out.write(msgspec.json.format(msgspec.json.encode(reports), indent=2).decode() + "\n")
    else:
        out.write(objects_table(reports) + "\n")
    return EXIT_OK
