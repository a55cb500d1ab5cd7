"""`edgelet pods` and `edgelet describe pod`: the pods table, live from the agent or from its checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from edgelet.cli import common
from edgelet.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    PROG,
    CommandError,
    format_age,
    format_table,
    format_time,
    is_agent_alive,
)
from edgelet.settings import Settings

if TYPE_CHECKING:
    from edgelet.status.snapshot import PodRow, PodsSnapshot


def pod_images(row: PodRow) -> list[str]:
    spec = (row.pod or {}).get("spec") or {}
    return [c.get("image") or "" for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]


def pulls_message(row: PodRow, pulls: dict[str, list[int]]) -> str:
    """The pulls under way for `row`'s images: `pulling IMAGE: 12.3MB of 53.5MB (23%)`."""
    from edgelet.cli.progress import pull_text

    shown = dict.fromkeys(i for i in pod_images(row) if i in pulls)
    return "; ".join(f"pulling {i}: {pull_text(*pulls[i])}" for i in shown)


def pods_table(snapshot: PodsSnapshot, now: float, *, wide: bool = False) -> str:
    from edgelet.cli.describe import wide_columns

    header = ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    if wide:
        header += ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
    header.append("SOURCE")
    if wide:
        header += ["UID", "ORIGIN", "RUNTIME", "MESSAGE"]
    rows = [header]
    for p in sorted(snapshot.pods, key=lambda p: (p.namespace, p.name)):
        row = [p.namespace, p.name, p.ready, p.status, str(p.restarts), format_age(now - p.created)]
        if wide:
            row += wide_columns(p)
        row.append(p.source)
        if wide:
            row += [
                p.uid,
                p.origin,
                p.runtime_handler or "<none>",
                "; ".join(m for m in (pulls_message(p, snapshot.pulls), p.message) if m),
            ]
        rows.append(row)
    return format_table(rows)


def rejected_table(snapshot: PodsSnapshot) -> str:
    rows = [["SOURCE", "ORIGIN", "POD", "REASON", "MESSAGE"]]
    rows += [[r.source, r.origin, r.pod or "-", r.reason, r.message] for r in snapshot.rejected]
    return format_table(rows)


def read_pods_snapshot(settings: Settings, err: TextIO) -> PodsSnapshot | None:
    """The pods snapshot (live from the agent, else its checkpoint); None, said on `err`, when there is none."""
    import msgspec

    from edgelet.status.snapshot import PodsSnapshot, snapshot_path

    path = Path(snapshot_path(settings.root_dir))
    try:
        # The running agent's live table first; its checkpoint file when it is not running.
        data = common.from_agent(settings, "/pods/table") or path.read_bytes()
    except FileNotFoundError:
        print(f"No pods snapshot at {path}: edgelet has not run with --root-dir {settings.root_dir}", file=err)
        return None
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        snapshot = msgspec.json.decode(data, type=PodsSnapshot)
    except msgspec.DecodeError as exc:
        raise CommandError(f"{path}: unreadable pods snapshot: {exc}") from exc
    if not is_agent_alive(snapshot.agent_pid):
        print(
            f"edgelet is not running (pid {snapshot.agent_pid}); pods as of {format_time(snapshot.written_at)} "
            f"({format_age(common.clock.now() - snapshot.written_at)} ago)",
            file=err,
        )
    return snapshot


def agent_node_name(settings: Settings) -> str:
    """The node name the agent runs as, which static pods' names end with: from the running agent, else from its
    checkpoint, else this command's own (--hostname-override or the hostname). A CLI run without the agent's
    --hostname-override thereby still finds a static pod by its short name, as `describe` does."""
    import msgspec

    from edgelet.status.snapshot import snapshot_path

    class NodeOnly(msgspec.Struct):
        node_name: str

    try:
        data = common.from_agent(settings, "/pods/table") or Path(snapshot_path(settings.root_dir)).read_bytes()
        return msgspec.json.decode(data, type=NodeOnly).node_name or settings.node_name
    except (OSError, CommandError, msgspec.DecodeError):
        return settings.node_name


def cmd_pods(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from edgelet.cli import describe

    snapshot = read_pods_snapshot(settings, err)
    if snapshot is None:
        return EXIT_FAILURE
    now = common.clock.now()
    if args.names:
        rows = []
        for name in args.names:
            found = describe.find_pods(snapshot, name, args.namespace)
            if not found:
                raise CommandError(f'pods "{name}" not found')
            rows.extend(found)
        snapshot.pods = rows
    if args.output in ("json", "yaml"):
        # Full Pod objects as kubectl prints them: one Pod by name, else a v1 List.
        objects = describe.pod_objects(snapshot.pods)
        obj = objects[0] if len(args.names) == 1 and len(objects) == 1 else describe.as_list(objects)
        out.write(describe.to_json(obj) if args.output == "json" else describe.to_yaml(obj))
        return EXIT_OK
    if snapshot.pods:
        print(pods_table(snapshot, now, wide=args.output == "wide"), file=out)
    else:
        print("No pods.", file=err)
    if snapshot.rejected:
        print("", file=out)
        print("Rejected manifests:", file=out)
        print(rejected_table(snapshot), file=out)
    return EXIT_OK


def cmd_describe(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import msgspec

    from edgelet.cli import describe
    from edgelet.events import events_path, read_events

    snapshot = read_pods_snapshot(settings, err)
    if snapshot is None:
        return EXIT_FAILURE
    found = describe.find_pods(snapshot, args.name, args.namespace)
    if not found:
        raise CommandError(f'pods "{args.name}" not found')
    if len(found) > 1:
        spaces = ", ".join(sorted(r.namespace for r in found))
        raise CommandError(f'pods "{args.name}" exist in several namespaces ({spaces}): name one with -n')
    row = found[0]
    try:
        recorded = read_events(events_path(settings.run_dir))
    except (OSError, msgspec.DecodeError) as exc:
        print(f"{PROG}: cannot read events: {exc}", file=err)
        recorded = None
    events = [
        e
        for e in (recorded.events if recorded is not None else [])
        if e.object.name == row.name
        and e.object.namespace == row.namespace
        and (not e.object.uid or e.object.uid == row.uid)
    ]
    (obj,) = describe.pod_objects([row])
    out.write(
        describe.describe_pod(
            obj, events, common.clock.now(), snapshot.pulls, row.runtime_handler, _object_reports(settings)
        )
    )
    return EXIT_OK


def _object_reports(settings: Settings) -> list:
    """The agent's ConfigMaps and Secrets (keys and sizes); none while it is stopped (they live in its memory)."""
    import msgspec

    from edgelet.api.configobjects import ObjectReport

    reports: list[ObjectReport] = []
    for path in ("/configmaps", "/secrets"):
        try:
            live = common.from_agent(settings, path)
        except CommandError:
            return []
        if live is not None:
            reports += msgspec.json.decode(live, type=list[ObjectReport])
    return reports
