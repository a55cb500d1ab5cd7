"""Pure parts of the local API: routing, query parsing, Status bodies, healthz rules, metrics decisions."""

from __future__ import annotations

import json

import pytest

from edgelet.api.types import (
    ContainerState,
    ContainerStateRunning,
    ContainerStateTerminated,
    ContainerStateWaiting,
    ContainerStatus,
    PodStatus,
)
from edgelet.server.api import is_instance_finished
from edgelet.server.health import check_health, render_health
from edgelet.server.metrics import count_running, parse_seen, should_observe_start
from edgelet.server.routes import HttpError, LogOptions, match_route, parse_log_options, status_body


@pytest.mark.parametrize(
    "method, target, endpoint, params",
    [
        ("GET", "/healthz", "healthz", {}),
        ("HEAD", "/healthz", "healthz", {}),
        ("GET", "/pods", "pods", {}),
        ("GET", "/pods/", "pods", {}),
        ("GET", "/pods/table", "pods_table", {}),
        ("GET", "/events", "events", {}),
        ("GET", "/metrics", "metrics", {}),
        ("GET", "/node", "node", {}),
        ("GET", "/node/conditions", "node_conditions", {}),
        ("GET", "/stats/summary", "stats_summary", {}),
        ("GET", "/debug/cpu", "debug_cpu", {}),
        (
            "GET",
            "/containerLogs/default/web-n1/app",
            "container_logs",
            {"namespace": "default", "pod": "web-n1", "container": "app"},
        ),
        (
            "GET",
            "/containerLogs/kube-system/a%20b/c?tailLines=3",
            "container_logs",
            {"namespace": "kube-system", "pod": "a b", "container": "c"},
        ),
    ],
)
def test_match_route(method, target, endpoint, params):
    route = match_route(method, target)
    assert route.endpoint == endpoint
    assert route.params == params


@pytest.mark.parametrize(
    "method, target, status, text",
    [
        ("GET", "/", 404, "could not find"),
        ("GET", "/spec/", 404, "/spec/"),
        ("GET", "/containerLogs/default/pod", 400, "{namespace}/{pod}/{container}"),
        ("GET", "/containerLogs/default/pod/c/extra", 400, "{namespace}/{pod}/{container}"),
        # An encoded slash stays inside its segment: it cannot reach another path.
        ("GET", "/containerLogs/default/a%2Fb/c/d", 400, "{namespace}"),
        ("POST", "/pods", 405, "POST"),
        ("DELETE", "/healthz", 405, "DELETE"),
    ],
)
def test_match_route_errors(method, target, status, text):
    with pytest.raises(HttpError) as info:
        match_route(method, target)
    assert info.value.status == status
    assert text in info.value.message


def test_method_not_allowed_names_the_allowed_ones():
    with pytest.raises(HttpError) as info:
        match_route("PUT", "/metrics")
    assert ("Allow", "GET, HEAD") in info.value.headers


@pytest.mark.parametrize(
    "query, expected",
    [
        ({}, LogOptions()),
        ({"tailLines": "10"}, LogOptions(tail_lines=10)),
        ({"tailLines": "0"}, LogOptions(tail_lines=0)),
        ({"follow": "true", "previous": "false"}, LogOptions(follow=True)),
        ({"follow": ""}, LogOptions(follow=True)),
        ({"previous": "1", "timestamps": "TRUE"}, LogOptions(previous=True, timestamps=True)),
    ],
)
def test_parse_log_options(query, expected):
    assert parse_log_options(query) == expected


@pytest.mark.parametrize(
    "query, text",
    [
        ({"tailLines": "x"}, "tailLines: expected an integer"),
        ({"tailLines": "-2"}, "tailLines: must be zero or more"),
        ({"follow": "yes-please"}, "follow: expected true or false"),
    ],
)
def test_parse_log_options_errors(query, text):
    with pytest.raises(HttpError) as info:
        parse_log_options(query)
    assert info.value.status == 400
    assert text in info.value.message


def test_status_body_is_a_v1_status():
    body = json.loads(status_body(HttpError(404, "pod default/x not found")))
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "pod default/x not found",
        "reason": "NotFound",
        "code": 404,
    }


# --- healthz -------------------------------------------------------------------


@pytest.mark.parametrize(
    "now, sync, relist, status, failing",
    [
        (100.0, 99.0, 95.0, 200, []),
        (100.0, None, 95.0, 500, ["syncloop failed: sync loop not started yet"]),
        (100.0, 99.0, None, 500, ["pleg failed: pleg has yet to be successful"]),
        (1000.0, 999.0, 1000.0 - 181, 500, ["pleg failed: pleg was last seen active 3m1s ago; threshold is 3m0s"]),
        (1000.0, 999.0, 1000.0 - 180, 200, []),
        (1000.0, 1000.0 - 301, 999.0, 500, ["syncloop failed: sync loop took longer than expected"]),
    ],
)
def test_healthz(now, sync, relist, status, failing):
    code, body = render_health(check_health(now, sync, relist))
    assert code == status
    if status == 200:
        assert body == b"ok"
    else:
        text = body.decode()
        assert "[+]ping ok" in text and text.endswith("healthz check failed\n")
        for f in failing:
            assert f in text


