"""The command line: kubelet-named flags for the agent, the parser of every subcommand, and `main`.

Each command group has its own module (pods, events, node, top, images, logs,
exec, check, version); `common` holds what they share. This package is the only
place that turns errors into exit statuses: 2 for a usage
or configuration error, 1 for anything else that went wrong in an expected
way (a one-line message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from edgelet.util import openssl

# First, before anything imports asyncio: an agent that never speaks TLS never maps OpenSSL.
openssl.defer()

from edgelet.cli.common import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, PROG, is_expected_error  # noqa: E402
from edgelet.settings import KEYS, Settings, SettingsError, format_duration, load_settings  # noqa: E402

# Keys every subcommand accepts (with --config), so it works on a non-default installation: the directories
# and the node name, which a static pod's name ends with.
SUBCOMMAND_KEYS = ("root_dir", "run_dir", "log_dir", "hostname_override")


class Parser(argparse.ArgumentParser):
    """argparse as kubelet's flag parser behaves: no abbreviated flags, and an unknown flag named as such.

    Subparsers are of this class too (add_subparsers' default), so every subcommand refuses abbreviations.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--pod-manifes` is not `--pod-manifest-path`
        super().__init__(*args, **kwargs)
        self._argv: list[str] = []

    def parse_known_args(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        # `edgelet --bogus /x`: argparse sets the unknown flag aside and takes its value for the subcommand.
        unknown = self.unknown_flag(self._argv) if "invalid choice" in message else None
        super().error(f"unknown flag: {unknown}" if unknown is not None else message)

    def unknown_flag(self, argv: Sequence[str]) -> str | None:
        """The first flag of `argv` this parser does not know, looking no further than its subcommand."""
        commands = {c for a in self._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices}
        known = self._option_string_actions
        i = 0
        while i < len(argv):
            arg = argv[i]
            i += 1
            if arg == "--" or arg in commands:
                return None
            if not arg.startswith("-") or len(arg) < 2 or arg[1:].replace(".", "", 1).isdigit():
                continue  # a positional or a value (a negative number too)
            name = arg.split("=", 1)[0]
            action = known.get(name)
            if action is None and (arg.startswith("--") or arg[:2] not in known):  # -v2 is -v 2
                return name
            if action is not None and "=" not in arg and i < len(argv):
                # Step over the flag's value, which may be spelled as a subcommand (--hostname-override node).
                if action.nargs is None or (action.nargs == "?" and argv[i] in (action.choices or ())):
                    i += 1
        return None


def _escape(help_text: str) -> str:
    return help_text.replace("%", "%%")  # argparse formats help with %: thresholds say `10%`


def _add_setting(parser: argparse.ArgumentParser, key: str) -> None:
    spec = KEYS[key]
    if spec.is_bool:
        # `--flag` or `--flag=false`, as kubelet's boolean flags: a default of true can be turned off.
        shown = " (default: true)" if spec.default is True else ""
        parser.add_argument(
            *spec.flags,
            dest=key,
            nargs="?",
            const="true",
            choices=("true", "false"),
            default=argparse.SUPPRESS,
            metavar="true|false",
            help=_escape(spec.help + shown),
        )
    else:
        default = spec.default
        if spec.metavar == "DURATION":
            default = format_duration(default)
        shown = f" (default: {default})" if default not in (None, "", ()) else ""
        # A tuple-valued key (headers) may be given several times, as kubelet's flag may.
        action = "append" if isinstance(spec.default, tuple) else "store"
        parser.add_argument(
            *spec.flags,
            dest=key,
            action=action,
            default=argparse.SUPPRESS,
            metavar=spec.metavar or "VALUE",
            help=_escape(spec.help + shown),
        )


def _add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="TOML configuration file (default: /etc/edgelet/config.toml if present)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="A standalone kubelet for edge devices: runs static pods on runc and conmon.",
        epilog="Every flag can also be set in the config file (the key in snake_case, e.g. pod_manifest_path) "
        "or as EDGELET_<KEY> in the environment; flags win over the environment, which wins over the file.",
    )
    _add_config(parser)
    for key in KEYS:
        _add_setting(parser, key)
    common = Parser(add_help=False)
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
    events.add_argument(
        "--for",
        dest="for_pod",
        metavar="[NAMESPACE/]POD",
        help="only the events of this pod (with or without the -NODE suffix of static pods)",
    )
    events.add_argument("-o", "--output", choices=("table", "json"), default="table")
    logs = sub.add_parser("logs", parents=[common], help="print a container's log (kubectl logs)")
    logs.add_argument("pod", metavar="POD", help="pod name, with or without the -NODE suffix of static pods")
    logs.add_argument("container", metavar="CONTAINER", nargs="?", help="container name (optional with one container)")
    logs.add_argument("-n", "--namespace", default="default")
    logs.add_argument("-f", "--follow", action="store_true", help="stream the log as it grows")
    logs.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines")
    logs.add_argument("-p", "--previous", action="store_true", help="the previous (terminated) instance")
    logs.add_argument("--timestamps", action="store_true", help="prefix each line with its time")
    _add_node_commands(sub, common)
    _add_image_commands(sub, common)
    _add_rollout_commands(sub, common)
    _add_update_commands(sub, common)
    _add_get_command(sub, common)
    return parser


def _add_node_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """node, top, exec, check and tunnel: the machine, its usage, a container's shell and the WireGuard link."""
    node = sub.add_parser(
        "node",
        parents=[common],
        help="show the node's capacity, allocatable and usage, and the "
        "apiserver link: Node registration, lease, link state, queue",
    )
    node.add_argument("-o", "--output", choices=("text", "json"), default="text")
    _add_setting(node, "wireguard_config")
    top = sub.add_parser("top", parents=[common], help="CPU and memory of the running pods (kubectl top)")
    top.add_argument("what", nargs="?", choices=("pods", "pod", "po", "containers"), default="pods")
    top.add_argument("-n", "--namespace", default=None, help="only pods of this namespace")
    exe = sub.add_parser(
        "exec",
        parents=[common],
        help="run a command in a running container (kubectl exec)",
        usage=f"{PROG} exec [-i] [-t] POD [-c CONTAINER] [-n NAMESPACE] -- COMMAND [ARG...]",
    )
    exe.add_argument("pod", metavar="POD", help="pod name, with or without the -NODE suffix of static pods")
    exe.add_argument("command_argv", nargs="*", metavar="COMMAND", help="the command and its arguments, after --")
    exe.add_argument("-c", "--container", default=None, help="container name (default: the pod's first)")
    exe.add_argument("-n", "--namespace", default=None, help="the pod's namespace (needed when ambiguous)")
    exe.add_argument("-i", "--stdin", action="store_true", help="pass stdin to the command")
    exe.add_argument("-t", "--tty", action="store_true", help="run the command in a terminal (with -i)")
    check = sub.add_parser("check", parents=[common], help="check that this machine can run edgelet")
    for key in (
        "runtime",
        "conmon",
        "pod_infra_container_image",
        "cni_conf_dir",
        "cni_bin_dir",
        "trusted_keys",
        "signature_policy",
        "kubeconfig",
        "wireguard_config",
    ):
        _add_setting(check, key)
    tunnel = sub.add_parser("tunnel", parents=[common], help="the WireGuard tunnel the device dials out on")
    _add_setting(tunnel, "wireguard_config")
    tunnel_sub = tunnel.add_subparsers(dest="tunnel_command", metavar="SUBCOMMAND", required=True)
    tunnel_sub.add_parser(
        "peer-line",
        parents=[common],
        help="print the hub's [Peer] block for this device "
        "(generates the device's key when the file has none and none is kept yet)",
    )


def _add_image_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """images: list, import, pull, rm, prune."""
    images = sub.add_parser("images", parents=[common], help="list the images in the local store")
    images_sub = images.add_subparsers(dest="images_command", metavar="SUBCOMMAND")
    images_sub.add_parser("list", parents=[common], help="list the images (the default)")
    imp = images_sub.add_parser("import", parents=[common], help="import docker-archive or oci-archive files")
    imp.add_argument("files", nargs="+", metavar="FILE")
    pull = images_sub.add_parser("pull", parents=[common], help="pull an image from its registry")
    pull.add_argument("reference", metavar="REF")
    for key in ("image_credential_file", "registries", "signature_policy"):
        _add_setting(pull, key)
    rm = images_sub.add_parser("rm", parents=[common], help="remove images (or untag a name of several)")
    rm.add_argument("references", nargs="+", metavar="REF")
    prune = images_sub.add_parser("prune", parents=[common], help="remove every unused, unpinned image")
    for key in ("runtime", "conmon", "cgroup_root"):
        _add_setting(prune, key)


def _add_rollout_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """rollout: status, history, retry."""
    rollout = sub.add_parser(
        "rollout", parents=[common], help="health-gated rollout of changed static pods: status, history, retry"
    )
    rollout_sub = rollout.add_subparsers(dest="rollout_command", metavar="SUBCOMMAND")
    rollout_sub.add_parser(
        "status", parents=[common], help="each pod's rollout phase and running version (the default)"
    ).add_argument("pod", nargs="?", metavar="[NAMESPACE/]NAME")
    rollout_sub.add_parser("history", parents=[common], help="a pod's versions, their outcome and why").add_argument(
        "pod", metavar="[NAMESPACE/]NAME"
    )
    rollout_sub.add_parser("retry", parents=[common], help="try a rolled-back version again").add_argument(
        "pod", metavar="[NAMESPACE/]NAME"
    )


def _add_update_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """update: status, history, rollback of edgelet's own release."""
    update = sub.add_parser("update", parents=[common], help="edgelet's own release: status, history, rollback")
    for key in ("update_current", "trusted_keys"):
        _add_setting(update, key)
    update_sub = update.add_subparsers(dest="update_command", metavar="SUBCOMMAND")
    for name, text in (
        ("status", "the running release, a trial, the last outcome (the default)"),
        ("history", "every update: started, committed, rolled back, refused"),
        ("rollback", "point current at the previous release and restart edgelet into it (under systemd)"),
    ):
        subcommand = update_sub.add_parser(name, parents=[common], help=text)
        for key in ("update_current", "trusted_keys"):
            _add_setting(subcommand, key)
        if name == "rollback":
            subcommand.add_argument("--no-restart", action="store_true", help="only point current back")


def _add_get_command(sub: Any, common: argparse.ArgumentParser) -> None:
    """get configmaps|secrets."""
    get = sub.add_parser(
        "get", parents=[common], help="the ConfigMaps or Secrets of the sources: keys, sizes, source, users"
    )
    get.add_argument("resource", choices=("configmaps", "secrets", "cm"), metavar="configmaps|secrets")
    get.add_argument("-o", "--output", choices=("table", "json"), default="table")


# Each command's module, imported only when that command runs: the agent (no command) never loads them.
COMMANDS = {
    "version": "version",
    "node": "node",
    "pods": "pods",
    "describe": "pods",
    "events": "events",
    "images": "images",
    "logs": "logs",
    "exec": "exec",
    "check": "check",
    "top": "top",
    "rollout": "rollout",
    "tunnel": "tunnel",
    "update": "update",
    "get": "objects",
}


def command(name: str) -> Any:
    """The function that runs subcommand `name` (cmd_<name> in its module)."""
    import importlib

    return getattr(importlib.import_module(f"edgelet.cli.{COMMANDS[name]}"), f"cmd_{name}")


def settings_from_args(args: argparse.Namespace, env: Any = None) -> Settings:
    given = vars(args)
    flags = {key: given[key] for key in KEYS if key in given}
    return load_settings(flags, config=given.get("config"), env=env)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the edgelet command line; returns the exit status (the caller exits)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    tail = None
    if "--" in argv and "exec" in argv[: argv.index("--")]:
        # `exec POD -c C -- CMD -x`: options may follow POD, so argparse alone cannot tell where CMD begins.
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    try:
        args = parser.parse_args(argv)
        if tail is not None:
            args.command_argv = [*args.command_argv, *tail]
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
        return command(args.command)(settings, args, out, err)
    except SettingsError as exc:
        print(f"{PROG}: {exc}", file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `edgelet pods | head -2`: the reader is gone, which is no error. Point stdout at /dev/null so the
        # interpreter's final flush does not complain either.
        if out is sys.stdout:
            import os

            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if not is_expected_error(exc):
            raise
        print(f"{PROG}: {exc}", file=err)
        return EXIT_FAILURE
