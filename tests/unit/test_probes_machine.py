"""Table tests for the probe state machine (kubelet prober worker semantics) on a FakeClock, and the results cache."""

from __future__ import annotations

import msgspec
import pytest

from edgelet.api.types import Probe
from edgelet.probes.machine import ProbeMachine, ProbeParams, Result, ResultsCache, initial_result
from edgelet.util.clock import FakeClock

S, F = Result.SUCCESS, Result.FAILURE


def params(kind="liveness", **probe) -> ProbeParams:
    return ProbeParams.from_probe(kind, msgspec.convert(probe, Probe))


def test_defaults_are_kubelets():
    p = params("readiness")
    assert (p.initial_delay, p.period, p.timeout, p.success_threshold, p.failure_threshold) == (0, 10, 1, 1, 3)
    assert p.termination_grace is None


def test_liveness_success_threshold_is_forced_to_one():
    assert params("liveness", successThreshold=3).success_threshold == 1
    assert params("readiness", successThreshold=3).success_threshold == 3


@pytest.mark.parametrize("kind, expected", [("readiness", F), ("liveness", S), ("startup", Result.UNKNOWN)])
def test_initial_results(kind, expected):
    assert initial_result(kind) == expected
    assert ProbeMachine(params(kind)).result == expected


# (kind, probe fields, results fed in order, published result after each, on_hold at the end)
CASES = [
    ("liveness: one failure is below the default threshold of 3", "liveness", {}, [F], [S], False),
    ("liveness: three failures in a row fail and hold the worker", "liveness", {}, [F, F, F], [S, S, F], True),
    ("liveness: a success in between resets the run", "liveness", {}, [F, F, S, F, F], [S, S, S, S, S], False),
    ("liveness: failureThreshold 1 fails at once", "liveness", {"failureThreshold": 1}, [F], [F], True),
    ("readiness: first success makes it ready", "readiness", {}, [S], [S], False),
    (
        "readiness: successThreshold 2 needs two in a row",
        "readiness",
        {"successThreshold": 2},
        [S, F, S, S],
        [F, F, F, S],
        False,
    ),
    (
        "readiness: flips both ways and never holds",
        "readiness",
        {"failureThreshold": 2},
        [S, F, F, F, S],
        [S, S, F, F, S],
        False,
    ),
    (
        "startup: success after failures below the threshold",
        "startup",
        {"failureThreshold": 3},
        [F, F, S],
        [Result.UNKNOWN, Result.UNKNOWN, S],
        False,
    ),
    (
        "startup: failureThreshold failures fail and hold",
        "startup",
        {"failureThreshold": 2},
        [F, F],
        [Result.UNKNOWN, F],
        True,
    ),
]


@pytest.mark.parametrize("name, kind, probe, feed, published, hold", CASES, ids=[c[0] for c in CASES])
def test_thresholds(name, kind, probe, feed, published, hold):
    m = ProbeMachine(params(kind, **probe))
    got = []
    for r in feed:
        m.record(r)
        got.append(m.result)
    assert got == published
    assert m.on_hold is hold


def test_record_reports_changes_only():
    m = ProbeMachine(params("readiness"))
    assert [m.record(r) for r in (S, S, F, F, F, F)] == [True, False, False, False, True, False]


# Gate: (kind, initialDelaySeconds, seconds since start, container started, expected)
GATES = [
    ("liveness", 0, 0.0, True, True),
    ("liveness", 0, 0.0, False, False),  # the startup gate
    ("readiness", 0, 5.0, False, False),
    ("readiness", 0, 5.0, True, True),
    ("startup", 0, 0.0, False, True),
    ("startup", 0, 0.0, True, False),  # startup stops once started
    ("liveness", 5, 4.9, True, False),  # kubelet truncates elapsed seconds: 4.9 -> 4 < 5
    ("liveness", 5, 5.0, True, True),
    ("startup", 3, 2.99, False, False),
    ("startup", 3, 3.0, False, True),
]


@pytest.mark.parametrize("kind, delay, elapsed, started, expected", GATES)
def test_gate(kind, delay, elapsed, started, expected):
    clock = FakeClock()
    started_at = clock.now()
    clock.advance(elapsed)
    m = ProbeMachine(params(kind, initialDelaySeconds=delay))
    assert m.should_probe(now=clock.now(), started_at=started_at, started=started) is expected


def test_held_worker_does_not_probe():
    clock = FakeClock()
    m = ProbeMachine(params("liveness", failureThreshold=1))
    m.record(F)
    assert not m.should_probe(now=clock.now(), started_at=clock.now() - 100, started=True)


def test_startup_gates_liveness_over_time():
    """A run on the fake clock: liveness only probes once startup published Success."""
    clock = FakeClock()
    started_at = clock.now()
    startup = ProbeMachine(params("startup", periodSeconds=1, failureThreshold=5))
    liveness = ProbeMachine(params("liveness", periodSeconds=1))
    startup_feed = iter([F, F, S])
    trace = []
    for _ in range(5):
        started = startup.result == S
        if startup.should_probe(now=clock.now(), started_at=started_at, started=started):
            startup.record(next(startup_feed))
            trace.append("startup")
        started = startup.result == S
        if liveness.should_probe(now=clock.now(), started_at=started_at, started=started):
            liveness.record(S)
            trace.append("liveness")
        clock.advance(1)
    assert trace == ["startup", "startup", "startup", "liveness", "liveness", "liveness"]


def test_results_cache_keyed_by_container_id():
    cache = ResultsCache()
    assert cache.set("readiness", "u1", "app", "c1", S) is True
    assert cache.set("readiness", "u1", "app", "c1", S) is False
    # The restarted container is a new key: nothing carried over.
    assert cache.get("readiness", "u1", "app", "c2") is None
    cache.set("liveness", "u2", "app", "c9", F)
    cache.remove_pod("u1")
    assert cache.of_pod("u1") == {}
    assert cache.get("liveness", "u2", "app", "c9") == F
