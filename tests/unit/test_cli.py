"""The command line: flags to Settings, subcommands' output, and errors turned into exit statuses."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import msgspec
import pytest

from edgelet import cli
from edgelet.cli import common
from edgelet.cli import images as cli_images
from edgelet.cli.images import images_table
from edgelet.images.errors import ArchiveError
from edgelet.images.types import ImageConfig, ImageRecord
from edgelet.settings import Settings
from edgelet.status.snapshot import PodRow, PodsSnapshot, RejectedRow, snapshot_path
from edgelet.util.clock import FakeClock


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("EDGELET_"):
            monkeypatch.delenv(name)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = cli.main(list(argv), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def agent_calls(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """Replaces edgelet.app (imported lazily by the CLI) with a recorder."""
    calls: list[Settings] = []
    fake = types.ModuleType("edgelet.app")

    def run_agent(settings: Settings) -> int:
        calls.append(settings)
        return 7

    fake.run_agent = run_agent  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "edgelet.app", fake)
    return calls


@pytest.mark.parametrize(
    "seconds, text",
    [
        (-5, "<invalid>"),
        (-0.5, "0s"),
        (0, "0s"),
        (45, "45s"),
        (59.9, "59s"),
        (60, "1m"),
        (3599, "59m"),
        (3600, "1h"),
        (7300, "2h"),
        (86399, "23h"),
        (86400, "1d"),
        (5 * 86400 + 5, "5d"),
        (400 * 86400, "1y"),
    ],
)
def test_format_age(seconds: float, text: str) -> None:
    assert common.format_age(seconds) == text


@pytest.mark.parametrize(
    "size, text", [(0, "0B"), (999, "999B"), (4_260_000, "4.26MB"), (1_500, "1.5kB"), (2_000_000_000, "2GB")]
)
def test_format_size(size: int, text: str) -> None:
    assert common.format_size(size) == text


# --- the agent command --------------------------------------------------------


def test_agent_gets_settings_from_flags(agent_calls: list[Settings], tmp_path: Path) -> None:
    rc, _, _ = run(
        "--config",
        "/dev/null",
        "--pod-manifest-path",
        str(tmp_path / "m"),
        "--file-check-frequency",
        "1m30s",
        "--runonce",
        "--runonce-timeout",
        "2m",
        "--root-dir",
        "/r",
        "--run-dir",
        "/run/e",
        "--log-dir",
        "/l",
        "--hostname-override",
        "Node1",
        "--pod-infra-container-image",
        "local/pause:1",
        "--cgroup-root",
        "/edge",
        "--runtime",
        "crun",
        "--conmon",
        "/bin/conmon",
        "--image-import-dir",
        "/imp",
        "-v",
        "3",
    )
    assert rc == 7
    (s,) = agent_calls
    assert s == Settings(
        pod_manifest_path=tmp_path / "m",
        file_check_frequency=90.0,
        runonce=True,
        runonce_timeout=120.0,
        root_dir=Path("/r"),
        run_dir=Path("/run/e"),
        log_dir=Path("/l"),
        hostname_override="Node1",
        pod_infra_container_image="local/pause:1",
        cgroup_root="/edge",
        runtime="crun",
        conmon="/bin/conmon",
        image_import_dir=Path("/imp"),
        verbosity=3,
    )
    assert s.node_name == "node1"


@pytest.mark.parametrize("argv, level", [(["--v=4"], 4), (["--v", "2"], 2), (["-v=1"], 1), (["-v5"], 5), ([], 0)])
def test_kubelet_verbosity_spellings(agent_calls: list[Settings], argv: list[str], level: int) -> None:
    assert run("--config", "/dev/null", *argv)[0] == 7
    assert agent_calls[-1].verbosity == level


def test_flags_beat_environment_beat_file(
    agent_calls: list[Settings], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('root_dir = "/file"\nrun_dir = "/file-run"\nlog_dir = "/file-log"\n')
    monkeypatch.setenv("EDGELET_RUN_DIR", "/env-run")
    monkeypatch.setenv("EDGELET_LOG_DIR", "/env-log")
    run("--config", str(cfg), "--log-dir", "/flag-log")
    s = agent_calls[-1]
    assert (s.root_dir, s.run_dir, s.log_dir) == (Path("/file"), Path("/env-run"), Path("/flag-log"))


def test_bad_setting_is_one_line_and_exit_2(agent_calls: list[Settings]) -> None:
    rc, out, err = run("--config", "/dev/null", "--file-check-frequency", "soon")
    assert rc == 2
    assert err.startswith("edgelet: --file-check-frequency:") and err.count("\n") == 1
    assert "Traceback" not in err and not agent_calls


def test_missing_explicit_config_exit_2(tmp_path: Path, agent_calls: list[Settings]) -> None:
    rc, _, err = run("--config", str(tmp_path / "none.toml"))
    assert rc == 2 and "does not exist" in err


def test_unknown_flag_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--no-such-flag"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--no-such-flag", "/x"], "--no-such-flag"),  # its value once taken for a subcommand: invalid choice '/x'
        (["--no-such=1", "/x"], "--no-such"),
        (["-v2", "--bogus", "/x"], "--bogus"),
        (["--hostname-override", "node", "--bogus", "/x"], "--bogus"),  # a flag's value spelled as a subcommand
        (["--register-node", "false", "--bogus", "/x"], "--bogus"),
        (["--pod-manifes", "/tmp"], "--pod-manifes"),  # a prefix of --pod-manifest-path: no abbreviations
        (["images", "--bogus", "x"], "--bogus"),  # the same in a subcommand with subcommands of its own
    ],
)
def test_an_unknown_flag_before_a_value_is_named(
    agent_calls: list[Settings], argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2 and agent_calls == []
    err = capsys.readouterr().err
    assert f"error: unknown flag: {flag}" in err and "invalid choice" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--pod-manifes=/tmp"],
        ["--root-di", "/x", "pods"],
        ["pods", "--namesp", "x"],
        ["logs", "--follo", "p"],
        ["images", "pull", "--registrie", "r", "ref"],
        ["events", "--hostname-overr", "n"],
    ],
)
def test_abbreviated_flags_are_refused_everywhere(
    agent_calls: list[Settings], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2 and agent_calls == []
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err or "unknown flag" in err


def test_every_parser_refuses_abbreviations() -> None:
    def walk(parser):  # type: ignore[no-untyped-def]
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from walk(sub)

    parsers = list(walk(cli.build_parser()))
    assert len(parsers) > 10 and all(p.allow_abbrev is False for p in parsers)


def test_short_flag_clusters_and_negative_values_still_parse() -> None:
    args = cli.build_parser().parse_args(["exec", "-it", "pod", "sh"])
    assert args.stdin and args.tty
    assert cli.build_parser().parse_args(["logs", "--tail", "-1", "pod"]).tail == -1


# Every subcommand that reads the agent's state: the same --config, directory and node-name flags (issue 23).
STATE_COMMANDS = [
    ["version"],
    ["pods"],
    ["describe", "pod", "x"],
    ["events"],
    ["logs", "p"],
    ["node"],
    ["top"],
    ["exec", "p", "sh"],
    ["check"],
    ["images"],
    ["images", "list"],
    ["images", "import", "f"],
    ["images", "pull", "r"],
    ["images", "rm", "r"],
    ["images", "prune"],
    ["rollout"],
    ["rollout", "status"],
    ["rollout", "history", "p"],
    ["rollout", "retry", "p"],
    ["tunnel", "peer-line"],
    ["update"],
    ["update", "status"],
    ["update", "history"],
    ["update", "rollback"],
    ["get", "configmaps"],
]


@pytest.mark.parametrize("argv", STATE_COMMANDS, ids=lambda a: " ".join(a))
def test_state_commands_share_the_common_flags(argv: list[str]) -> None:
    common_flags = [
        "--config",
        "/c.toml",
        "--root-dir",
        "/r",
        "--run-dir",
        "/u",
        "--log-dir",
        "/l",
        "--hostname-override",
        "edge7",
    ]
    args = cli.build_parser().parse_args([*argv, *common_flags])
    assert (args.config, args.root_dir, args.run_dir, args.log_dir, args.hostname_override) == (
        "/c.toml",
        "/r",
        "/u",
        "/l",
        "edge7",
    )


def test_state_commands_cover_every_subcommand() -> None:
    assert {a[0] for a in STATE_COMMANDS} == set(cli.COMMANDS)


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--pod-manifest-path" in text and "--file-check-frequency" in text and "(default: 20s)" in text


def test_unexpected_errors_keep_their_traceback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def boom(*_a: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "command", lambda _name: boom)
    with pytest.raises(RuntimeError):
        run("version", "--config", "/dev/null")


def test_expected_errors_become_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(*_a: object) -> int:
        raise ArchiveError("/x.tar", "not a tar file")

    monkeypatch.setattr(cli, "command", lambda _name: fails)
    rc, _, err = run("version", "--config", "/dev/null")
    assert rc == 1 and err == "edgelet: image archive /x.tar: not a tar file\n"


# --- version --------------------------------------------------------------------


def test_version_reports_tools(tmp_path: Path) -> None:
    fake = tmp_path / "fakerunc"
    fake.write_text("#!/bin/sh\necho 'fakerunc version 9.9'\necho 'commit: x'\n")
    fake.chmod(0o755)
    cfg = tmp_path / "c.toml"
    other = tmp_path / "fakecrun"
    other.write_text("#!/bin/sh\necho 'fakecrun version 1.8'\n")
    other.chmod(0o755)
    cfg.write_text(
        f'runtime = "{fake}"\nconmon = "{tmp_path / "absent-conmon"}"\n[runtime_handlers]\nfast = "{other}"\n'
    )
    rc, out, _ = run("version", "--config", str(cfg))
    assert rc == 0
    from edgelet.cli.version import source_commit

    lines = out.splitlines()
    assert lines[:2] == [f"edgelet 0.1.0 (commit {source_commit()})", "fakerunc: fakerunc version 9.9"]
    assert lines[-1] == "absent-conmon: not found"
    # Every other runtime handler by name (crun too where it is installed).
    assert "fast: fakecrun version 1.8" in lines


# --- pods -----------------------------------------------------------------------


NOW = 1_700_000_000.0


def write_snapshot(root: Path, *, pid: int, written_at: float = NOW, rejected: bool = True) -> Path:
    snap = PodsSnapshot(
        written_at=written_at,
        agent_pid=pid,
        node_name="node1",
        pods=[
            PodRow(
                namespace="kube-system",
                name="b-node1",
                uid="u2",
                ready="0/1",
                status="CrashLoopBackOff",
                restarts=4,
                created=written_at - 3 * 3600,
                source="file",
                origin="/m/b.yaml",
                message="back-off 40s",
                runtime_handler="crun",
            ),
            PodRow(
                namespace="default",
                name="a-node1",
                uid="u1",
                ready="1/1",
                status="Running",
                restarts=0,
                created=written_at - 45,
                source="file",
                origin="/m/a.yaml",
            ),
        ],
        rejected=[
            RejectedRow(
                source="file", origin="/m/c.yaml", pod="default/a", reason="FailedValidation", message="duplicate name"
            )
        ]
        if rejected
        else [],
    )
    path = Path(snapshot_path(root))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.encode(snap))
    return path


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def live_agent_pid():
    # "edgelet" on the command line: that is how a reused pid is told apart from the agent.
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "edgelet"], stdin=subprocess.PIPE)
    # Until the child has exec'd, its cmdline is still the parent's.
    for _ in range(500):
        if b"edgelet" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            break
        time.sleep(0.01)
    yield proc.pid
    proc.stdin.close()
    proc.wait()


def test_pods_without_snapshot(tmp_path: Path) -> None:
    rc, out, err = run("pods", "--config", "/dev/null", "--root-dir", str(tmp_path))
    assert rc == 1 and out == ""
    assert "No pods snapshot" in err and str(tmp_path) in err


def test_pods_table_when_agent_runs(tmp_path: Path, live_agent_pid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    write_snapshot(tmp_path, pid=live_agent_pid)
    monkeypatch.setattr(common, "clock", FakeClock(NOW + 15))
    rc, out, err = run("pods", "--config", "/dev/null", "--root-dir", str(tmp_path))
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "SOURCE"]
    assert lines[1].split() == ["default", "a-node1", "1/1", "Running", "0", "1m", "file"]
    assert lines[2].split() == ["kube-system", "b-node1", "0/1", "CrashLoopBackOff", "4", "3h", "file"]
    assert lines[3] == ""
    assert "Rejected manifests" in lines[4]
    assert lines[5].split() == ["SOURCE", "ORIGIN", "POD", "REASON", "MESSAGE"]
    assert lines[6].split() == ["file", "/m/c.yaml", "default/a", "FailedValidation", "duplicate", "name"]
    # Columns line up: each header starts where its values start.
    assert lines[0].index("STATUS") == lines[1].index("Running") == lines[2].index("CrashLoopBackOff")


def test_pods_says_when_agent_is_not_running(tmp_path: Path, dead_pid: int) -> None:
    write_snapshot(tmp_path, pid=dead_pid, rejected=False)
    rc, out, err = run("--root-dir", str(tmp_path), "pods", "--config", "/dev/null")
    assert rc == 0
    assert "edgelet is not running" in err and f"pid {dead_pid}" in err and common.format_time(NOW) in err
    assert "a-node1" in out and "Rejected" not in out


def test_pods_wide_and_json(tmp_path: Path, live_agent_pid: int) -> None:
    write_snapshot(tmp_path, pid=live_agent_pid)
    rc, out, _ = run("pods", "-o", "wide", "--config", "/dev/null", "--root-dir", str(tmp_path))
    assert rc == 0
    assert out.splitlines()[0].split()[-4:] == ["UID", "ORIGIN", "RUNTIME", "MESSAGE"]
    assert "/m/b.yaml" in out and "back-off 40s" in out
    rows = {line.split()[1]: line.split() for line in out.splitlines()[1:] if line.startswith(("default", "kube"))}
    assert "crun" in rows["b-node1"] and "<none>" in rows["a-node1"]  # a row of an older agent has no handler
    rc, out, _ = run("pods", "-o", "json", "--config", "/dev/null", "--root-dir", str(tmp_path))
    data = json.loads(out)
    # kubectl get pods -o json: a v1 List of Pods (rows of an older snapshot carry only their identity).
    assert (data["apiVersion"], data["kind"]) == ("v1", "List")
    assert {p["metadata"]["uid"] for p in data["items"]} == {"u1", "u2"}


def test_pods_json_keeps_stdout_clean_when_agent_is_down(tmp_path: Path, dead_pid: int) -> None:
    write_snapshot(tmp_path, pid=dead_pid)
    rc, out, err = run("pods", "-o", "json", "--config", "/dev/null", "--root-dir", str(tmp_path))
    assert rc == 0 and json.loads(out)["kind"] == "List" and "not running" in err


def test_pods_with_corrupt_snapshot(tmp_path: Path) -> None:
    path = Path(snapshot_path(tmp_path))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    rc, _, err = run("pods", "--config", "/dev/null", "--root-dir", str(tmp_path))
    assert rc == 1 and str(path) in err and err.count("\n") == 1


def test_is_agent_alive(dead_pid: int, live_agent_pid: int) -> None:
    assert common.is_agent_alive(live_agent_pid)
    assert not common.is_agent_alive(dead_pid)
    assert not common.is_agent_alive(0)


def test_a_reused_pid_of_another_program_is_not_the_agent() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert not common.is_agent_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()


# --- images ---------------------------------------------------------------------


def record(ref: str | None, n: int, size: int, pinned: bool = False, last_used: float = 0.0) -> ImageRecord:
    return ImageRecord(
        id=f"sha256:{n:064x}",
        digest=f"sha256:{n + 1:064x}",
        references=(ref,) if ref else (),
        config=ImageConfig(),
        layers=(),
        size=size,
        pinned=pinned,
        extra={"created": "1.000", "last_used": f"{last_used:.3f}"},
    )


class FakeStore:
    def __init__(self) -> None:
        self.records = [
            record("edgelet.local/busybox:1.36", 0xABC, 4_260_000, pinned=True, last_used=1000.0),
            record(None, 7, 1200),
        ]
        self.imported: list[Path] = []

    def list(self) -> list[ImageRecord]:
        return list(self.records)

    def import_archive(self, path: Path, *, pinned: bool = False, progress: object = None) -> list[ImageRecord]:
        if path.name == "bad.tar":
            raise ArchiveError(path, "not a tar archive")
        self.imported.append(path)
        return [record(f"local/{path.stem}:1", 0xDEF, 1_000)]


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeStore:
    fake = FakeStore()
    seen_roots: list[Path] = []

    def make(settings: Settings) -> FakeStore:
        seen_roots.append(settings.root_dir)
        return fake

    monkeypatch.setattr(cli_images, "image_store", make)
    (tmp_path / "images").mkdir()
    return fake


def test_images_list(tmp_path: Path, store: FakeStore) -> None:
    rc, out, _ = run("images", "--config", "/dev/null", "--root-dir", str(tmp_path))
    assert rc == 0
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["REFERENCE", "DIGEST", "SIZE", "PINNED", "LAST", "USED"]
    assert lines[1][:4] == ["edgelet.local/busybox:1.36", f"sha256:{0xABD:064x}", "4.26MB", "true"]
    assert lines[1][5] == "ago"
    assert lines[2] == ["<none>", f"sha256:{8:064x}", "1.2kB", "false", "never"]


@pytest.mark.parametrize(
    "last_used, want", [(0.0, "never"), (999_940.0, "1m ago"), (1e6, "0s ago"), (1e6 - 3 * 86400, "3d ago")]
)
def test_images_table_last_used(last_used: float, want: str) -> None:
    table = images_table([record("a/b:1", 1, 10, last_used=last_used)], now=1e6)
    assert table.splitlines()[1].endswith(want)


def test_images_list_without_store_creates_nothing(tmp_path: Path) -> None:
    rc, out, _ = run("images", "list", "--config", "/dev/null", "--root-dir", str(tmp_path / "none"))
    assert rc == 0 and out.split() == ["REFERENCE", "DIGEST", "SIZE", "PINNED", "LAST", "USED"]
    assert not (tmp_path / "none").exists()


def test_images_import_reports_each_file(tmp_path: Path, store: FakeStore) -> None:
    rc, out, err = run(
        "images",
        "import",
        "--config",
        "/dev/null",
        "--root-dir",
        str(tmp_path),
        str(tmp_path / "a.tar"),
        str(tmp_path / "bad.tar"),
        str(tmp_path / "b.tar"),
    )
    assert rc == 1
    assert store.imported == [tmp_path / "a.tar", tmp_path / "b.tar"]
    assert "Imported local/a:1" in out and "Imported local/b:1" in out
    assert err == f"edgelet: image archive {tmp_path / 'bad.tar'}: not a tar archive\n"


def test_images_import_needs_a_file() -> None:
    assert cli.main(["images", "import"], out=io.StringIO(), err=io.StringIO()) == 2


def test_python_dash_m_edgelet_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edgelet", "version", "--config", "/dev/null"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("edgelet ")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--runonce"], True),
        (["--runonce=true"], True),
        (["--runonce=false"], False),
        (["--register-node=false"], None),
    ],
)
def test_boolean_flags_take_an_optional_value_as_kubelets_do(argv: list[str], expected: bool | None) -> None:
    args = cli.build_parser().parse_args(["--config", "/dev/null", *argv])
    settings = cli.settings_from_args(args, env={})
    if expected is not None:
        assert settings.runonce is expected
    else:
        assert settings.register_node is False


def test_every_command_resolves_to_its_function() -> None:
    # The modules are imported at dispatch (the agent loads none of them): each name must still find its cmd_.
    for name in cli.COMMANDS:
        assert callable(cli.command(name)) and cli.command(name).__name__ == f"cmd_{name}"


# --- node ------------------------------------------------------------------------


def test_node_leads_with_the_agents_conditions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`edgelet node` shows the Node's conditions as `kubectl describe node` leads with them, and the agent's
    node name, not this command's hostname (issue 23)."""
    from edgelet.mirror.node import node_conditions

    conds = node_conditions(frozenset({"DiskPressure"}), ready=True, ready_message="edgelet is posting ready status")
    summary = {"node": {"cpu": {"usageNanoCores": 5e8}, "memory": {"workingSetBytes": 1 << 30}}, "pods": []}
    answers = {
        "/node/conditions": json.dumps(conds).encode(),
        "/stats/summary": json.dumps(summary).encode(),
        "/pods/table": msgspec.json.encode(PodsSnapshot(written_at=NOW, agent_pid=1, node_name="edge7")),
    }

    def from_agent(settings: Settings, path: str) -> bytes | None:
        if path == "/node":
            raise common.CommandError("edgelet API /node: no apiserver is configured (--kubeconfig)")
        return answers[path]

    monkeypatch.setattr(common, "from_agent", from_agent)
    rc, out, err = run("node", "--config", "/dev/null", "--root-dir", str(tmp_path), "--run-dir", str(tmp_path))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["Node:", "edge7"]
    assert lines[1] == "Conditions:"
    assert lines[2].split() == ["Type", "Status", "Reason", "Message"]
    assert lines[4].split()[:3] == ["MemoryPressure", "False", "KubeletHasSufficientMemory"]
    assert lines[5].split()[:3] == ["DiskPressure", "True", "KubeletHasDiskPressure"]
    assert lines[7].split()[:3] == ["Ready", "True", "KubeletReady"]
    assert lines[7].endswith("edgelet is posting ready status")
    assert lines[2].index("Reason") == lines[5].index("KubeletHasDiskPressure")  # a table, columns aligned
    assert lines[8] == "Capacity:"
    rc, out, err = run(
        "node", "-o", "json", "--config", "/dev/null", "--root-dir", str(tmp_path), "--run-dir", str(tmp_path)
    )
    assert rc == 0 and json.loads(out)["conditions"] == conds


def test_node_without_the_agent_says_the_conditions_are_unknown(tmp_path: Path) -> None:
    rc, out, err = run("node", "--config", "/dev/null", "--root-dir", str(tmp_path), "--run-dir", str(tmp_path))
    assert rc == 1 and "edgelet is not running" in err
    assert out.splitlines()[1].split()[:2] == ["Conditions:", "-"]
