"""`edgelet events`: kubelet-style events of the agent, live or as last written."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from edgelet.cli import common
from edgelet.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    CommandError,
    format_age,
    format_table,
    format_time,
    is_agent_alive,
)
from edgelet.settings import Settings

if TYPE_CHECKING:
    from edgelet.events import Event


def events_table(events: Sequence[Event], now: float) -> str:
    """kubectl get events' columns: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE (with a repeat count)."""
    rows = [["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]]
    for e in sorted(events, key=lambda e: e.last_timestamp):
        obj = f"{e.object.kind.lower()}/{e.object.name}"
        if e.object.field_path:
            obj += f" {e.object.field_path}"
        seen = format_age(now - e.last_timestamp)
        if e.count > 1:
            seen += f" (x{e.count} over {format_age(e.last_timestamp - e.first_timestamp)})"
        rows.append([seen, e.type, e.reason, obj, e.message])
    return format_table(rows)


def events_for(events: Sequence[Event], pod: str, node_name: str) -> list[Event]:
    """The events of `pod` ([NAMESPACE/]NAME; a static pod's name with or without its -NODE suffix)."""
    ns, _, name = pod.rpartition("/")
    names = {name, f"{name}-{node_name}"}
    return [e for e in events if e.object.name in names and (not ns or e.object.namespace == ns)]


def cmd_events(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import msgspec

    from edgelet.events import EventsSnapshot, events_path, read_events

    path = events_path(settings.run_dir)
    try:
        live = common.from_agent(settings, "/events")
        snapshot = msgspec.json.decode(live, type=EventsSnapshot) if live is not None else read_events(path)
    except (OSError, msgspec.DecodeError) as exc:
        raise CommandError(f"cannot read events from {path}: {exc}") from exc
    if snapshot is None:
        print(f"No events at {path}: edgelet has not run with --run-dir {settings.run_dir} since boot", file=err)
        return EXIT_FAILURE
    events = snapshot.events
    if args.for_pod:
        from edgelet.cli.pods import agent_node_name

        # The agent's node name, not this command's: `--for web` finds web-<node> as describe does.
        events = events_for(events, args.for_pod, agent_node_name(settings))
    if not is_agent_alive(snapshot.agent_pid):
        print(
            f"edgelet is not running (pid {snapshot.agent_pid}); events as of {format_time(snapshot.written_at)}",
            file=err,
        )
    if args.output == "json":
        out.write(msgspec.json.format(msgspec.json.encode(events), indent=2).decode() + "\n")
    elif events:
        print(events_table(events, common.clock.now()), file=out)
    else:
        print("No events.", file=err)
    return EXIT_OK
