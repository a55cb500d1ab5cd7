"""`edgelet logs`: resolving what the user typed, and the query sent to /containerLogs."""

from __future__ import annotations

import pytest

from edgelet.cli import build_parser
from edgelet.cli.logs import LogCommandError, LogRequest, log_query, resolve_container, resolve_pod

PODS = [("default", "web-node1", "node1"), ("default", "db", ""), ("kube-system", "web-node1", "node1")]


@pytest.mark.parametrize(
    "ns, name, expected",
    [
        ("default", "web-node1", "web-node1"),
        ("default", "web", "web-node1"),
        ("default", "db", "db"),
        ("kube-system", "web", "web-node1"),
    ],
)
def test_resolve_pod(ns, name, expected):
    assert resolve_pod(PODS, ns, name) == expected


@pytest.mark.parametrize("ns, name", [("default", "we"), ("other", "web"), ("default", "db-node1")])
def test_resolve_pod_not_found(ns, name):
    with pytest.raises(LogCommandError, match=f"pod {ns}/{name} not found"):
        resolve_pod(PODS, ns, name)


@pytest.mark.parametrize(
    "containers, requested, expected",
    [
        (["app"], None, "app"),
        (["app", "side"], "side", "side"),
    ],
)
def test_resolve_container(containers, requested, expected):
    assert resolve_container(containers, requested, "default/p") == expected


@pytest.mark.parametrize(
    "containers, requested, text",
    [
        (["app", "side"], None, "several containers; name one of: app, side"),
        (["app"], "nope", "container 'nope' not found in pod default/p (it has: app)"),
        ([], None, "no container logs"),
    ],
)
def test_resolve_container_errors(containers, requested, text):
    with pytest.raises(LogCommandError, match=text.replace("(", r"\(").replace(")", r"\)")):
        resolve_container(containers, requested, "default/p")


@pytest.mark.parametrize(
    "req, query",
    [
        (LogRequest("default", "p"), ""),
        (LogRequest("default", "p", tail=5, follow=True), "?tailLines=5&follow=true"),
        (LogRequest("default", "p", tail=-1, previous=True, timestamps=True), "?previous=true&timestamps=true"),
    ],
)
def test_log_query(req, query):
    assert log_query(req) == query


def test_parser_knows_logs_and_check():
    args = build_parser().parse_args(["logs", "-f", "--tail", "3", "-p", "-n", "kube-system", "web", "app"])
    assert (args.command, args.follow, args.tail, args.previous, args.namespace, args.pod, args.container) == (
        "logs",
        True,
        3,
        True,
        "kube-system",
        "web",
        "app",
    )
    args = build_parser().parse_args(["check", "--runtime", "crun"])
    assert args.command == "check" and args.runtime == "crun"


def test_logs_with_the_agent_down_read_across_rotated_files(tmp_path):
    import gzip
    import io

    from edgelet.cli.logs import print_logs
    from edgelet.settings import load_settings

    settings = load_settings(
        {"root_dir": str(tmp_path / "root"), "run_dir": str(tmp_path / "run"), "log_dir": str(tmp_path / "log")},
        env={},
        default_config=tmp_path / "none.toml",
    )
    d = tmp_path / "log" / "pods" / "default_web_uid1" / "app"
    d.mkdir(parents=True)
    t = b"2024-05-01T10:00:00.000000000Z stdout F "
    (d / "0.log").write_bytes(t + b"zero\n")
    (d / "1.log.20240501-100000.000000.gz").write_bytes(gzip.compress(t + b"a\n" + t + b"b\n"))
    (d / "1.log.20240501-100001.000000").write_bytes(t + b"c\n")
    (d / "1.log").write_bytes(t + b"d\n")
    out = io.StringIO()
    print_logs(
        settings,
        LogRequest(
            namespace="default", pod="web", container=None, follow=False, tail=3, previous=False, timestamps=False
        ),
        out,
        io.StringIO(),
    )
    assert out.getvalue() == "b\nc\nd\n"
    out = io.StringIO()
    print_logs(
        settings,
        LogRequest(
            namespace="default", pod="web", container=None, follow=False, tail=None, previous=True, timestamps=False
        ),
        out,
        io.StringIO(),
    )
    assert out.getvalue() == "zero\n"