def test_healthz_verbose_lists_every_check():
    code, body = render_health(check_health(10.0, 9.0, 9.0), verbose=True)
    assert code == 200
    assert body.decode().splitlines() == ["[+]ping ok", "[+]syncloop ok", "[+]pleg ok", "healthz check passed"]


# --- metrics decisions ------------------------------------------------------------


@pytest.mark.parametrize(
    "before, after, observe",
    [
        (None, "Running", True),
        ("Pending", "Running", True),
        ("Running", "Running", False),
        ("Pending", "Pending", False),
        (None, "Succeeded", False),
        ("Failed", "Running", False),
    ],
)
def test_should_observe_start(before, after, observe):
    assert should_observe_start(before, after) is observe


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2024-05-01T10:00:00Z", 1714557600.0),
        ("2024-05-01T10:00:00.25Z", 1714557600.25),
        ("2024-05-01T10:00:00.123456789Z", 1714557600.123456789),
        ("", None),
        (None, None),
        ("yesterday", None),
    ],
)
def test_parse_seen(value, expected):
    got = parse_seen(value)
    assert got == pytest.approx(expected) if expected is not None else got is None


def _cs(name: str, state: ContainerState, restarts: int = 0, last: ContainerState | None = None) -> ContainerStatus:
    return ContainerStatus(
        name=name, image="i", image_id="", ready=False, restart_count=restarts, state=state, last_state=last
    )


RUNNING = ContainerState(running=ContainerStateRunning())
EXITED = ContainerState(terminated=ContainerStateTerminated(exit_code=0))
WAITING = ContainerState(waiting=ContainerStateWaiting(reason="ContainerCreating"))


def test_count_running():
    statuses = [
        PodStatus(phase="Running", container_statuses=[_cs("a", RUNNING), _cs("b", EXITED)]),
        PodStatus(phase="Pending", container_statuses=[_cs("a", WAITING)]),
        PodStatus(phase="Succeeded", container_statuses=[_cs("a", EXITED)], init_container_statuses=[_cs("i", EXITED)]),
    ]
    assert count_running(statuses) == (1, {"running": 1, "exited": 3})


@pytest.mark.parametrize(
    "status, attempt, finished",
    [
        (_cs("a", RUNNING, 0), 0, False),
        (_cs("a", WAITING, 0), 0, False),  # not reported running yet: keep following
        (_cs("a", EXITED, 0), 0, True),
        (_cs("a", ContainerState(waiting=ContainerStateWaiting(reason="CrashLoopBackOff")), 0, EXITED), 0, True),
        (_cs("a", RUNNING, 2), 1, True),  # a newer instance runs
        (_cs("a", RUNNING, 1), 2, False),  # status lags the instance being followed
    ],
)
def test_is_instance_finished(status, attempt, finished):
    assert is_instance_finished(status, attempt) is finished


def test_histogram_buckets_are_cumulative_and_render_without_importing_until_scraped():
    import sys

    from edgelet.server.metrics import Metrics, _Histogram
    from edgelet.util.clock import FakeClock

    h = _Histogram((0.5, 1, 2))
    for v in (0.1, 0.5, 0.7, 3.0):
        h.observe(v)
    assert h.cumulative() == [("0.5", 2), ("1.0", 3), ("2.0", 3), ("+Inf", 4)]
    assert h.sum == 4.3
    m = Metrics(FakeClock())
    m.runtime_operations["start_container"] += 2
    body = m.render().decode()
    assert 'edgelet_runtime_operations_total{operation_type="start_container"} 2.0' in body
    assert 'edgelet_pod_start_duration_seconds_bucket{le="+Inf"} 0.0' in body
    assert "prometheus_client" in sys.modules  # imported by the scrape, not before
    assert "edgelet_update_outcomes" not in body  # no self-update on this agent
    m.update_outcomes = lambda: ({"committed": 2, "rolled-back": 1}, True)
    body = m.render().decode()
    assert 'edgelet_update_outcomes_total{outcome="committed"} 2.0' in body
    assert 'edgelet_update_outcomes_total{outcome="rolled-back"} 1.0' in body
    assert "edgelet_update_trial 1.0" in body


def test_event_messages_name_their_file_once() -> None:
    from edgelet.sync.loop import _with_origin

    assert _with_origin("/m/bad.yaml", "/m/bad.yaml: $.spec: Required value") == "/m/bad.yaml: $.spec: Required value"
    assert _with_origin("/m/bad.yaml", "$.spec: Required value") == "/m/bad.yaml: $.spec: Required value"


def test_rollout_routes():
    from edgelet.server.routes import HttpError, match_route

    assert match_route("GET", "/rollout").endpoint == "rollout"
    r = match_route("POST", "/rollout/retry/default/app-node")
    assert (r.endpoint, r.params) == ("rollout_retry", {"namespace": "default", "pod": "app-node"})
    for method, target, status in (
        ("GET", "/rollout/retry/default/app", 405),
        ("POST", "/rollout/retry/x", 400),
        ("POST", "/rollout", 405),
    ):
        try:
            match_route(method, target)
        except HttpError as exc:
            assert exc.status == status, (method, target, exc.status)
        else:
            raise AssertionError((method, target))
