"""The command line: kubelet-named flags for the agent, and the version, pods and images subcommands.

This is the only module that turns errors into exit statuses: 2 for a usage
or configuration error, 1 for anything else that went wrong in an expected
way (a one-line message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TextIO

from edgelet import BUILD_COMMIT, __version__
from edgelet.settings import KEYS, Settings, SettingsError, format_duration, load_settings

if TYPE_CHECKING:
    from edgelet.events import Event
    from edgelet.images.types import ImageRecord
    from edgelet.status.snapshot import PodsSnapshot

PROG = "edgelet"
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

# Keys every subcommand accepts, so it works on a non-default installation.
SUBCOMMAND_KEYS = ("root_dir", "run_dir", "log_dir")


class CommandError(Exception):
    """An expected failure of a subcommand; its message is shown as is."""


# --- pure formatting helpers -------------------------------------------------


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


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns three spaces apart, as kubectl prints them."""
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def pods_table(snapshot: "PodsSnapshot", now: float, *, wide: bool = False) -> str:
    from edgelet.cli.describe import wide_columns

    header = ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    if wide:
        header += ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
    header.append("SOURCE")
    if wide:
        header += ["UID", "ORIGIN", "MESSAGE"]
    rows = [header]
    for p in sorted(snapshot.pods, key=lambda p: (p.namespace, p.name)):
        row = [p.namespace, p.name, p.ready, p.status, str(p.restarts), format_age(now - p.created)]
        if wide:
            row += wide_columns(p)
        row.append(p.source)
        if wide:
            row += [p.uid, p.origin, p.message]
        rows.append(row)
    return format_table(rows)


def rejected_table(snapshot: "PodsSnapshot") -> str:
    rows = [["SOURCE", "ORIGIN", "POD", "REASON", "MESSAGE"]]
    rows += [[r.source, r.origin, r.pod or "-", r.reason, r.message] for r in snapshot.rejected]
    return format_table(rows)


def events_table(events: Sequence["Event"], now: float) -> str:
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


def images_table(records: Sequence["ImageRecord"], now: float) -> str:
    """REFERENCE, DIGEST (the manifest's: `name@digest` pins it), SIZE, PINNED, LAST USED (a container
    created from it; "never" when none was). An image without a name shows `<none>`: `images rm DIGEST`."""
    rows = [["REFERENCE", "DIGEST", "SIZE", "PINNED", "LAST USED"]]
    for r in sorted(records, key=lambda r: (r.references or ("~",), r.id)):
        last = float(r.extra.get("last_used", 0) or 0)
        used = f"{format_age(now - last)} ago" if last > 0 else "never"
        for ref in r.references or ("<none>",):
            rows.append([ref, r.digest, format_size(r.size), "true" if r.pinned else "false", used])
    return format_table(rows)


def format_time(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ts))


# --- side effects -------------------------------------------------------------


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
    path = shutil.which(binary)
    if path is None:
        return "not found"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else f"no output (exit {out.returncode})"


# --- commands -----------------------------------------------------------------


