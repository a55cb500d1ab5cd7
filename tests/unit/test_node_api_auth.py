"""The node API's pure decisions: token file, certificate identities, path -> subresource, grants, log filters."""

from __future__ import annotations

import pytest

from edgelet.server.api import since_filter
from edgelet.server.auth import (
    Attributes,
    AuthConfigError,
    Identity,
    authenticate,
    authorize,
    bearer_token,
    cert_identity,
    parse_grant,
    parse_token_file,
    request_attributes,
    token_digest,
)
from edgelet.server.nodeapi import match_node_route, running_pods
from edgelet.server.routes import HttpError, LogOptions, parse_log_options
from edgelet.server.tls import subject_alt_names


def test_token_file_forms():
    tokens = parse_token_file('# comment\n\nt1,alice,"g1,g2"\nt2,bob\nt3,carol,uid3,"system:masters"\n')
    assert tokens[token_digest("t1")] == Identity("alice", ("g1", "g2"), "token")
    assert tokens[token_digest("t2")] == Identity("bob", (), "token")
    assert tokens[token_digest("t3")] == Identity("carol", ("system:masters",), "token")
    assert b"t1" not in tokens  # keyed by digest, not the secret


@pytest.mark.parametrize(
    "text, message",
    [
        ("tokenonly\n", "line 1: expected token,user"),
        ("t,u,a,b,c\n", "too many fields"),
        ("t,u\nt,v\n", "line 2: duplicate token"),
    ],
)
def test_token_file_errors(text, message):
    with pytest.raises(AuthConfigError, match=message):
        parse_token_file(text)


@pytest.mark.parametrize(
    "headers, token",
    [
        ((("Authorization", "Bearer abc"),), "abc"),
        ((("authorization", "bearer  abc "),), "abc"),
        ((("Authorization", "Basic abc"),), None),
        ((("Authorization", "Bearer "),), None),
        ((), None),
    ],
)
def test_bearer_token(headers, token):
    assert bearer_token(headers) == token


def test_cert_identity_and_precedence():
    cert = {
        "subject": (
            (("organizationName", "system:masters"),),
            (("organizationName", "ops"),),
            (("commonName", "apiserver"),),
        )
    }
    assert cert_identity(cert) == Identity("apiserver", ("system:masters", "ops"), "x509")
    assert cert_identity({"subject": ((("organizationName", "x"),),)}) is None
    assert cert_identity(None) is None
    tokens = {token_digest("t"): Identity("tok", (), "token")}
    assert authenticate(cert, (("Authorization", "Bearer t"),), tokens).user == "apiserver"
    assert authenticate(None, (("Authorization", "Bearer t"),), tokens).user == "tok"
    assert authenticate(None, (("Authorization", "Bearer nope"),), tokens) is None
    assert authenticate(None, (), tokens) is None


@pytest.mark.parametrize(
    "method, path, verb, sub",
    [
        ("GET", "/stats/summary", "get", "stats"),
        ("GET", "/stats", "get", "stats"),
        ("GET", "/metrics", "get", "metrics"),
        ("GET", "/metrics/cadvisor", "get", "metrics"),
        ("GET", "/logs/syslog", "get", "log"),
        ("GET", "/pods", "get", "pods"),
        ("GET", "/runningpods/", "get", "pods"),
        ("GET", "/healthz", "get", "healthz"),
        ("GET", "/containerLogs/ns/p/c", "get", "proxy"),
        ("POST", "/exec/ns/p/c", "create", "proxy"),
        ("GET", "/statsfoo", "get", "proxy"),  # a prefix is not a parent path
        ("HEAD", "/metricsx", "get", "proxy"),
    ],
)
def test_request_attributes(method, path, verb, sub):
    assert request_attributes(method, path) == Attributes(verb, sub)


GRANTS = (
    parse_grant("group:monitoring=stats/metrics"),
    parse_grant("user:alice=*"),
    parse_grant("user:proxyuser=proxy"),
    parse_grant("group:system:readers=pods"),
)


