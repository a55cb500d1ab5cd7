"""runonce_verdict: a pod is judged from its containers' observed states as soon as they are final."""

from __future__ import annotations

import msgspec
import pytest

from edgelet.api.types import Pod, PodStatus
from edgelet.container.types import ContainerRecord
from edgelet.status.runonce import (
    STABLE,
    exited_by_stat,
    note_running,
    note_started,
    running_ids,
    runonce_verdict,
)

NOW = 1000.0


def pod(policy: str = "Always", containers: tuple[str, ...] = ("a",)) -> Pod:
    return msgspec.convert(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"restartPolicy": policy, "containers": [{"name": n, "image": "i"} for n in containers]},
        },
        Pod,
    )


def running(name: str = "a", cid: str = "runc://1", ready: bool = True, started: bool | None = True) -> dict:
    return {
        "name": name,
        "image": "i",
        "imageID": "",
        "restartCount": 0,
        "ready": ready,
        "started": started,
        "containerID": cid,
        "state": {"running": {"startedAt": "2026-11-26T01:00:00Z"}},
    }


def exited(name: str = "a", code: int = 0) -> dict:
    return {
        "name": name,
        "image": "i",
        "imageID": "",
        "restartCount": 0,
        "ready": False,
        "containerID": "runc://9",
        "state": {"terminated": {"exitCode": code}},
    }


def waiting(name: str = "a", reason: str = "CrashLoopBackOff") -> dict:
    return {
        "name": name,
        "image": "i",
        "imageID": "",
        "restartCount": 3,
        "ready": False,
        "state": {"waiting": {"reason": reason}},
    }


def status(phase: str = "Running", *containers: dict) -> PodStatus:
    return msgspec.convert({"phase": phase, "containerStatuses": list(containers)}, PodStatus)


LONG_AGO = {"runc://1": NOW - STABLE, "runc://2": NOW - 5}
JUST_NOW = {"runc://1": NOW - 0.1}

CASES = [
    # (id, pod, status, seen, expected (failed, pending, next_check))
    ("no status published yet: pending", pod(), None, {}, ((), ("ns/p",), None)),
    ("running, ready, seen running for STABLE: done", pod(), status("Running", running()), LONG_AGO, ((), (), None)),
    (
        "running but just started: pending until it is stable",
        pod(),
        status("Running", running()),
        JUST_NOW,
        ((), ("ns/p",), NOW - 0.1 + STABLE),
    ),
    (
        "running, not seen before (the verdict notes it now): pending",
        pod(),
        status("Running", running()),
        {},
        ((), ("ns/p",), None),
    ),
    (
        "running but not ready (a readiness probe has not passed): pending",
        pod(),
        status("Running", running(ready=False)),
        LONG_AGO,
        ((), ("ns/p",), None),
    ),
    (
        "running but its startup probe has not passed: pending",
        pod(),
        status("Running", running(ready=True, started=False)),
        LONG_AGO,
        ((), ("ns/p",), None),
    ),
    (
        "waiting in CrashLoopBackOff (restarting): pending",
        pod(),
        status("Running", waiting()),
        LONG_AGO,
        ((), ("ns/p",), None),
    ),
    ("completed under OnFailure: done", pod("OnFailure"), status("Running", exited()), {}, ((), (), None)),
    (
        "exited 0 under Always (it will restart): pending",
        pod("Always"),
        status("Running", exited()),
        {},
        ((), ("ns/p",), None),
    ),
    (
        "exited 1 under OnFailure (it will restart): pending",
        pod("OnFailure"),
        status("Running", exited(code=1)),
        {},
        ((), ("ns/p",), None),
    ),
    ("Succeeded: done", pod("Never"), status("Succeeded", exited()), {}, ((), (), None)),
    ("Failed: final, fails the run", pod("Never"), status("Failed", exited(code=1)), {}, (("ns/p",), (), None)),
    (
        "one of two containers not running: pending",
        pod(containers=("a", "b")),
        status("Running", running(), waiting("b", "ContainerCreating")),
        LONG_AGO,
        ((), ("ns/p",), None),
    ),
    (
        "two stable containers: done",
        pod(containers=("a", "b")),
        status("Running", running(), running("b", "runc://2")),
        LONG_AGO,
        ((), (), None),
    ),
]