def cmd_version(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    print(f"edgelet {__version__} (commit {BUILD_COMMIT})", file=out)
    print(f"{Path(settings.runtime).name}: {tool_version(settings.runtime)}", file=out)
    print(f"{Path(settings.conmon).name}: {tool_version(settings.conmon)}", file=out)
    return EXIT_OK


def _read_pods_snapshot(settings: Settings, err: TextIO) -> "PodsSnapshot | None":
    """The pods snapshot (live from the agent, else its checkpoint); None, said on `err`, when there is none."""
    import msgspec

    from edgelet.status.snapshot import PodsSnapshot, snapshot_path

    path = Path(snapshot_path(settings.root_dir))
    try:
        # The running agent's live table first; its checkpoint file when it is not running.
        data = _from_agent(settings, "/pods/table") or path.read_bytes()
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
        print(f"edgelet is not running (pid {snapshot.agent_pid}); pods as of {format_time(snapshot.written_at)} "
              f"({format_age(time.time() - snapshot.written_at)} ago)", file=err)
    return snapshot


def cmd_pods(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from edgelet.cli import describe

    snapshot = _read_pods_snapshot(settings, err)
    if snapshot is None:
        return EXIT_FAILURE
    now = time.time()
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

    from edgelet.events import events_path, read_events
    from edgelet.cli import describe

    snapshot = _read_pods_snapshot(settings, err)
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
    events = [e for e in (recorded.events if recorded is not None else [])
              if e.object.name == row.name and e.object.namespace == row.namespace
              and (not e.object.uid or e.object.uid == row.uid)]
    (obj,) = describe.pod_objects([row])
    out.write(describe.describe_pod(obj, events, time.time()))
    return EXIT_OK


def cmd_events(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import msgspec

    from edgelet.events import EventsSnapshot, events_path, read_events

    path = events_path(settings.run_dir)
    try:
        live = _from_agent(settings, "/events")
        snapshot = msgspec.json.decode(live, type=EventsSnapshot) if live is not None else read_events(path)
    except (OSError, msgspec.DecodeError) as exc:
        raise CommandError(f"cannot read events from {path}: {exc}") from exc
    if snapshot is None:
        print(f"No events at {path}: edgelet has not run with --run-dir {settings.run_dir} since boot", file=err)
        return EXIT_FAILURE
    events = snapshot.events
    if args.for_pod:
        ns, _, name = args.for_pod.rpartition("/")
        events = [e for e in events if e.object.name == name and (not ns or e.object.namespace == ns)]
    if not is_agent_alive(snapshot.agent_pid):
        print(f"edgelet is not running (pid {snapshot.agent_pid}); events as of {format_time(snapshot.written_at)}",
              file=err)
    if args.output == "json":
        out.write(msgspec.json.format(msgspec.json.encode(events), indent=2).decode() + "\n")
    elif events:
        print(events_table(events, time.time()), file=out)
    else:
        print("No events.", file=err)
    return EXIT_OK


def _from_agent(settings: Settings, path: str) -> bytes | None:
    """GET `path` from the agent's socket; None when no agent runs there."""
    from edgelet.cli.client import ApiError, get

    try:
        return get(settings.run_dir, path)
    except ApiError as exc:
        raise CommandError(f"edgelet API {path}: {exc}") from exc


def cmd_node(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The apiserver link of the running agent: registration, last lease renewal, link state, queue depth."""
    import json

    try:
        body = _from_agent(settings, "/node")
    except CommandError as exc:
        if "404" in str(exc) or "no apiserver" in str(exc):
            print("This agent reports to no apiserver (start it with --kubeconfig).", file=out)
            return EXIT_OK
        raise
    if body is None:
        print("edgelet is not running (the apiserver link exists only while it runs).", file=err)
        return EXIT_FAILURE
    state = json.loads(body)
    if args.output == "json":
        print(json.dumps(state, indent=2), file=out)
        return EXIT_OK
    now = time.time()

    def ago(ts: float | None) -> str:
        return "never" if ts is None else f"{format_age(now - ts)} ago ({format_time(ts)})"

    link = state["link"] + (f" ({state['last_error']})" if state.get("last_error") else "")
    rows = [("Node:", state["node"]), ("Server:", state["server"]),
            ("Registered:", f"yes (uid {state['node_uid']})" if state["registered"] else "no"),
            ("Link:", link), ("Last lease renewal:", ago(state.get("last_lease_renewal"))),
            ("Last node status:", ago(state.get("last_status_update"))),
            ("Last full resync:", ago(state.get("last_resync")) + f", {state['resyncs']} in all"),
            ("Mirror pods:", str(state["mirror_pods"])), ("Queue depth:", str(state["queue_depth"])),
            ("Requests sent:", str(state["requests"]))]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)} {v}", file=out)
    return EXIT_OK


def cmd_logs(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from edgelet.cli.logs import LogRequest, print_logs

    request = LogRequest(namespace=args.namespace, pod=args.pod, container=args.container, follow=args.follow,
                         tail=args.tail, previous=args.previous, timestamps=args.timestamps)
    return print_logs(settings, request, out, err)


def cmd_check(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from edgelet.cli.check import failed, format_results, gather_facts, run_checks

    facts = gather_facts(runtime=settings.runtime, conmon=settings.conmon,
                         pause_image=settings.pod_infra_container_image, root_dir=settings.root_dir)
    results = run_checks(facts)
    print(format_results(results), file=out)
    return EXIT_FAILURE if failed(results) else EXIT_OK


def _image_store(settings: Settings) -> Any:
    from edgelet.images.store import ImageStore

    return ImageStore(settings.root_dir / "images")


def cmd_images(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if getattr(args, "images_command", None) == "import":
        return cmd_images_import(settings, args, out, err)
    if getattr(args, "images_command", None) in ("pull", "rm", "prune"):
        return cmd_images_change(settings, args, out, err)
    if not (settings.root_dir / "images").is_dir():
        records: list[ImageRecord] = []  # a read-only command creates no store
    else:
        records = _image_store(settings).list()
    print(images_table(records, time.time()), file=out)
    return EXIT_OK


def cmd_images_change(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`images pull REF`, `images rm REF...`, `images prune` (unused, unpinned images, whatever the disk usage)."""
    import asyncio

    store = _image_store(settings)
    if args.images_command == "pull":
        from edgelet.images.auth import credential_paths, load_credentials
        from edgelet.images.puller import Puller

        puller = Puller(store, registries=dict(settings.registries),
                        credentials=load_credentials(credential_paths(settings.image_credential_file)))
        started = time.monotonic()
        r = puller.pull_sync(args.reference)
        print(f"Pulled {', '.join(r.references)} ({r.digest}, {format_size(r.size)}) in "
              f"{time.monotonic() - started:.1f}s", file=out)
        return EXIT_OK
    if args.images_command == "rm":
        for ref in args.references:
            store.remove(ref)
            print(f"Removed {ref}", file=out)
        return EXIT_OK
    from edgelet.images.gc import ImageGC
    from edgelet.util.clock import RealClock

    async def in_use() -> set[str]:
        from edgelet.runtime.runc_runtime import RuncRuntime

        rt = RuncRuntime(settings.runtime_paths(), runtime_bin=settings.runtime, conmon_bin=settings.conmon)
        return {c.image for p in (await rt.list_pods()).values() for c in p.containers if c.image}

    gc = ImageGC(store, in_use, RealClock(), min_age=0.0)
    plan = asyncio.run(gc.collect(force=True))
    print(f"Removed {len(plan.remove)} image(s), {format_size(plan.freed)}", file=out)
    return EXIT_OK


def cmd_images_import(settings: Settings, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    store = _image_store(settings)
    status = EXIT_OK
    for name in args.files:
        path = Path(name)
        try:
            records = store.import_archive(path)
        except Exception as exc:  # noqa: BLE001 - reported per file, then the others are still imported
            if not is_expected_error(exc):
                raise
            text = str(exc)
            print(f"{PROG}: {text}" if str(path) in text else f"{PROG}: {path}: {text}", file=err)
            status = EXIT_FAILURE
            continue
        for r in records:
            refs = ", ".join(r.references) or "<none>"
            print(f"Imported {refs} ({r.id.split(':', 1)[-1][:12]}, {format_size(r.size)}) from {path}", file=out)
        if not records:
            print(f"No image found in {path}", file=out)
    return status


# --- parsing ------------------------------------------------------------------


def _add_setting(parser: argparse.ArgumentParser, key: str) -> None:
    spec = KEYS[key]
    if spec.is_bool:
        parser.add_argument(*spec.flags, dest=key, action="store_const", const="true", default=argparse.SUPPRESS,
                            help=spec.help)
    else:
        default = spec.default
        if spec.metavar == "DURATION":
            default = format_duration(default)
        shown = f" (default: {default})" if default not in (None, "", ()) else ""
        # A tuple-valued key (headers) may be given several times, as kubelet's flag may.
        action = "append" if isinstance(spec.default, tuple) else "store"
        parser.add_argument(*spec.flags, dest=key, action=action, default=argparse.SUPPRESS,
                            metavar=spec.metavar or "VALUE", help=spec.help + shown)


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE",
                        help="TOML configuration file (default: /etc/edgelet/config.toml if present)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A standalone kubelet for edge devices: runs static pods on runc and conmon.",
        epilog="Every flag can also be set in the config file (the key in snake_case, e.g. pod_manifest_path) "
               "or as EDGELET_<KEY> in the environment; flags win over the environment, which wins over the file.",
    )
    _add_config(parser)
    for key in KEYS:
        _add_setting(parser, key)
    common = argparse.ArgumentParser(add_help=False)
    _add_config(common)
    for key in SUBCOMMAND_KEYS:
        _add_setting(common, key)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("version", parents=[common], help="print the versions of edgelet, the runtime and conmon")
    pods = sub.add_parser("pods", parents=[common], help="list the pods (works while the agent is stopped)")
    pods.add_argument("names", nargs="*", metavar="NAME", help="only these pods (with or without the -NODE suffix)")
    pods.add_argument("-n", "--namespace", default=None, help="only pods of this namespace")
    pods.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    describe = sub.add_parser("describe", parents=[common], help="show a pod in detail, with its events")
    describe.add_argument("kind", choices=("pod", "pods", "po"), metavar="pod")
    describe.add_argument("name", metavar="NAME", help="pod name, with or without the -NODE suffix of static pods")
    describe.add_argument("-n", "--namespace", default=None, help="the pod's namespace (needed when ambiguous)")
    events = sub.add_parser("events", parents=[common], help="list recent events (kubelet-style, since boot)")
    events.add_argument("--for", dest="for_pod", metavar="[NAMESPACE/]POD", help="only the events of this pod")
    events.add_argument("-o", "--output", choices=("table", "json"), default="table")
    logs = sub.add_parser("logs", parents=[common], help="print a container's log (kubectl logs)")
    logs.add_argument("pod", metavar="POD", help="pod name, with or without the -NODE suffix of static pods")
    logs.add_argument("container", metavar="CONTAINER", nargs="?", help="container name (optional with one container)")
    logs.add_argument("-n", "--namespace", default="default")
    logs.add_argument("-f", "--follow", action="store_true", help="stream the log as it grows")
    logs.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines")
    logs.add_argument("-p", "--previous", action="store_true", help="the previous (terminated) instance")
    logs.add_argument("--timestamps", action="store_true", help="prefix each line with its time")
    node = sub.add_parser("node", parents=[common], help="show the apiserver link: Node registration, lease, "
                                                       "link state, queue")
    node.add_argument("-o", "--output", choices=("text", "json"), default="text")
    check = sub.add_parser("check", parents=[common], help="check that this machine can run edgelet")
    for key in ("runtime", "conmon", "pod_infra_container_image"):
        _add_setting(check, key)
    images = sub.add_parser("images", parents=[common], help="list the images in the local store")
    images_sub = images.add_subparsers(dest="images_command", metavar="SUBCOMMAND")
    images_sub.add_parser("list", parents=[common], help="list the images (the default)")
    imp = images_sub.add_parser("import", parents=[common], help="import docker-archive or oci-archive files")
    imp.add_argument("files", nargs="+", metavar="FILE")
    pull = images_sub.add_parser("pull", parents=[common], help="pull an image from its registry")
    pull.add_argument("reference", metavar="REF")
    for key in ("image_credential_file", "registries"):
        _add_setting(pull, key)
    rm = images_sub.add_parser("rm", parents=[common], help="remove images (or untag a name of several)")
    rm.add_argument("references", nargs="+", metavar="REF")
    prune = images_sub.add_parser("prune", parents=[common], help="remove every unused, unpinned image")
    for key in ("runtime", "conmon", "cgroup_root"):
        _add_setting(prune, key)
    return parser


COMMANDS = {"version": cmd_version, "node": cmd_node, "pods": cmd_pods, "describe": cmd_describe, "events": cmd_events, "images": cmd_images, "logs": cmd_logs,
            "check": cmd_check}


def is_expected_error(exc: BaseException) -> bool:
    """Errors edgelet raises on purpose (and OS errors): a message suffices, a traceback would be noise."""
    return isinstance(exc, (OSError, CommandError)) or type(exc).__module__.split(".")[0] == "edgelet"


def settings_from_args(args: argparse.Namespace, env: Any = None) -> Settings:
    given = vars(args)
    flags = {key: given[key] for key in KEYS if key in given}
    return load_settings(flags, config=given.get("config"), env=env)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the edgelet command line; returns the exit status (the caller exits)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage error (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"{PROG}: {exc}", file=err)
        return EXIT_USAGE
    try:
        if args.command is None:
            from edgelet.app import run_agent  # imported here so the subcommands stay cheap

            return run_agent(settings)
        return COMMANDS[args.command](settings, args, out, err)
    except SettingsError as exc:
        print(f"{PROG}: {exc}", file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not is_expected_error(exc):
            raise
        print(f"{PROG}: {exc}", file=err)
        return EXIT_FAILURE