@pytest.mark.parametrize(
    "ident, sub, allowed",
    [
        (Identity("admin", ("system:masters",)), "proxy", True),
        (Identity("m", ("monitoring",)), "stats", True),
        (Identity("m", ("monitoring",)), "metrics", True),
        (Identity("m", ("monitoring",)), "proxy", False),
        (Identity("m", ("monitoring",)), "pods", False),
        (Identity("alice"), "log", True),
        (Identity("proxyuser"), "stats", True),  # proxy covers the finer subresources
        (Identity("r", ("system:readers",)), "pods", True),
        (Identity("monitoring"), "stats", False),  # a user named like a group is not the group
        (Identity("nobody"), "healthz", False),
    ],
)
def test_authorize(ident, sub, allowed):
    assert authorize(ident, Attributes("get", sub), GRANTS) is allowed


@pytest.mark.parametrize(
    "text, message",
    [
        ("alice=stats", "expected user:NAME"),
        ("role:x=stats", "expected user:NAME"),
        ("user:x=", "unknown subresource"),
        ("user:x=stats/exec", "unknown subresource\\(s\\) exec"),
    ],
)
def test_parse_grant_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_grant(text)


def test_parse_grant_group_with_colons():
    g = parse_grant("group:system:monitoring=stats/metrics")
    assert (g.kind, g.name, g.subresources) == ("group", "system:monitoring", frozenset({"stats", "metrics"}))


@pytest.mark.parametrize(
    "query, expected",
    [
        ({"sinceSeconds": "10", "limitBytes": "100"}, LogOptions(since_seconds=10, limit_bytes=100)),
        ({"sinceSeconds": "0"}, "sinceSeconds: must be at least 1"),
        ({"limitBytes": "x"}, "limitBytes: expected an integer"),
    ],
)
def test_log_options(query, expected):
    if isinstance(expected, str):
        with pytest.raises(HttpError, match=expected):
            parse_log_options(query)
    else:
        assert parse_log_options(query) == expected


def test_since_filter():
    data = (
        b"2024-01-01T00:00:00.5Z old\n"
        b"2024-01-01T00:00:10.000000001+00:00 new\n"
        b"2024-01-01T01:00:20+01:00 tz\n"
        b"garbage line\n"
    )
    cutoff = 1704067205.0  # 2024-01-01T00:00:05Z
    assert since_filter(data, cutoff, keep_timestamps=False) == b"new\ntz\ngarbage line\n"
    assert since_filter(data, cutoff, keep_timestamps=True).startswith(b"2024-01-01T00:00:10.000000001+00:00 new\n")


@pytest.mark.parametrize(
    "target, endpoint",
    [
        ("/healthz", "healthz"),
        ("/pods/", "pods"),
        ("/runningpods/", "runningpods"),
        ("/metrics", "metrics"),
        ("/metrics/resource", "metrics_resource"),
        ("/metrics/cadvisor", "metrics_cadvisor"),
        ("/stats/summary", "stats_summary"),
        ("/containerLogs/a/b/c?follow=1", "container_logs"),
    ],
)
def test_match_node_route(target, endpoint):
    assert match_node_route("GET", target).endpoint == endpoint


@pytest.mark.parametrize(
    "method, target, status",
    [
        ("GET", "/events", 404),
        ("GET", "/node", 404),
        ("GET", "/containerLogs/a/b", 400),
        ("POST", "/pods", 405),
    ],
)
def test_match_node_route_errors(method, target, status):
    with pytest.raises(HttpError) as exc:
        match_node_route(method, target)
    assert exc.value.status == status


def test_running_pods_lists_only_running():
    from edgelet.container.types import ContainerRecord, PodRuntimeStatus, SandboxRecord

    sb = SandboxRecord("s", "u1", "p-n", "ns", 0, "running", 1, 0.0)
    run = ContainerRecord("c", "u1", "p-n", "ns", "app", 0, "h", "s", "running", 2, 0.0, image="img")
    done = ContainerRecord("d", "u1", "p-n", "ns", "init", 0, "h", "s", "exited", None, 0.0)
    gone = PodRuntimeStatus("u2", "q-n", "ns", (SandboxRecord("s2", "u2", "q-n", "ns", 0, "exited", None, 0.0),))
    body = running_pods({"u1": PodRuntimeStatus("u1", "p-n", "ns", (sb,), (run, done)), "u2": gone})
    assert body["items"] == [
        {
            "metadata": {"name": "p-n", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [{"name": "app", "image": "img"}]},
            "status": {},
        }
    ]


def test_subject_alt_names():
    assert (
        subject_alt_names("n1", ["10.0.0.5", "0.0.0.0", "127.0.0.1"]) == "DNS:n1,DNS:localhost,IP:127.0.0.1,IP:10.0.0.5"
    )