@pytest.mark.parametrize(
    ("the_pod", "the_status", "seen", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_runonce_verdict(the_pod, the_status, seen, expected) -> None:
    verdict = runonce_verdict({"u1": the_pod}, {"u1": the_status}, seen, NOW)
    assert (verdict.failed, verdict.pending, verdict.next_check) == expected
    assert verdict.done == (not expected[1])


GONE_CASES = [
    # (id, status, gone, expected (pending, next_check))
    ("stable and its process still there: done", status("Running", running()), set(), ((), None)),
    (
        "stable but its process exited (the status has not caught up): pending, woken by that status",
        status("Running", running()),
        {"runc://1"},
        (("ns/p",), None),
    ),
    ("another instance gone does not matter", status("Running", running()), {"runc://7"}, ((), None)),
    (
        "two containers, one gone: pending",
        status("Running", running(), running("b", "runc://2")),
        {"runc://2"},
        (("ns/p",), None),
    ),
]


@pytest.mark.parametrize(
    ("the_status", "gone", "expected"), [c[1:] for c in GONE_CASES], ids=[c[0] for c in GONE_CASES]
)
def test_runonce_verdict_reads_whether_the_process_is_still_there(the_status, gone, expected) -> None:
    the_pod = pod(containers=tuple(cs.name for cs in the_status.container_statuses))
    verdict = runonce_verdict({"u1": the_pod}, {"u1": the_status}, LONG_AGO, NOW, gone=gone)
    assert (verdict.pending, verdict.next_check) == expected


def record(cid: str, state: str = "running", started_at: float | None = None, pid: int | None = 42) -> ContainerRecord:
    return ContainerRecord(
        id=cid,
        pod_uid="u1",
        pod_name="p",
        pod_namespace="ns",
        name="a",
        attempt=0,
        spec_hash="h",
        sandbox_id="s",
        state=state,
        pid=pid,  # type: ignore[arg-type]
        created_at=0.0,
        started_at=started_at,
    )


WALL = 5_000_000.0
STARTED_CASES = [
    # (id, record, expected started (monotonic), pids)
    (
        "its runc start, 0.2 s of wall time ago: 0.2 s before now",
        record("1", started_at=WALL - 0.2),
        {"runc://1": NOW - 0.2},
        {"runc://1": 42},
    ),
    (
        "a start time in the future (a clock step): counts from now",
        record("1", started_at=WALL + 5),
        {"runc://1": NOW},
        {"runc://1": 42},
    ),
    (
        "no start time (adopted from an older edgelet): counts from now",
        record("1", started_at=None),
        {"runc://1": NOW},
        {"runc://1": 42},
    ),
    ("exited: not noted", record("1", state="exited", started_at=WALL - 1), {}, {}),
    ("created, not started: not noted", record("1", state="created"), {}, {}),
    ("no pid: its start is noted, not a pid", record("1", started_at=WALL, pid=None), {"runc://1": NOW}, {}),
]


@pytest.mark.parametrize(
    ("rec", "expected", "expected_pids"), [c[1:] for c in STARTED_CASES], ids=[c[0] for c in STARTED_CASES]
)
def test_note_started_counts_from_the_process_start(rec, expected, expected_pids) -> None:
    started: dict[str, float] = {}
    pids: dict[str, int] = {}
    note_started(started, pids, [rec], NOW, WALL)
    assert started == pytest.approx(expected)
    assert pids == expected_pids


def test_note_started_keeps_the_first_start_of_an_instance() -> None:
    started: dict[str, float] = {}
    pids: dict[str, int] = {}
    note_started(started, pids, [record("1", started_at=WALL - 1)], NOW, WALL)
    note_started(started, pids, [record("1", started_at=WALL - 1)], NOW + 3, WALL + 3.5)
    assert started == {"runc://1": NOW - 1}


STAT_CASES = [
    ("running", b"42 (sleep) S 1 42 42 0 -1", False),
    ("a zombie its conmon has not reaped", b"42 (sh) Z 1 42 42 0 -1", True),
    ("dead", b"42 (sh) X 1 42", True),
    ("a command name holding ') Z'", b"42 (a) Z (b) R 1 42", False),
    ("empty (the process went as it was read)", b"", True),
]


@pytest.mark.parametrize(("stat", "expected"), [c[1:] for c in STAT_CASES], ids=[c[0] for c in STAT_CASES])
def test_exited_by_stat(stat, expected) -> None:
    assert exited_by_stat(stat) is expected


def test_running_ids() -> None:
    assert running_ids([status("Running", running(), exited("b"), waiting("c")), None]) == ["runc://1"]


def test_a_restarted_instance_starts_its_stable_time_again() -> None:
    """kubelet's rule that a container must not be restarting: a new instance (new containerID) is judged anew."""
    seen: dict[str, float] = {}
    note_running(seen, [status("Running", running(cid="runc://1"))], NOW - 10)
    note_running(seen, [status("Running", running(cid="runc://1"))], NOW - 5)
    assert seen == {"runc://1": NOW - 10}, "the first sighting counts"
    note_running(seen, [status("Running", running(cid="runc://3"))], NOW)
    verdict = runonce_verdict({"u1": pod()}, {"u1": status("Running", running(cid="runc://3"))}, seen, NOW)
    assert verdict.pending == ("ns/p",) and verdict.next_check == NOW + STABLE
