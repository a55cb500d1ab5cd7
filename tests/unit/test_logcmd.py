"""`edgelet logs`: resolving what the user typed, and the query sent to /containerLogs."""

from __future__ import annotations

import pytest

from edgelet.cli import build_parser
from edgelet.cli.logs import LogCommandError, LogRequest, log_query, resolve_container, resolve_pod

PODS = [("default", "web-node1", "node1"), ("default", "db", ""), ("kube-system", "web-node1", "node1")]


@pytest.mark.parametrize("ns, name, expected", [
    ("default", "web-node1", "web-node1"),
    ("default", "web", "web-node1"),
    ("default", "db", "db"),
    ("kube-system", "web", "web-node1"),
])
def test_resolve_pod(ns, name, expected):
    assert resolve_pod(PODS, ns, name) == expected


@pytest.mark.parametrize("ns, name", [("default", "we"), ("other", "web"), ("default", "db-node1")])
def test_resolve_pod_not_found(ns, name):
    with pytest.raises(LogCommandError, match=f"pod {ns}/{name} not found"):
        resolve_pod(PODS, ns, name)


@pytest.mark.parametrize("containers, requested, expected", [
    (["app"], None, "app"),
    (["app", "side"], "side", "side"),
])
def test_resolve_container(containers, requested, expected):
    assert resolve_container(containers, requested, "default/p") == expected


@pytest.mark.parametrize("containers, requested, text", [
    (["app", "side"], None, "several containers; name one of: app, side"),
    (["app"], "nope", "container 'nope' not found in pod default/p (it has: app)"),
    ([], None, "no container logs"),
])
def test_resolve_container_errors(containers, requested, text):
    with pytest.raises(LogCommandError, match=text.replace("(", r"\(").replace(")", r"\)")):
        resolve_container(containers, requested, "default/p")


@pytest.mark.parametrize("req, query", [
    (LogRequest("default", "p"), ""),
    (LogRequest("default", "p", tail=5, follow=True), "?tailLines=5&follow=true"),
    (LogRequest("default", "p", tail=-1, previous=True, timestamps=True), "?previous=true&timestamps=true"),
])
def test_log_query(req, query):
    assert log_query(req) == query


def test_parser_knows_logs_and_check():
    args = build_parser().parse_args(["logs", "-f", "--tail", "3", "-p", "-n", "kube-system", "web", "app"])
    assert (args.command, args.follow, args.tail, args.previous, args.namespace, args.pod, args.container) == \
        ("logs", True, 3, True, "kube-system", "web", "app")
    args = build_parser().parse_args(["check", "--runtime", "crun"])
    assert args.command == "check" and args.runtime == "crun"
